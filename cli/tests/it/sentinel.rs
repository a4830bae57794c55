//! `verrou lock` through Redis Sentinel: the lock a program holds is kept
//! through a failover (the primary killed, a replica promoted) with
//! `replica_ack=1`, and the program runs to its end.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use crate::common;

use std::time::Duration;

use common::{BUSY, exit_within, file, verrou, wait_for_stamp};
use lock_testkit::server::{RedisServer, SentinelGroup};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_through_sentinel_is_kept_through_a_failover() {
    let group = SentinelGroup::start(RedisServer::builder())
        .await
        .expect("a Sentinel group");
    let url = format!("{}?replica_ack=1&replica_ack_timeout=2s", group.url("redis+sentinel"));
    let dir = tempfile::tempdir().expect("tempdir");
    let ready = file(&dir, "ready");
    let go = file(&dir, "go");
    // The TTL outlasts the failover: the lock is kept because the promoted
    // replica has it, not because it was granted again.
    let mut holder = verrou(&url)
        .args([
            "lock",
            "--ttl",
            "60s",
            "failover",
            "--",
            "sh",
            "-c",
            "echo ready $(date +%s%N) > \"$OUT\"; while [ ! -e \"$GO\" ]; do sleep 0.1; done",
        ])
        .env("OUT", &ready)
        .env("GO", &go)
        .spawn()
        .expect("spawn the holder");
    wait_for_stamp(&ready, "ready", &mut holder).await;

    let old = group.primary().await.expect("the primary");
    old.kill().expect("kill the primary");
    group
        .wait_for_failover(old.port(), Duration::from_secs(30))
        .await
        .expect("a promotion");
    group
        .wait_until_settled(Duration::from_secs(30))
        .await
        .expect("the replica follows the new primary");

    // Still held: another `verrou lock --no-wait` is refused (a connection
    // error while the sentinels still name the dead primary is retried).
    let mut refused = false;
    for _ in 0..100 {
        let status = verrou(&url)
            .args(["lock", "--no-wait", "failover", "--", "true"])
            .status()
            .await
            .expect("run verrou");
        if status.code() == Some(BUSY) {
            refused = true;
            break;
        }
        assert_ne!(status.code(), Some(0), "the lock was granted twice");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(refused, "no BUSY answer through the new primary");

    std::fs::write(&go, b"").expect("let the program end");
    let status = exit_within(&mut holder, Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(0), "{status}");
    let status = verrou(&url)
        .args(["lock", "--no-wait", "failover", "--", "true"])
        .status()
        .await
        .expect("run verrou");
    assert_eq!(status.code(), Some(0), "{status}");
}
