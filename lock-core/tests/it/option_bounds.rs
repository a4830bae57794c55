//! Out-of-range waits are refused with a typed error, never a panic.

#![allow(clippy::expect_used)] // test helpers

use std::time::Duration;

use lock_core::{Error, LockManager, LockOptions};
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
    let locks = LockManager::new(memory);
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
    let locks = LockManager::new(MemoryBackend::new());
    let _holder = locks.lock("k").await.expect("lock");
    let options = LockOptions::default().acquire_timeout(lock_core::MAX_TIMEOUT);
    let waited = tokio::time::timeout(Duration::from_secs(60), locks.lock_opts("k", &options)).await;
    assert!(waited.is_err(), "still waiting for the held key after a minute");
}
