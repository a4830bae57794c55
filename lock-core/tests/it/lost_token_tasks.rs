//! `lost_token()` watchers: the deadline watcher behind the tokens of one
//! lease is one task, whatever the number of tokens made and dropped, and
//! it ends with the lease.

#![allow(clippy::expect_used)] // test helpers

use std::time::Duration;

use lock_core::{LockManager, LockOptions, Renewal};
use lock_memory::MemoryBackend;

fn alive() -> usize {
    tokio::runtime::Handle::current().metrics().num_alive_tasks()
}

#[tokio::test(start_paused = true)]
async fn dropped_lost_tokens_leave_no_tasks_behind() {
    let options = LockOptions::with_ttl(Duration::from_secs(30)).renewal(Renewal::Manual);
    let locks = LockManager::with_options(MemoryBackend::new(), options).expect("options");
    let guard = locks.lock("k").await.expect("lock");
    let before = alive();
    for _ in 0..10_000 {
        drop(guard.lost_token());
    }
    tokio::task::yield_now().await;
    let during = alive();
    assert!(
        during <= before + 1,
        "10,000 dropped tokens left {} tasks running (at most one deadline watcher per lease)",
        during - before
    );
    let token = guard.lost_token();
    drop(guard);
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(token.is_cancelled(), "the lease ended: its tokens are cancelled");
    assert_eq!(alive(), before, "the lease ended: its watcher is gone");
}

/// A token still fires at the deadline when every earlier token was dropped.
#[tokio::test(start_paused = true)]
async fn a_token_fires_at_the_deadline_after_others_were_dropped() {
    let options = LockOptions::with_ttl(Duration::from_secs(3)).renewal(Renewal::Manual);
    let locks = LockManager::with_options(MemoryBackend::new(), options).expect("options");
    let guard = locks.lock("k").await.expect("lock");
    drop(guard.lost_token());
    let token = guard.lost_token();
    tokio::time::timeout(Duration::from_secs(4), token.cancelled())
        .await
        .expect("the token fires at the lease's deadline");
    assert!(guard.is_lost());
}
