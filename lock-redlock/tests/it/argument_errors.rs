//! Issue 39 finding 7: a node's argument error (`InvalidArgument`,
//! `Unsupported`) is the caller's, not an outage: Redlock returns it at
//! once instead of `QuorumUnreachable`, which the manager retried until the
//! acquire timeout.

#![allow(clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::raw::async_trait;
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{Capabilities, Error, LockBackend, LockManager, LockOptions, LockToken, Result};
use lock_memory::MemoryBackend;
use lock_redlock::Redlock;

/// A node that refuses every key as a bad argument, counting its calls.
#[derive(Debug, Default)]
struct Refusing {
    calls: AtomicUsize,
}

impl Refusing {
    fn refuse(&self) -> Error {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Error::invalid("key \"verrou:lua:x\" is reserved")
    }
}

#[async_trait]
impl LockBackend for Refusing {
    async fn try_acquire(&self, _key: &str, _token: &LockToken, _ttl: Duration) -> Result<AcquireOutcome> {
        Err(self.refuse())
    }

    async fn release(&self, _key: &str, _token: &LockToken) -> Result<ReleaseOutcome> {
        Err(self.refuse())
    }

    async fn renew(&self, _key: &str, _token: &LockToken, _ttl: Duration) -> Result<RenewOutcome> {
        Err(self.refuse())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new("refusing")
    }
}

fn nodes(n: usize) -> (Vec<Arc<Refusing>>, Vec<Arc<dyn LockBackend>>) {
    let refusing: Vec<Arc<Refusing>> = (0..n).map(|_| Arc::new(Refusing::default())).collect();
    let dyns = refusing.iter().map(|r| r.clone() as Arc<dyn LockBackend>).collect();
    (refusing, dyns)
}

fn calls(nodes: &[Arc<Refusing>]) -> usize {
    nodes.iter().map(|n| n.calls.load(Ordering::SeqCst)).sum()
}

#[tokio::test(start_paused = true)]
async fn a_key_every_node_refuses_is_invalid_at_once() {
    let (refusing, dyns) = nodes(3);
    let redlock = Redlock::new(dyns).expect("valid redlock");
    let token = LockToken::generate().expect("token");
    let ttl = Duration::from_secs(3);
    let acquired = redlock.try_acquire("k", &token, ttl).await;
    assert!(matches!(acquired, Err(Error::InvalidArgument(_))), "{acquired:?}");
    let renewed = redlock.renew("k", &token, ttl).await;
    assert!(matches!(renewed, Err(Error::InvalidArgument(_))), "{renewed:?}");
    let released = redlock.release("k", &token).await;
    assert!(matches!(released, Err(Error::InvalidArgument(_))), "{released:?}");

    // Through the manager: one round, not retries until the timeout.
    let before = calls(&refusing);
    let locks = LockManager::with_options(redlock, LockOptions::with_ttl(ttl).acquire_timeout(ttl * 10))
        .expect("valid options");
    let locked = locks.lock("k").await;
    assert!(matches!(locked, Err(Error::InvalidArgument(_))), "{locked:?}");
    assert!(
        calls(&refusing) - before <= 6,
        "the manager retried the bad key: {} node calls",
        calls(&refusing) - before
    );
}

#[tokio::test(start_paused = true)]
async fn one_refusing_node_of_three_still_leaves_a_quorum() {
    let (_refusing, mut dyns) = nodes(1);
    dyns.push(Arc::new(MemoryBackend::new()));
    dyns.push(Arc::new(MemoryBackend::new()));
    let redlock = Redlock::new(dyns).expect("valid redlock");
    let token = LockToken::generate().expect("token");
    let acquired = redlock.try_acquire("k", &token, Duration::from_secs(3)).await;
    assert!(matches!(acquired, Ok(AcquireOutcome::Acquired(_))), "{acquired:?}");
    assert_eq!(
        redlock.release("k", &token).await.expect("release"),
        ReleaseOutcome::Released
    );
}

