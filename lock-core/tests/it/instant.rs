//! The in-process fast path (`LockBackend::instant`) and the renewer's
//! handling of leases released before their first renewal, on the memory
//! backend in paused time.

#![allow(clippy::expect_used)] // test helpers

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lock_core::{Capabilities, LockBackend, LockManager, LockOptions, LockToken, Result};

use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_memory::MemoryBackend;

/// Counts the calls that reach it; does not forward `instant`.
struct Counted {
    inner: MemoryBackend,
    acquires: AtomicU32,
    releases: AtomicU32,
}

#[async_trait::async_trait]
impl LockBackend for Counted {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.acquires.fetch_add(1, Ordering::SeqCst);
        self.inner.try_acquire(key, token, ttl).await
    }
    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        self.inner.release(key, token).await
    }
    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.inner.renew(key, token, ttl).await
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

#[tokio::test(start_paused = true)]
async fn a_wrapper_that_does_not_forward_instant_sees_every_call() {
    let memory = MemoryBackend::new();
    assert!(memory.instant().is_some(), "the memory backend answers at once");
    let counted = Arc::new(Counted {
        inner: memory.clone(),
        acquires: AtomicU32::new(0),
        releases: AtomicU32::new(0),
    });
    assert!(counted.instant().is_none(), "the default does not bypass a wrapper");
    let locks = LockManager::from_arc(counted.clone(), LockOptions::default()).expect("manager");
    let guard = locks.lock("k").await.expect("lock");
    assert!(locks.try_lock("k").await.expect("try_lock").is_none(), "held");
    assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Released);
    assert_eq!(
        counted.acquires.load(Ordering::SeqCst),
        2,
        "both acquires went through the wrapper"
    );
    assert_eq!(
        counted.releases.load(Ordering::SeqCst),
        1,
        "the release went through the wrapper"
    );
    assert_eq!(memory.lock_ttl("k"), None);
}

#[tokio::test(start_paused = true)]
async fn the_fast_path_waits_its_turn_and_reports_busy() {
    let memory = MemoryBackend::new();
    let locks = LockManager::new(memory.clone()).expect("manager");
    let first = locks.lock("k").await.expect("lock");
    assert!(locks.try_lock("k").await.expect("try_lock").is_none(), "busy at once");
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move { locks.lock("k").await.map(|g| g.fencing_token()) }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished(), "the second caller waits while the key is held");
    let fence = first.fencing_token();
    assert_eq!(first.release().await.expect("release"), ReleaseOutcome::Released);
    let next = waiter.await.expect("task").expect("second lock");
    assert!(next > fence, "a later grant, with a larger fencing token");
}

/// The renewer keeps its timer for a lease that left before its first
/// renewal; a lease queued behind it must still be renewed on time.
#[tokio::test(start_paused = true)]
async fn a_lease_taken_after_a_released_one_is_still_renewed() {
    let memory = MemoryBackend::new();
    let ttl = Duration::from_millis(300);
    let locks = LockManager::with_options(memory.clone(), LockOptions::with_ttl(ttl)).expect("manager");
    // Many short locks, more than the renewer keeps before it sweeps.
    for i in 0..200 {
        let guard = locks.lock(&format!("short:{i}")).await.expect("short lock");
        guard.release().await.expect("release");
    }
    tokio::time::sleep(ttl / 6).await;
    let long = locks.lock("long").await.expect("long lock");
    for _ in 0..10 {
        tokio::time::sleep(ttl).await;
        assert!(!long.is_lost(), "renewed before every deadline");
        assert!(
            memory.lock_ttl("long").is_some(),
            "the key is still held on the backend"
        );
    }
    assert_eq!(long.release().await.expect("release"), ReleaseOutcome::Released);
    assert_eq!(memory.tracked_keys(), 0, "nothing left behind");
}
