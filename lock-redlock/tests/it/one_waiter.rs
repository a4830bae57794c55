//! One waiter across the nodes: a Redlock waiting on a key registers the
//! same waiter (the same own id, the same age) in every node's wake set, so
//! nodes that reserve the key for the waiter that has waited longest pick
//! the same one. Before, each node drew its own id and counted its own age,
//! and after a split vote (which restarts the age on the nodes that had
//! granted) the nodes picked different waiters: none got a quorum of
//! reservations. Within one millisecond, waiters are ordered by their own
//! id, which is the same on every node (the process's part of the id is
//! not).

#![allow(clippy::expect_used, clippy::panic)] // test set-up

use std::sync::Arc;
use std::time::Duration;

use lock_core::AcquireOutcome;
use lock_core::{LockBackend, LockToken};
use lock_redis_lua::RedisLuaBuilder;
use lock_redlock::Redlock;
use lock_testkit::server::{Instances, RedisServer, RespValue};

async fn redlock(urls: &[String]) -> Redlock {
    let mut nodes: Vec<Arc<dyn LockBackend>> = Vec::new();
    for url in urls {
        let node = RedisLuaBuilder::url(url.clone())
            .release_notifications(true)
            .build()
            .await
            .expect("connect");
        nodes.push(Arc::new(node));
    }
    Redlock::new(nodes).expect("valid redlock")
}

/// Each node's registered waiters of `key`: (own id, when its acquire
/// started waiting, server ms).
async fn registered(servers: &Instances, key: &str) -> Vec<Vec<(String, f64)>> {
    let since = format!("verrou:lua:wake-since:{{{key}}}");
    let mut out = Vec::new();
    for server in servers.servers() {
        let reply = server
            .cmd(&["ZRANGE", since.as_str(), "0", "-1", "WITHSCORES"])
            .await
            .expect("ZRANGE");
        let RespValue::Array(Some(items)) = reply else {
            panic!("ZRANGE answered {reply:?}");
        };
        let mut node = Vec::new();
        for pair in items.chunks(2) {
            let [RespValue::Bulk(Some(id)), RespValue::Bulk(Some(score))] = pair else {
                panic!("ZRANGE item {pair:?}");
            };
            let id = String::from_utf8_lossy(id).into_owned();
            let score: f64 = String::from_utf8_lossy(score).parse().expect("a score");
            // The first half names the node's process (its channel); the
            // second is the waiter's own id.
            node.push((id[32..].to_owned(), score));
        }
        out.push(node);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_the_same_waiter_on_every_node_across_its_waits() {
    let servers = Instances::start(3, RedisServer::builder())
        .await
        .expect("start 3 redis-servers");
    let urls = servers.urls();
    let key = "one-waiter";
    let holder = redlock(&urls).await;
    let waiter = redlock(&urls).await;
    let ttl = Duration::from_secs(30);
    let held = LockToken::generate().expect("token");
    assert!(matches!(
        holder.try_acquire(key, &held, ttl).await.expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    let mut ids = Vec::new();
    for _ in 0..3 {
        waiter.wait_for_release(key, Duration::from_millis(150)).await;
        let nodes = registered(&servers, key).await;
        let first = nodes
            .first()
            .and_then(|n| n.first())
            .cloned()
            .expect("registered on node 0");
        for node in &nodes {
            assert_eq!(node.len(), 1, "one waiter per node: {nodes:?}");
            assert_eq!(node[0].0, first.0, "the same waiter on every node: {nodes:?}");
            // Ties within a millisecond go by the waiter's own id: the same
            // fraction of a millisecond on every node.
            assert!(
                (node[0].1.fract() - first.1.fract()).abs() < 1e-6,
                "the same tie-break on every node: {nodes:?}"
            );
        }
        ids.push(first.0);
    }
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "one id across the waits: {ids:?}");
    holder.release(key, &held).await.expect("release");
}
