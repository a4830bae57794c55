//! `verrou status` reads (issue 47): it took the lock for a moment before,
//! which advanced the fencing counter, could jump a fair queue, failed on
//! etcd (its probe's 1 s lease), and said "free" for a name held by
//! `verrou semaphore` or `verrou elect`.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use crate::common;

use std::time::Duration;

use common::verrou;
use lock_testkit::server::{EtcdCluster, RedisServer, RespValue};
use verrou::{Fairness, LockOptions};

async fn status(url: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = verrou(url)
        .arg("status")
        .args(args)
        .output()
        .await
        .expect("run verrou status");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).expect("JSON on stdout")
}

/// The measurement: each `status` of a never-used name left its
/// fence counter behind (no TTL) and advanced it. Now: no key is written,
/// an existing counter stays where it was, and a held lock reports its
/// holder's fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_leaves_the_fencing_counter_unchanged() {
    let server = RedisServer::start().await.expect("redis-server");
    let url = format!("{}?fencing=true", server.url());
    let fence = "verrou:lua:fence:{st47}";
    for _ in 0..3 {
        let (code, text) = status(&url, &["st47"]).await;
        assert_eq!(code, Some(1), "{text}");
        assert!(text.contains("lock: free"), "{text}");
    }
    let exists = server.cmd(&["EXISTS", fence]).await.expect("EXISTS");
    assert_eq!(exists, RespValue::Integer(0), "status wrote the fence counter");

    let backend = verrou::connect(&url).await.expect("connect");
    let locks = backend.manager(LockOptions::default()).expect("manager");
    let g = locks.lock("st47").await.expect("lock");
    let token = g.fencing_token().expect("fencing on").0;
    let (code, text) = status(&url, &["--json", "--kind", "lock", "st47"]).await;
    assert_eq!(code, Some(0), "{text}");
    let out = json(&text);
    assert_eq!(out["held"], true);
    assert_eq!(out["lock"]["fencing_token"].as_u64(), Some(token), "{text}");
    g.release().await.expect("release");
    let counter = server.cmd(&["GET", fence]).await.expect("GET");
    for _ in 0..3 {
        assert_eq!(status(&url, &["st47"]).await.0, Some(1));
    }
    assert_eq!(
        server.cmd(&["GET", fence]).await.expect("GET"),
        counter,
        "the counter moved"
    );
}

/// A fair waiter queued behind a holder keeps its place while `status`
/// runs: the queue holds the same single entry before and after, and the
/// waiter gets the key at the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_leaves_the_fair_queue_unchanged() {
    let server = RedisServer::start().await.expect("redis-server");
    let url = server.url();
    let queue = "verrou:lua:queue:{fq47}";
    let backend = verrou::connect(&url).await.expect("connect");
    let fair = LockOptions::default().fairness(Fairness::Fifo {
        claim: Duration::from_secs(10),
    });
    let holder = backend.manager(fair.clone()).expect("manager");
    let g = holder.lock("fq47").await.expect("holder");
    let waiter = backend
        .manager(fair.acquire_timeout(Duration::from_secs(60)))
        .expect("manager");
    let waiting = tokio::spawn(async move { waiter.lock("fq47").await });
    let mut queued = false;
    for _ in 0..200 {
        if server.cmd(&["ZCARD", queue]).await.expect("ZCARD") == RespValue::Integer(1) {
            queued = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(queued, "the waiter never queued");
    let before = server.cmd(&["ZRANGE", queue, "0", "-1"]).await.expect("ZRANGE");
    for _ in 0..3 {
        assert_eq!(status(&url, &["fq47"]).await.0, Some(0), "held");
    }
    assert_eq!(server.cmd(&["ZRANGE", queue, "0", "-1"]).await.expect("ZRANGE"), before);
    g.release().await.expect("release");
    let won = waiting.await.expect("waiter").expect("the queued waiter gets the key");
    won.release().await.expect("release");
}

/// On etcd, `status` failed: its probe asked for a 1 s lease, below the
/// server's minimum. A read needs no lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_works_on_etcd() {
    let etcd = EtcdCluster::single().await.expect("start etcd");
    let url = etcd.url();
    let (code, text) = status(&url, &["--kind", "lock", "e47"]).await;
    assert_eq!(code, Some(1), "{text}");
    let backend = verrou::connect(&url).await.expect("connect");
    let locks = backend.manager(LockOptions::default()).expect("manager");
    let g = locks.lock("e47").await.expect("lock");
    let (code, text) = status(&url, &["--json", "e47"]).await;
    assert_eq!(code, Some(0), "{text}");
    let out = json(&text);
    assert_eq!(
        out["lock"]["fencing_token"].as_u64(),
        g.fencing_token().map(|t| t.0),
        "{text}"
    );
    assert!(
        out["lock"]["remaining_ttl_ms"].as_u64().is_some_and(|ms| ms <= 31_000),
        "{text}"
    );
    g.release().await.expect("release");
}

/// A name held by `verrou semaphore` or `verrou elect` is not "free": the
/// default reads every kind; `--kind lock` reads the lock alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_semaphores_and_leaders() {
    let server = RedisServer::start().await.expect("redis-server");
    let url = server.url();
    let backend = verrou::connect(&url).await.expect("connect");
    let semaphores = backend.semaphores(LockOptions::default()).expect("semaphores");
    let permit = semaphores
        .semaphore("k47", 3)
        .expect("semaphore")
        .acquire(1)
        .await
        .expect("permit");
    let (code, text) = status(&url, &["k47"]).await;
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("semaphore: 1 of 3 permits in use (1 holders)"), "{text}");
    assert!(text.contains("lock: free"), "{text}");
    assert_eq!(status(&url, &["--kind", "lock", "k47"]).await.0, Some(1));
    let (_, text) = status(&url, &["--json", "k47"]).await;
    assert_eq!(json(&text)["semaphore"]["in_use"].as_u64(), Some(1), "{text}");
    permit.release().await.expect("release");

    let elections = backend.elections(LockOptions::default()).expect("elections");
    let leadership = elections.campaign("k47", b"node-a").await.expect("campaign");
    let (code, text) = status(&url, &["--kind", "election", "k47"]).await;
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains(&format!("leader: \"node-a\", term {}", leadership.term())),
        "{text}"
    );
    leadership.resign().await.expect("resign");
    let (code, text) = status(&url, &["k47"]).await;
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("leader: none") && text.contains("semaphore: no permit in use"),
        "{text}"
    );
}
