//! Automatic renewal after an `extend`: whatever TTL the extend set, the
//! next renewal comes before the lease's new deadline.

#![allow(clippy::expect_used)] // test helpers

use std::time::Duration;

use lock_core::{LockManager, LockOptions};

use lock_core::ReleaseOutcome;
use lock_memory::MemoryBackend;

/// A 30 s lease under automatic renewal shortened to 2 s by `extend`: the
/// renewer, scheduled for 10 s after the acquire, must renew before the
/// 2 s deadline (and from then on renew with the manager's TTL again).
#[tokio::test(start_paused = true)]
async fn a_shortening_extend_is_renewed_before_its_deadline() {
    let memory = MemoryBackend::new();
    let locks =
        LockManager::with_options(memory.clone(), LockOptions::with_ttl(Duration::from_secs(30))).expect("options");
    let guard = locks.lock("k").await.expect("lock");
    tokio::time::sleep(Duration::from_secs(1)).await;
    guard.extend(Duration::from_secs(2)).await.expect("extend");
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!guard.is_lost(), "the renewer let the shortened lease run out");
        assert!(
            memory.lock_ttl("k").is_some(),
            "the key expired under automatic renewal"
        );
    }
    assert!(
        guard.remaining() > Duration::from_secs(5),
        "renewals went back to the manager's 30 s TTL: {:?} left",
        guard.remaining()
    );
    assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Released);
}

/// The same with a renewal in flight while `extend` shortens the lease: the
/// extend waits for it, and the renewal after it still comes in time.
#[tokio::test(start_paused = true)]
async fn a_shortening_extend_right_after_a_renewal_is_renewed_in_time() {
    let memory = MemoryBackend::new();
    let locks =
        LockManager::with_options(memory.clone(), LockOptions::with_ttl(Duration::from_secs(30))).expect("options");
    let guard = locks.lock("k").await.expect("lock");
    // Just past the first renewal (every 10 s): the next one is 10 s away.
    tokio::time::sleep(Duration::from_millis(10_050)).await;
    guard.extend(Duration::from_millis(500)).await.expect("extend");
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(!guard.is_lost(), "the renewer let the 500 ms lease run out");
    }
    assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Released);
}
