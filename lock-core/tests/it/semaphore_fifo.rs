//! Local waiters of one semaphore manager are served in arrival order, and a
//! waiter for several permits is not overtaken by later waiters for one
//! (as in `tokio::sync::Semaphore`), under tokio's paused clock.

#![allow(clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{LockOptions, SemaphoreManager};
use lock_memory::MemoryBackend;

#[tokio::test(start_paused = true)]
async fn local_waiters_are_served_in_arrival_order() {
    let sems = SemaphoreManager::with_options(
        MemoryBackend::new(),
        LockOptions::with_ttl(Duration::from_secs(5)).acquire_timeout(Duration::from_secs(60)),
    )
    .expect("manager");
    let sem = sems.semaphore("fifo", 2).expect("semaphore");
    let held = sem.acquire(2).await.expect("acquire");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    // Waiter 1 wants both permits; the others want one each and come later.
    for (i, permits) in [(0, 1), (1, 2), (2, 1), (3, 1), (4, 1)] {
        let sem = sem.clone();
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let p = sem.acquire(permits).await.expect("acquire");
            order.lock().expect("order").push(i);
            tokio::time::sleep(Duration::from_millis(10)).await;
            p.release().await.expect("release");
        }));
        tokio::time::sleep(Duration::from_millis(1)).await; // arrive in order
    }
    held.release().await.expect("release");
    for t in tasks {
        t.await.expect("task");
    }
    assert_eq!(*order.lock().expect("order"), vec![0, 1, 2, 3, 4]);
}
