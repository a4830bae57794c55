//! Out-of-range waits are refused with a typed error, never a panic.

#![allow(clippy::expect_used)] // test helpers

use std::time::Duration;

use lock_core::{Error, LockBackend, LockManager, LockOptions};
use lock_memory::MemoryBackend;

#[tokio::test(start_paused = true)]
async fn an_unbounded_acquire_timeout_is_refused_not_a_panic() {
    let memory = MemoryBackend::new();
    let options = LockOptions::default().acquire_timeout(Duration::MAX);
    assert!(matches!(options.validate(), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        LockManager::with_options(memory.clone(), options.clone()),
        Err(Error::InvalidArgument(_))
    ));
    let locks = LockManager::new(memory).expect("manager");
    let _holder = locks.lock("k").await.expect("lock");
    let err = locks.lock_opts("k", &options).await.expect_err("refused");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    let err = locks
        .lock_opts("k", &LockOptions::default().op_timeout(Duration::MAX))
        .await
        .expect_err("refused");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
}

#[tokio::test(start_paused = true)]
async fn the_longest_acquire_timeout_waits_without_overflow() {
    let locks = LockManager::new(MemoryBackend::new()).expect("manager");
    let _holder = locks.lock("k").await.expect("lock");
    let options = LockOptions::default().acquire_timeout(lock_core::LockOptions::MAX_TIMEOUT);
    let waited = tokio::time::timeout(Duration::from_secs(60), locks.lock_opts("k", &options)).await;
    assert!(waited.is_err(), "still waiting for the held key after a minute");
}

/// A memory backend that claims a shorter maximum TTL than the default 30 s.
struct ShortTtls(MemoryBackend);

#[async_trait::async_trait]
impl LockBackend for ShortTtls {
    async fn try_acquire(
        &self,
        key: &str,
        token: &lock_core::LockToken,
        ttl: Duration,
    ) -> lock_core::Result<lock_core::AcquireOutcome> {
        self.0.try_acquire(key, token, ttl).await
    }
    async fn release(&self, key: &str, token: &lock_core::LockToken) -> lock_core::Result<lock_core::ReleaseOutcome> {
        self.0.release(key, token).await
    }
    async fn renew(
        &self,
        key: &str,
        token: &lock_core::LockToken,
        ttl: Duration,
    ) -> lock_core::Result<lock_core::RenewOutcome> {
        self.0.renew(key, token, ttl).await
    }
    fn capabilities(&self) -> lock_core::Capabilities {
        let mut caps = self.0.capabilities();
        caps.max_ttl = Duration::from_secs(10);
        caps
    }
}

#[test]
fn new_checks_the_default_ttl_against_the_backend_like_with_options() {
    let err = LockManager::new(ShortTtls(MemoryBackend::new())).expect_err("30 s is above 10 s");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    let fits = LockOptions::with_ttl(Duration::from_secs(10));
    assert!(LockManager::with_options(ShortTtls(MemoryBackend::new()), fits).is_ok());
}

/// A memory backend whose grants carry a validity bound (as Redlock's do).
struct Hinting(MemoryBackend, Duration);

#[async_trait::async_trait]
impl LockBackend for Hinting {
    async fn try_acquire(
        &self,
        key: &str,
        token: &lock_core::LockToken,
        ttl: Duration,
    ) -> lock_core::Result<lock_core::AcquireOutcome> {
        Ok(match self.0.try_acquire(key, token, ttl).await? {
            lock_core::AcquireOutcome::Acquired(lease) => {
                lock_core::AcquireOutcome::Acquired(lease.with_validity(Some(self.1)))
            }
            other => other,
        })
    }
    async fn release(&self, key: &str, token: &lock_core::LockToken) -> lock_core::Result<lock_core::ReleaseOutcome> {
        self.0.release(key, token).await
    }
    async fn renew(
        &self,
        key: &str,
        token: &lock_core::LockToken,
        ttl: Duration,
    ) -> lock_core::Result<lock_core::RenewOutcome> {
        self.0.renew(key, token, ttl).await
    }
    fn capabilities(&self) -> lock_core::Capabilities {
        self.0.capabilities()
    }
}

/// One drift allowance, applied by the manager and by a backend that
/// applies it too: the guard keeps the earlier deadline, so the larger
/// allowance wins.
#[tokio::test(start_paused = true)]
async fn the_guard_keeps_the_earlier_of_the_backend_and_manager_deadlines() {
    let ttl = Duration::from_secs(10);
    let options = LockOptions::with_ttl(ttl).renewal(lock_core::Renewal::Manual);
    // The backend's allowance is larger (1 s): its bound wins.
    let locks = LockManager::with_options(
        Hinting(MemoryBackend::new(), ttl - Duration::from_secs(1)),
        options.clone(),
    )
    .expect("manager");
    let guard = locks.lock("k").await.expect("lock");
    assert_eq!(guard.deadline() - guard.acquired_at(), ttl - Duration::from_secs(1));
    // The manager's is larger (0.45 × 10 s + 2 ms): its own bound wins.
    let wide = options.drift_factor(0.45);
    let locks = LockManager::with_options(
        Hinting(MemoryBackend::new(), ttl - Duration::from_secs(1)),
        wide.clone(),
    )
    .expect("manager");
    let guard = locks.lock("k").await.expect("lock");
    assert_eq!(guard.deadline() - guard.acquired_at(), ttl - wide.drift(ttl));
}
