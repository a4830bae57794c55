//! `with_lock` never reports success for a body that ran past its lease, and
//! never reports its own release as a loss.

#![allow(clippy::expect_used, clippy::panic)] // test assertions

use std::time::Duration;

use lock_core::{Error, LockManager, LockOptions, LossReason, Renewal};
use lock_memory::MemoryBackend;

fn manual(ttl: Duration) -> LockOptions {
    LockOptions::with_ttl(ttl).renewal(Renewal::Manual)
}

#[tokio::test(start_paused = true)]
async fn with_lock_bodies_are_not_told_of_their_own_release() {
    let locks = LockManager::with_options(MemoryBackend::new(), manual(Duration::from_secs(30))).expect("options");
    let (out, lease) = locks
        .with_lock("k", |lease| async move {
            assert!(!lease.is_lost());
            (7, lease)
        })
        .await
        .expect("the body ran under the lock");
    assert_eq!(out, 7);
    assert_eq!(
        lease.lost().await,
        LossReason::Released,
        "after with_lock, the lease has ended"
    );
}

/// A body that blocks its runtime past the lease (so `lost()` cannot fire)
/// while another client takes the key: the release answers `HeldByOther`.
#[test]
fn with_lock_reports_loss_when_its_release_finds_another_owner() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let memory = MemoryBackend::new();
    let ttl = Duration::from_millis(300);
    let result = runtime.block_on(async {
        let locks = LockManager::with_options(memory.clone(), manual(ttl)).expect("options");
        locks
            .with_lock("k", |lease| {
                let memory = memory.clone();
                async move {
                    std::thread::sleep(ttl * 2); // stalls the runtime: no await point
                    let thief = std::thread::spawn(move || {
                        let other = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .expect("runtime");
                        other.block_on(async {
                            let locks =
                                LockManager::with_options(memory, manual(Duration::from_secs(30))).expect("options");
                            let guard = locks.try_lock("k").await.expect("try_lock");
                            guard.map(std::mem::forget).is_some()
                        })
                    });
                    assert!(thief.join().expect("thief"), "the other client took the expired key");
                    assert!(lease.is_lost());
                    "done"
                }
            })
            .await
    });
    match result {
        Err(Error::Lost { reason, .. }) => assert_ne!(reason, LossReason::Released),
        other => panic!("the body ran past its lease while another client held the key: {other:?}"),
    }
}

/// The deadline passed during the body (blocked runtime), but the key is still
/// on the server (large drift allowance), so the release itself succeeds.
#[test]
fn with_lock_reports_loss_when_the_deadline_passed_during_the_body() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let ttl = Duration::from_secs(2);
    let options = manual(ttl).drift_factor(0.45); // local validity ≈ 1.1 s of the 2 s TTL
    let result = runtime.block_on(async {
        let locks = LockManager::with_options(MemoryBackend::new(), options).expect("options");
        locks
            .with_lock("k", |lease| async move {
                std::thread::sleep(Duration::from_millis(1300));
                lease.is_lost()
            })
            .await
    });
    assert!(
        matches!(result, Err(Error::Lost { .. })),
        "the body returned after its local deadline: {result:?}"
    );
}
