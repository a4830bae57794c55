//! Clean-up guards of the acquire engine: whatever an acquire call may have
//! left on the backend (a grant whose reply was lost, a fair waiter's queue
//! entry, a kept token's waiting mark) is taken back when the call ends
//! without a grant, including when its future is dropped.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::{FairWaiter, LockBackend};
use crate::guard::spawn_release;
use crate::token::LockToken;

/// Releases a token on drop unless disarmed: an acquire that was cancelled,
/// timed out, or failed with an unknown outcome must not leave a lock behind.
/// Borrows, so the common disarmed case costs no allocation.
pub(crate) struct ReleaseOnDrop<'a> {
    backend: &'a Arc<dyn LockBackend>,
    key: &'a str,
    token: LockToken,
    timeout: Duration,
    armed: bool,
}

impl<'a> ReleaseOnDrop<'a> {
    pub(crate) fn new(backend: &'a Arc<dyn LockBackend>, key: &'a str, token: LockToken, timeout: Duration) -> Self {
        ReleaseOnDrop {
            backend,
            key,
            token,
            timeout,
            armed: true,
        }
    }

    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            spawn_release(
                self.backend.clone(),
                self.key.to_owned(),
                self.token,
                self.timeout,
                None,
            );
        }
    }
}

/// Takes a fair waiter out of the backend's queue when its call ends without
/// a grant (timed out, failed, or dropped), in the background.
pub(crate) struct LeaveOnDrop<'a> {
    backend: &'a Arc<dyn LockBackend>,
    key: &'a str,
    /// `None` when not fair, or once granted.
    waiter: Option<FairWaiter>,
    timeout: Duration,
}

impl<'a> LeaveOnDrop<'a> {
    pub(crate) fn new(
        backend: &'a Arc<dyn LockBackend>,
        key: &'a str,
        waiter: Option<FairWaiter>,
        timeout: Duration,
    ) -> Self {
        LeaveOnDrop {
            backend,
            key,
            waiter,
            timeout,
        }
    }

    /// A grant took the waiter out of the queue.
    pub(crate) fn disarm(&mut self) {
        self.waiter = None;
    }
}

impl Drop for LeaveOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(waiter) = self.waiter
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let (backend, key, timeout) = (self.backend.clone(), self.key.to_owned(), self.timeout);
            crate::background::spawn(&handle, async move {
                if !matches!(
                    tokio::time::timeout(timeout, backend.leave_queue(&key, &waiter)).await,
                    Ok(Ok(()))
                ) {
                    tracing::debug!(key, "leaving the fair queue failed; the entry expires after its claim");
                }
            });
        }
    }
}
