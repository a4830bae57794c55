//! Lock kinds beyond the mutex, each a small primitive backend trait plus a
//! manager-level guard that reuses the mutex's lifecycle (renewal, `lost()`,
//! scoped helpers, cancellation safety, fencing tokens).

pub mod election;
pub mod election_lua;
pub mod multi;
pub mod multi_lua;
pub mod rw;
pub mod rw_lua;
pub mod semaphore;
pub mod semaphore_lua;