/// Nodes `[Refusing, Memory, Memory]` with `k` held by another token on
/// both memory nodes (TTL `held_for`); the refusing node's calls counter.
async fn held_on_the_majority(held_for: Duration) -> (Arc<Refusing>, Redlock) {
    let (refusing, mut dyns) = nodes(1);
    let other = LockToken::generate().expect("token");
    for _ in 0..2 {
        let memory = MemoryBackend::new();
        let held = memory.try_acquire("k", &other, held_for).await;
        assert!(matches!(held, Ok(AcquireOutcome::Acquired(_))), "{held:?}");
        dyns.push(Arc::new(memory));
    }
    let redlock = Redlock::new(dyns).expect("valid redlock");
    let node = refusing.first().cloned().expect("one refusing node");
    (node, redlock)
}

/// Review of issue 39, finding 1: one node's refusal must not hide a lock
/// held on the majority: the answer is `Held` (and `lock()` waits for it),
/// renew and release say `HeldByOther`, not the minority node's error.
#[tokio::test(start_paused = true)]
async fn one_refusing_node_does_not_hide_a_held_lock() {
    let ttl = Duration::from_secs(3);
    let (refusing, redlock) = held_on_the_majority(ttl).await;
    let token = LockToken::generate().expect("token");
    let acquired = redlock.try_acquire("k", &token, ttl).await;
    assert!(matches!(acquired, Ok(AcquireOutcome::Held { .. })), "{acquired:?}");
    let renewed = redlock.renew("k", &token, ttl).await;
    assert!(matches!(renewed, Ok(RenewOutcome::HeldByOther)), "{renewed:?}");
    let released = redlock.release("k", &token).await;
    assert!(matches!(released, Ok(ReleaseOutcome::HeldByOther)), "{released:?}");
    assert!(
        refusing.calls.load(Ordering::SeqCst) >= 3,
        "the refusing node was asked"
    );

    // The manager waits for the holder's TTL and then takes the lock.
    let locks = LockManager::with_options(redlock, LockOptions::with_ttl(ttl).acquire_timeout(ttl * 10))
        .expect("valid options");
    let guard = locks
        .lock("k")
        .await
        .expect("lock() waits for the holder, then acquires");
    guard.release().await.expect("release");
}

/// Missing on the majority: renew and release say `Missing`.
#[tokio::test(start_paused = true)]
async fn one_refusing_node_does_not_hide_a_missing_key() {
    let (_refusing, mut dyns) = nodes(1);
    dyns.push(Arc::new(MemoryBackend::new()));
    dyns.push(Arc::new(MemoryBackend::new()));
    let redlock = Redlock::new(dyns).expect("valid redlock");
    let token = LockToken::generate().expect("token");
    let renewed = redlock.renew("k", &token, Duration::from_secs(3)).await;
    assert!(matches!(renewed, Ok(RenewOutcome::Missing)), "{renewed:?}");
    let released = redlock.release("k", &token).await;
    assert!(matches!(released, Ok(ReleaseOutcome::Missing)), "{released:?}");
}

/// Refusals that alone make the quorum impossible (2 of 3: N − M + 1) are
/// the caller's error, at once.
#[tokio::test(start_paused = true)]
async fn refusals_that_block_the_quorum_are_returned() {
    let (_refusing, mut dyns) = nodes(2);
    dyns.push(Arc::new(MemoryBackend::new()));
    let redlock = Redlock::new(dyns).expect("valid redlock");
    let token = LockToken::generate().expect("token");
    let ttl = Duration::from_secs(3);
    let acquired = redlock.try_acquire("k", &token, ttl).await;
    assert!(matches!(acquired, Err(Error::InvalidArgument(_))), "{acquired:?}");
    let renewed = redlock.renew("k", &token, ttl).await;
    assert!(matches!(renewed, Err(Error::InvalidArgument(_))), "{renewed:?}");
    let released = redlock.release("k", &token).await;
    assert!(matches!(released, Err(Error::InvalidArgument(_))), "{released:?}");
}
