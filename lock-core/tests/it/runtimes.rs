//! One manager used from several tokio runtimes: each guard's renewals run on
//! a runtime that is being driven, not on whichever runtime came first.

#![allow(clippy::expect_used)] // test helpers

use std::time::Duration;

use lock_core::{LockManager, LockOptions};
use lock_memory::MemoryBackend;

#[test]
fn renewals_do_not_stall_when_the_first_runtime_is_idle() {
    let ttl = Duration::from_millis(900);
    let locks = LockManager::with_options(MemoryBackend::new(), LockOptions::with_ttl(ttl)).expect("options");
    let first = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // The first guard starts the renewal machinery on `first`, which is then
    // no longer driven (a current-thread runtime only runs inside block_on).
    let idle_guard = first.block_on(locks.lock("first")).expect("lock");
    let second = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let lost = second.block_on(async {
        let guard = locks.lock("second").await.expect("lock");
        tokio::time::sleep(ttl * 3).await;
        let lost = guard.is_lost();
        drop(guard);
        lost
    });
    assert!(
        !lost,
        "the guard on the driven runtime lost its lease: renewals stalled"
    );
    drop(idle_guard);
}
