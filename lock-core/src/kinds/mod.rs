//! Lock kinds beyond the mutex, each a small primitive backend trait plus a
//! manager-level guard that reuses the mutex's lifecycle (renewal, `lost()`,
//! scoped helpers, cancellation safety, fencing tokens).

pub mod election;
pub mod election_lua;
pub mod multi;
pub mod multi_lua;
pub mod rw;
pub mod rw_lua;
pub mod scripted;
pub mod semaphore;
pub mod semaphore_lua;

use std::future::Future;

use crate::error::Result;
use crate::guard::{LeaseHandle, LockGuard};

/// Runs `body` while `guard` holds, for every kind's `with_*` helper, with
/// the mutex's `with_lock` semantics (see `crate::manager::run_while_held`):
/// [`crate::Error::Lost`] (naming `what`) on loss during the body, on a body
/// that returned past the deadline, or on a release that found the lease
/// gone; otherwise the guard is released and the body's output returned.
pub(crate) async fn while_held<F, Fut, T>(guard: LockGuard, what: String, body: F) -> Result<T>
where
    F: FnOnce(LeaseHandle) -> Fut,
    Fut: Future<Output = T>,
{
    crate::manager::run_while_held(guard, &what, body).await
}
