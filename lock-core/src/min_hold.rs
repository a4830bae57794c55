//! The minimum hold ([`crate::LockOptions::min_hold`]): a release before the
//! hold is over shortens the lease to what is left of it instead of
//! deleting the key.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{LockBackend, ReleaseOutcome, RenewOutcome};
use crate::error::{Error, Result};
use crate::lease::LeaseState;

/// What is left now of a hold of `min_hold` from `acquired_at`, as a TTL
/// `backend` accepts (raised to its minimum, at most its maximum), or
/// `None` when the hold is over (or there is none: no clock read then).
pub(crate) fn hold_left(backend: &dyn LockBackend, acquired_at: Instant, min_hold: Duration) -> Option<Duration> {
    if min_hold.is_zero() {
        return None;
    }
    let left = (acquired_at + min_hold).checked_duration_since(Instant::now())?;
    if left.is_zero() {
        return None;
    }
    let caps = backend.capabilities();
    Some(left.max(caps.min_ttl).max(crate::validate::MIN_TTL).min(caps.max_ttl))
}

/// The release of a lease whose minimum hold is not over: an owner-checked
/// renewal to `left`, answered as a release (`Renewed`: the key stays ours
/// until it expires, nobody else's before). Sent in the lease's turn of TTL
/// changes (after a renewal in flight, never overtaken by one: the renewer
/// was stopped first and skips a stopped lease under the turn).
pub(crate) async fn shorten(lease: &LeaseState, left: Duration, op_timeout: Duration) -> Result<ReleaseOutcome> {
    let backend = &*lease.ctx.backend;
    let renewal = async {
        let _turn = lease.ttl_change.lock().await;
        backend.renew(&lease.key, &lease.token, left).await
    };
    match tokio::time::timeout(op_timeout, renewal).await {
        Ok(Ok(RenewOutcome::Renewed)) if !backend.capabilities().lease_expires => {
            // No TTL ends the lock (it lives with its session): released
            // in the background once the hold is over.
            release_after(lease, left, op_timeout);
            Ok(ReleaseOutcome::Released)
        }
        Ok(Ok(RenewOutcome::Renewed)) => Ok(ReleaseOutcome::Released),
        Ok(Ok(RenewOutcome::HeldByOther)) => Ok(ReleaseOutcome::HeldByOther),
        Ok(Ok(_)) => Ok(ReleaseOutcome::Missing),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::outcome_unknown(
            backend.capabilities().name,
            "release (shortening the lease to the minimum hold) timed out",
        )),
    }
}

/// The release of a lease whose backend keeps the key until it is released
/// ([`Capabilities::lease_expires`](crate::Capabilities::lease_expires)
/// false): sent once `left` has passed.
fn release_after(lease: &LeaseState, left: Duration, op_timeout: Duration) {
    let (backend, key, token) = (lease.ctx.backend.clone(), lease.key.clone(), lease.token);
    let lanes = lease.ctx.lanes.clone();
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    crate::background::spawn(&handle, async move {
        tokio::time::sleep(left).await;
        match tokio::time::timeout(op_timeout, backend.release(&key, &token)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::debug!(key, error = %e, "release after the minimum hold failed"),
            Err(_) => tracing::debug!(key, "release after the minimum hold timed out"),
        }
        lanes.notify_released(&key);
    });
}

/// [`shorten`] in the background (the guard's drop), as
/// [`crate::guard::spawn_release`] releases: the TTL frees the key if it
/// fails.
pub(crate) fn spawn_shorten(lease: Arc<LeaseState>, left: Duration, op_timeout: Duration) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return; // the key keeps its TTL
    };
    crate::background::spawn(&handle, async move {
        if let Err(e) = shorten(&lease, left, op_timeout).await {
            let key = &lease.key;
            tracing::debug!(key, error = %e, "shortening the lease to the minimum hold failed; the TTL will free it");
        }
    });
}
