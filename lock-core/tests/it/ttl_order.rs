//! TTL changes of one lease reach the server in the order the guard believes:
//! a batched renewal sent before an `extend` can never be applied after it
//! while the guard keeps the extended deadline.

#![allow(clippy::expect_used)] // test helpers

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Capabilities, LockBackend, LockManager, LockOptions, LockToken, Result};

use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_memory::MemoryBackend;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

/// The memory backend, except that batched renewals wait at a gate before
/// they are applied (a slow reply on a busy connection), while single renewals
/// (`extend`) go straight through: the server applies them out of order.
struct GatedBatches {
    inner: MemoryBackend,
    gate: watch::Receiver<bool>,
    batch_started: Arc<Notify>,
}

#[lock_core::raw::async_trait]
impl LockBackend for GatedBatches {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.inner.try_acquire(key, token, ttl).await
    }
    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.inner.release(key, token).await
    }
    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.inner.renew(key, token, ttl).await
    }
    async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        self.batch_started.notify_one();
        let mut gate = self.gate.clone();
        let _ = gate.wait_for(|open| *open).await;
        self.inner.renew_many(items, ttl).await
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

const TTL: Duration = Duration::from_secs(30);

fn gated(memory: &MemoryBackend) -> (LockManager, watch::Sender<bool>, Arc<Notify>) {
    let (open, gate) = watch::channel(false);
    let batch_started = Arc::new(Notify::new());
    let backend = GatedBatches {
        inner: memory.clone(),
        gate,
        batch_started: batch_started.clone(),
    };
    let locks = LockManager::with_options(backend, LockOptions::with_ttl(TTL)).expect("options");
    (locks, open, batch_started)
}

/// The guard must never believe in more time than the server grants.
fn assert_deadline_backed_by_server(memory: &MemoryBackend, deadline: Instant) {
    let server = memory.lock_ttl("k").expect("key held");
    let believed = deadline.saturating_duration_since(Instant::now());
    assert!(
        believed <= server,
        "the guard believes {believed:?} are left, the server expires the key in {server:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_batched_renewal_queued_before_extend_is_applied_before_it() {
    let memory = MemoryBackend::new();
    let (locks, open, batch_started) = gated(&memory);
    let guard = locks.lock("k").await.expect("lock");
    batch_started.notified().await; // the renewer's batch (30 s) is in flight
    let open_soon = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        open.send_replace(true);
    };
    let (extended, ()) = tokio::join!(guard.extend(Duration::from_secs(120)), open_soon);
    extended.expect("extend");
    tokio::time::sleep(Duration::from_millis(10)).await; // every reply is in
    assert_deadline_backed_by_server(&memory, guard.deadline());
    assert!(guard.remaining() > TTL, "the extend was applied last");
}

#[tokio::test(start_paused = true)]
async fn a_renewal_of_unknown_outcome_caps_the_deadline_of_a_later_extend() {
    let memory = MemoryBackend::new();
    let (locks, open, batch_started) = gated(&memory);
    let guard = locks.lock("k").await.expect("lock");
    batch_started.notified().await;
    // The renewal's reply does not come within the op timeout (2 s): its
    // outcome is unknown, and it may still be applied later.
    tokio::time::sleep(Duration::from_secs(3)).await;
    guard.extend(Duration::from_secs(120)).await.expect("extend");
    open.send_replace(true); // the stale 30 s renewal lands now
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_deadline_backed_by_server(&memory, guard.deadline());
}

/// An `extend` that shortens the lease, applied by the server but answered
/// never (the future dropped, or its timeout hit): the guard must not keep
/// the longer deadline.
#[tokio::test(start_paused = true)]
async fn a_shortening_extend_of_unknown_outcome_lowers_the_deadline() {
    for dropped in [true, false] {
        let memory = MemoryBackend::new();
        let (backend, control) = lock_testkit::FaultyBackend::new(Arc::new(memory.clone()));
        let options = LockOptions::with_ttl(TTL)
            .renewal(lock_core::Renewal::Manual)
            .op_timeout(Duration::from_millis(100));
        let locks = LockManager::with_options(backend, options).expect("options");
        let guard = locks.lock("k").await.expect("lock");
        control.set(lock_testkit::Fault::ApplyThenHang); // applied, no reply
        let shorten = guard.extend(Duration::from_secs(1));
        if dropped {
            let cancelled = tokio::time::timeout(Duration::from_millis(10), shorten).await;
            assert!(cancelled.is_err(), "dropped while waiting for the reply");
        } else {
            let err = shorten.await.expect_err("no reply");
            assert!(err.is_outcome_unknown(), "{err:?}");
        }
        control.heal();
        assert_deadline_backed_by_server(&memory, guard.deadline());
    }
}
