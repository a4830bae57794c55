//! Redlock refuses the other lock kinds with a typed error and capability
//! flags: a majority vote does not bound a semaphore of 2 or more permits,
//! and its nodes have neither an all-or-nothing operation (multi-key locks)
//! nor reader sets (read-write locks), nor a strict term (leader election).

#![allow(clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Error, LockBackend, LockToken, MultiLockManager, SemaphoreManager};

use lock_core::raw::{MultiLockBackend, PermitRequest, RwLockBackend, SemaphoreBackend};
use lock_memory::MemoryBackend;
use lock_redlock::Redlock;

fn redlock() -> Redlock {
    let nodes: Vec<Arc<dyn LockBackend>> = (0..3).map(|_| Arc::new(MemoryBackend::new()) as _).collect();
    Redlock::new(nodes).expect("valid redlock")
}

#[tokio::test(start_paused = true)]
async fn semaphores_are_unsupported_with_a_capability_flag() {
    let r = redlock();
    assert!(!r.capabilities().semaphores);
    let token = LockToken::generate().expect("token");
    let raw = r
        .acquire_permits("s", &token, PermitRequest::new(2, 1), Duration::from_secs(1))
        .await;
    assert!(matches!(raw, Err(Error::Unsupported { .. })), "{raw:?}");
    match SemaphoreManager::new(r) {
        Err(Error::Unsupported { what, .. }) => assert!(what.contains("semaphore"), "{what}"),
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn multi_key_locks_are_unsupported_with_a_capability_flag() {
    let r = redlock();
    assert!(!r.capabilities().multi_key_locks);
    let token = LockToken::generate().expect("token");
    let raw = r.try_acquire_all(&["a", "b"], &token, Duration::from_secs(1)).await;
    assert!(matches!(raw, Err(Error::Unsupported { .. })), "{raw:?}");
    assert!(matches!(MultiLockManager::new(r), Err(Error::Unsupported { .. })));
}

#[tokio::test(start_paused = true)]
async fn read_write_locks_are_unsupported_with_a_capability_flag() {
    let r = redlock();
    assert!(!r.capabilities().rw_locks);
    // Upgradeable reads too, with the reason.
    let token = LockToken::generate().expect("token");
    for raw in [
        r.upgrade_rw("rw", &token, Duration::from_secs(1)).await,
        r.downgrade_rw("rw", &token, Duration::from_secs(1)).await,
    ] {
        match raw {
            Err(Error::Unsupported { what, .. }) => assert!(what.contains("reader sets"), "{what}"),
            other => panic!("expected Unsupported, got {other:?}"),
        }
    }
    assert!(matches!(
        lock_core::RwLockManager::new(r),
        Err(Error::Unsupported { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn leader_election_is_unsupported_with_a_capability_flag() {
    let r = redlock();
    assert!(!r.capabilities().leader_election);
    assert!(matches!(
        lock_core::ElectionManager::new(r),
        Err(Error::Unsupported { .. })
    ));
}
