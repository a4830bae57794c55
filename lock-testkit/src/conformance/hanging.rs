//! Shared by every kind's "loss at the local deadline" case: a wrapper whose
//! renewals hang while switched on, and the check on the loss signal.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::raw::{
    ElectionBackend, FairWaiter, InstantLockBackend, MultiLockBackend, PermitRequest, RwLockBackend, SemaphoreBackend,
};
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{Capabilities, LeaderInfo, LeaseHandle, LockBackend, LockToken, LossReason, Result, RwMode};
use tokio::time::Instant;

/// Passes every call through, except that renewals hang while `hang` is set.
pub(crate) struct Hanging<B: ?Sized> {
    inner: Arc<B>,
    hang: Arc<AtomicBool>,
}

impl<B: ?Sized> Hanging<B> {
    /// The wrapper and its switch.
    pub(crate) fn new(inner: Arc<B>) -> (Self, Arc<AtomicBool>) {
        let hang = Arc::new(AtomicBool::new(false));
        (
            Hanging {
                inner,
                hang: hang.clone(),
            },
            hang,
        )
    }

    async fn gate(&self) {
        if self.hang.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }
}

/// With renewals hanging since just after `sent`, `lease.lost()` fires with
/// `DeadlinePassed`, not before the local deadline, which comes before the
/// server's TTL, and no later than `slack` after it.
pub(crate) async fn assert_lost_by_deadline(lease: &LeaseHandle, sent: Instant, ttl: Duration, slack: Duration) {
    let deadline = lease.deadline();
    assert!(deadline <= sent + ttl, "the local deadline comes before the server's");
    let reason = tokio::time::timeout(ttl * 4, lease.lost())
        .await
        .expect("lost() must fire");
    let fired = Instant::now();
    assert_eq!(reason, LossReason::DeadlinePassed);
    assert!(fired >= deadline, "lost() fired before the deadline it reports");
    assert!(
        fired <= deadline + slack,
        "lost() fired {:?} after the deadline",
        fired.saturating_duration_since(deadline)
    );
}

#[async_trait]
#[deny(clippy::missing_trait_methods)] // a wrapper forwards every method
impl<B: LockBackend + ?Sized> LockBackend for Hanging<B> {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.inner.try_acquire(key, token, ttl).await
    }
    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.inner.release(key, token).await
    }
    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.gate().await;
        self.inner.renew(key, token, ttl).await
    }
    async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        self.gate().await;
        self.inner.renew_many(items, ttl).await
    }
    async fn wait_for_release(&self, key: &str, max_wait: Duration) {
        self.inner.wait_for_release(key, max_wait).await;
    }
    async fn wait_for_release_opts(&self, key: &str, options: &lock_core::raw::WaitOptions) {
        self.inner.wait_for_release_opts(key, options).await;
    }
    async fn try_acquire_fair(
        &self,
        key: &str,
        token: &LockToken,
        ttl: Duration,
        waiter: &FairWaiter,
    ) -> Result<AcquireOutcome> {
        self.inner.try_acquire_fair(key, token, ttl, waiter).await
    }
    async fn wait_fair(&self, key: &str, waiter: &FairWaiter, max_wait: Duration) {
        self.inner.wait_fair(key, waiter, max_wait).await;
    }
    async fn leave_queue(&self, key: &str, waiter: &FairWaiter) -> Result<()> {
        self.inner.leave_queue(key, waiter).await
    }
    async fn inspect(&self, key: &str) -> Result<lock_core::LockInfo> {
        self.inner.inspect(key).await
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn instant(&self) -> Option<&dyn InstantLockBackend> {
        None // renewals must reach the gate
    }
}

#[async_trait]
impl<B: SemaphoreBackend + ?Sized> SemaphoreBackend for Hanging<B> {
    async fn acquire_permits(
        &self,
        name: &str,
        holder: &LockToken,
        request: PermitRequest,
        ttl: Duration,
    ) -> Result<AcquireOutcome> {
        self.inner.acquire_permits(name, holder, request, ttl).await
    }
    async fn release_permits(&self, name: &str, holder: &LockToken) -> Result<ReleaseOutcome> {
        self.inner.release_permits(name, holder).await
    }
    async fn renew_permits(&self, name: &str, holder: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.gate().await;
        self.inner.renew_permits(name, holder, ttl).await
    }
    async fn renew_permits_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        self.gate().await;
        self.inner.renew_permits_many(items, ttl).await
    }
    async fn inspect_permits(&self, name: &str) -> Result<lock_core::PermitsInfo> {
        self.inner.inspect_permits(name).await
    }
}

#[async_trait]
impl<B: MultiLockBackend + ?Sized> MultiLockBackend for Hanging<B> {
    async fn try_acquire_all(&self, keys: &[&str], token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.inner.try_acquire_all(keys, token, ttl).await
    }
    async fn release_all(&self, keys: &[&str], token: &LockToken) -> Result<ReleaseOutcome> {
        self.inner.release_all(keys, token).await
    }
    async fn renew_all(&self, keys: &[&str], token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.gate().await;
        self.inner.renew_all(keys, token, ttl).await
    }
}

#[async_trait]
impl<B: RwLockBackend + ?Sized> RwLockBackend for Hanging<B> {
    async fn try_acquire_rw(
        &self,
        name: &str,
        mode: RwMode,
        waiting: bool,
        token: &LockToken,
        ttl: Duration,
    ) -> Result<AcquireOutcome> {
        self.inner.try_acquire_rw(name, mode, waiting, token, ttl).await
    }
    async fn release_rw(&self, name: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.inner.release_rw(name, token).await
    }
    async fn renew_rw(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.gate().await;
        self.inner.renew_rw(name, token, ttl).await
    }
    async fn upgrade_rw(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.inner.upgrade_rw(name, token, ttl).await
    }
    async fn downgrade_rw(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.inner.downgrade_rw(name, token, ttl).await
    }
    async fn inspect_rw(&self, name: &str) -> Result<lock_core::RwInfo> {
        self.inner.inspect_rw(name).await
    }
}

#[async_trait]
impl<B: ElectionBackend + ?Sized> ElectionBackend for Hanging<B> {
    async fn try_lead(&self, name: &str, token: &LockToken, identity: &[u8], ttl: Duration) -> Result<AcquireOutcome> {
        self.inner.try_lead(name, token, identity, ttl).await
    }
    async fn resign(&self, name: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.inner.resign(name, token).await
    }
    async fn renew_lead(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.gate().await;
        self.inner.renew_lead(name, token, ttl).await
    }
    async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>> {
        self.inner.leader(name).await
    }
}
