//! `wait_for_background_releases`: a program about to exit waits for the
//! releases it handed to the runtime (a dropped guard's, a cancelled
//! acquire's clean-up).

#![allow(clippy::expect_used, clippy::panic)] // test helpers

use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockManager, LockOptions, Renewal};
use lock_memory::MemoryBackend;
use lock_testkit::{Fault, FaultyBackend};

#[tokio::test(start_paused = true)]
async fn waiting_sees_a_dropped_guards_release_done() {
    let memory = MemoryBackend::new();
    let (faulty, control) = FaultyBackend::new(Arc::new(memory.clone()));
    let options = LockOptions::with_ttl(Duration::from_secs(60)).renewal(Renewal::Manual);
    let locks = LockManager::from_arc(Arc::new(faulty), options).expect("options");
    let guard = locks.lock("k").await.expect("lock");
    control.set_latency(Duration::from_secs(1));
    drop(guard); // its release is handed to the runtime, a second away
    assert!(memory.lock_ttl("k").is_some());
    lock_core::wait_for_background_releases().await;
    assert!(memory.lock_ttl("k").is_none(), "returned before the release was done");
}

#[tokio::test(start_paused = true)]
async fn waiting_sees_a_cancelled_acquires_clean_up_done() {
    let memory = MemoryBackend::new();
    let (faulty, control) = FaultyBackend::new(Arc::new(memory.clone()));
    let options = LockOptions::with_ttl(Duration::from_secs(60)).renewal(Renewal::Manual);
    let locks = LockManager::from_arc(Arc::new(faulty), options).expect("options");
    // The acquire is applied and its reply never comes: dropped, its
    // clean-up release is handed to the runtime (applied, then hanging
    // until its timeout, like every call now).
    control.set(Fault::ApplyThenHang);
    let mut acquire = Box::pin(locks.lock("k"));
    tokio::select! {
        r = &mut acquire => panic!("a hung acquire returned {:?}", r.map(|g| *g.token())),
        () = tokio::time::sleep(Duration::from_millis(500)) => {}
    }
    assert!(memory.lock_ttl("k").is_some(), "the attempt was applied");
    control.set_latency(Duration::from_secs(1)); // the clean-up comes a second late
    drop(acquire);
    lock_core::wait_for_background_releases().await;
    assert!(memory.lock_ttl("k").is_none(), "the late grant was left held");
}
