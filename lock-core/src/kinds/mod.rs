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

use std::future::Future;

use crate::error::{Error, Result};
use crate::guard::{LeaseHandle, LockGuard};

/// Runs `body` while `guard` holds, for every kind's `with_*` helper: on
/// loss the body is dropped at its next await point and [`Error::Lost`]
/// (naming `what`) returned; otherwise the guard is released and the body's
/// output returned.
pub(crate) async fn while_held<F, Fut, T>(guard: LockGuard, what: String, body: F) -> Result<T>
where
    F: FnOnce(LeaseHandle) -> Fut,
    Fut: Future<Output = T>,
{
    let lost = guard.lost();
    let handle = guard.handle();
    let out = tokio::select! {
        biased;
        reason = lost => {
            let held_for = guard.acquired_at().elapsed();
            drop(guard); // best-effort release in the background
            return Err(Error::Lost { key: what, held_for, reason });
        }
        out = body(handle) => out,
    };
    if let Err(e) = guard.release().await {
        tracing::debug!(what, error = %e, "release after the scoped body failed; the lease will expire");
    }
    Ok(out)
}
