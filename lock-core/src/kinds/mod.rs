//! Lock kinds beyond the mutex, each a small primitive backend trait plus a
//! manager whose guard is the shared [`guard::KindGuard`], which reuses the
//! mutex's lifecycle (renewal, `lost()`, scoped helpers, cancellation
//! safety, fencing tokens).

pub mod election;
pub mod guard;
pub mod multi;
pub mod rw;
pub mod semaphore;
