//! The lock kinds on the acquire engine: an election observer sees an
//! outage as errors, not as "no change"; a leadership's term is always
//! there; kind managers share one backend handle with a `LockManager`.

#![allow(clippy::expect_used)] // test helpers

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use lock_core::raw::ElectionBackend;
use lock_core::raw::async_trait;
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{
    Capabilities, ElectionManager, Error, LeaderInfo, LockBackend, LockManager, LockOptions, LockToken, Result,
    RwLockManager, SemaphoreManager,
};
use lock_memory::MemoryBackend;

/// The memory backend whose `leader` reads fail while `down` is set.
struct Flaky {
    inner: MemoryBackend,
    down: Arc<AtomicBool>,
}

#[async_trait]
impl LockBackend for Flaky {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.inner.try_acquire(key, token, ttl).await
    }
    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.inner.release(key, token).await
    }
    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.inner.renew(key, token, ttl).await
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

#[async_trait]
impl ElectionBackend for Flaky {
    async fn try_lead(&self, name: &str, token: &LockToken, identity: &[u8], ttl: Duration) -> Result<AcquireOutcome> {
        self.inner.try_lead(name, token, identity, ttl).await
    }
    async fn resign(&self, name: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.inner.resign(name, token).await
    }
    async fn renew_lead(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.inner.renew_lead(name, token, ttl).await
    }
    async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>> {
        if self.down.load(Ordering::SeqCst) {
            return Err(Error::backend("flaky", "connection refused"));
        }
        self.inner.leader(name).await
    }
}

#[tokio::test(start_paused = true)]
async fn an_observer_sees_an_outage_as_errors_and_the_leader_again_after_it() {
    let down = Arc::new(AtomicBool::new(false));
    let backend = Flaky {
        inner: MemoryBackend::new(),
        down: down.clone(),
    };
    let election = ElectionManager::new(backend).expect("manager");
    let mut changes = Box::pin(election.observe("scheduler", Duration::from_millis(50)));
    assert_eq!(changes.next().await.expect("item").expect("read"), None);
    down.store(true, Ordering::SeqCst);
    let during = changes.next().await.expect("item");
    assert!(matches!(during, Err(Error::Backend { .. })), "{during:?}");
    let again = changes.next().await.expect("item");
    assert!(again.is_err(), "still down: {again:?}");
    down.store(false, Ordering::SeqCst);
    // Unchanged (still no leader), but reported: the observer knows again.
    assert_eq!(changes.next().await.expect("item").expect("read"), None);
}

#[tokio::test(start_paused = true)]
async fn terms_are_plain_numbers_and_increase() {
    let election = ElectionManager::new(MemoryBackend::new()).expect("manager");
    let first = election.campaign("s", b"a").await.expect("campaign");
    let term = first.term();
    first.resign().await.expect("resign");
    let second = election.campaign("s", b"b").await.expect("campaign");
    assert!(second.term() > term);
    assert_eq!(second.fencing_token().map(|t| t.0), Some(second.term()));
}

/// One backend handle (an `Arc`) backs a `LockManager` and every kind's
/// manager at once (how an application that built its backend once, or the
/// `verrou` command, reaches the kinds).
#[tokio::test(start_paused = true)]
async fn kind_managers_share_a_backend_handle() {
    let shared = Arc::new(MemoryBackend::new());
    let locks = LockManager::from_arc(shared.clone(), LockOptions::default()).expect("locks");
    let rw = RwLockManager::from_arc(shared.clone(), LockOptions::default()).expect("rw");
    let semaphores = SemaphoreManager::from_arc(shared.clone(), LockOptions::default()).expect("semaphores");
    let elections = ElectionManager::from_arc(shared, LockOptions::default()).expect("elections");
    let g = locks.lock("k").await.expect("lock");
    let w = rw.write("k").await.expect("write");
    let p = semaphores
        .semaphore("k", 2)
        .expect("semaphore")
        .acquire(2)
        .await
        .expect("permits");
    let l = elections.campaign("k", b"me").await.expect("campaign");
    let other = RwLockManager::from_arc(Arc::new(MemoryBackend::new()), LockOptions::default()).expect("rw");
    assert!(
        other
            .try_lock("k", lock_core::RwMode::Read)
            .await
            .expect("try")
            .is_some(),
        "another backend is another store"
    );
    drop((g, w, p, l));
}

/// After a loss by `NotOwner` (the key was gone when the lease was
/// extended) the deadline reads the moment the loss was seen: not later
/// than before, not in the future; `remaining()` is zero.
#[tokio::test(start_paused = true)]
async fn deadline_after_a_loss_by_not_owner_is_the_loss_time() {
    let memory = MemoryBackend::new();
    let locks = LockManager::from_arc(
        Arc::new(memory.clone()),
        LockOptions::with_ttl(Duration::from_secs(10)).renewal(lock_core::Renewal::Manual),
    )
    .expect("locks");
    let guard = locks.lock("ledger").await.expect("lock");
    let before = guard.deadline();
    tokio::time::advance(Duration::from_secs(1)).await;
    // Someone deleted the key under us (an operator, a failover).
    memory.release("ledger", guard.token()).await.expect("release");
    let seen = tokio::time::Instant::now();
    assert!(guard.extend(Duration::from_secs(10)).await.is_err());
    assert!(guard.is_lost());
    assert_eq!(guard.handle().lost().await, lock_core::LossReason::NotOwner);
    assert!(guard.deadline() <= before, "never later than before");
    assert_eq!(guard.deadline(), seen, "the loss time (paused clock: exact)");
    assert_eq!(guard.remaining(), Duration::ZERO);
}
