//! What a lease's handles report over its life: the loss signal follows the
//! deadline wherever it moves, and a release or drop ends the lease for every
//! handle.

#![allow(clippy::expect_used)] // test helpers

use std::time::Duration;

use lock_core::{LockManager, LockOptions, LossReason, Renewal};

use lock_core::ReleaseOutcome;
use lock_memory::MemoryBackend;
use tokio::time::Instant;

fn manual(ttl: Duration) -> LockOptions {
    LockOptions::with_ttl(ttl).renewal(Renewal::Manual)
}

#[tokio::test(start_paused = true)]
async fn lost_fires_at_an_earlier_deadline_set_by_extend() {
    let locks = LockManager::with_options(MemoryBackend::new(), manual(Duration::from_secs(30))).expect("options");
    let guard = locks.lock("k").await.expect("lock");
    let lease = guard.handle();
    let watcher = tokio::spawn(async move { (lease.lost().await, Instant::now()) });
    tokio::task::yield_now().await; // the watcher is armed on the 30 s deadline
    guard.extend(Duration::from_secs(1)).await.expect("extend");
    let deadline = guard.deadline();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(guard.is_lost(), "the 1 s lease has run out");
    assert!(
        watcher.is_finished(),
        "lost() still sleeps towards the old 30 s deadline"
    );
    let (reason, fired) = watcher.await.expect("watcher");
    assert_eq!(reason, LossReason::DeadlinePassed);
    assert_eq!(fired, deadline, "paused clock: fired exactly at the new deadline");
}

#[tokio::test(start_paused = true)]
async fn handles_see_the_lease_end_on_release() {
    let locks = LockManager::with_options(MemoryBackend::new(), manual(Duration::from_secs(30))).expect("options");
    let guard = locks.lock("k").await.expect("lock");
    let lease = guard.handle();
    let watcher = {
        let lease = lease.clone();
        tokio::spawn(async move { lease.lost().await })
    };
    tokio::task::yield_now().await;
    assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Released);
    assert!(lease.is_lost(), "a released lease protects nothing any more");
    assert_eq!(lease.remaining(), Duration::ZERO);
    let reason = tokio::time::timeout(Duration::from_secs(1), watcher)
        .await
        .expect("lost() fires on release")
        .expect("watcher");
    assert_eq!(reason, LossReason::Released);
}

#[tokio::test(start_paused = true)]
async fn handles_see_the_lease_end_on_drop() {
    let locks = LockManager::with_options(MemoryBackend::new(), manual(Duration::from_secs(30))).expect("options");
    let guard = locks.lock("k").await.expect("lock");
    let lease = guard.handle();
    drop(guard);
    assert!(lease.is_lost());
    assert_eq!(lease.remaining(), Duration::ZERO);
    let reason = tokio::time::timeout(Duration::from_secs(1), lease.lost())
        .await
        .expect("lost() fires on drop");
    assert_eq!(reason, LossReason::Released);
}

#[tokio::test(start_paused = true)]
async fn a_lease_lost_before_release_keeps_its_reason() {
    let memory = MemoryBackend::new();
    let locks = LockManager::with_options(memory.clone(), manual(Duration::from_secs(1))).expect("options");
    let guard = locks.lock("k").await.expect("lock");
    let lease = guard.handle();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Missing);
    assert_ne!(
        lease.lost().await,
        LossReason::Released,
        "a lease lost before its release reports the loss"
    );
}
