//! `verrou::connect` while servers are down: a Redlock URL starts with a
//! minority of its nodes unreachable and uses them once they answer; a
//! single-server URL fails at once with a typed error.
#![cfg(all(feature = "redis-lua", feature = "tair", feature = "redlock"))]
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_testkit::server::{Instances, RedisServer};
use verrou::{Error, LockOptions};

/// Generous liveness bound for anything that should happen "soon".
const SOON: Duration = Duration::from_secs(30);

fn hostport(url: &str) -> &str {
    url.trim_start_matches("redis://")
}

/// A `redlock://` URL over `servers`, with short node and connect timeouts.
fn redlock_url(servers: &[RedisServer]) -> String {
    let nodes: String = servers
        .iter()
        .map(|s| format!("&node=redis://{}%3Fconnect_timeout%3D300ms", hostport(&s.url())))
        .collect();
    format!("redlock://?node_timeout=200ms{nodes}")
}

async fn exists(server: &RedisServer, key: &str) -> bool {
    server.cmd(&["EXISTS", key]).await.expect("EXISTS").as_int() == Some(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_starts_with_a_minority_of_nodes_paused_and_uses_them_once_they_answer() {
    let nodes = Instances::start(3, RedisServer::builder()).await.expect("three nodes");
    let servers = nodes.servers();
    servers[2].pause().expect("SIGSTOP node 2");
    let url = redlock_url(servers);
    let backend = tokio::time::timeout(SOON, verrou::connect(&url))
        .await
        .expect("connect hangs with a node paused")
        .expect("connect with 2 of 3 nodes up");
    let locks = backend
        .manager(LockOptions::with_ttl(Duration::from_millis(500)).acquire_timeout(Duration::from_secs(5)))
        .expect("manager");
    let guard = locks.lock("outage:start").await.expect("lock with a node paused");
    assert!(exists(&servers[0], "outage:start").await && exists(&servers[1], "outage:start").await);
    assert!(
        locks.try_lock("outage:start").await.expect("try_lock").is_none(),
        "held twice"
    );
    guard.release().await.expect("release");

    // Once the node answers, locks are taken on it too.
    servers[2].resume().expect("SIGCONT node 2");
    let used = tokio::time::timeout(SOON, async {
        loop {
            let guard = locks.lock("outage:after").await.expect("lock after resume");
            let on_node2 = exists(&servers[2], "outage:after").await;
            guard.release().await.expect("release");
            if on_node2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(used.is_ok(), "the resumed node is never used");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_refuses_to_start_without_a_quorum_of_nodes() {
    let nodes = Instances::start(3, RedisServer::builder()).await.expect("three nodes");
    let servers = nodes.servers();
    servers[1].pause().expect("SIGSTOP node 1");
    servers[2].kill().expect("kill node 2");
    let url = redlock_url(servers);
    let result = tokio::time::timeout(SOON, verrou::connect(&url))
        .await
        .expect("connect hangs with two nodes down");
    match result {
        Err(Error::Backend { message, .. }) => {
            assert!(message.contains("1 of 3"), "{message}");
        }
        other => panic!("expected a Backend error naming the quorum, got {other:?}"),
    }
    servers[1].resume().expect("SIGCONT node 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_server_down_at_start_is_a_typed_error_at_once() {
    for tair in [false, true] {
        let builder = if tair {
            RedisServer::builder().tair_module()
        } else {
            RedisServer::builder()
        };
        let server = builder.start().await.expect("server");
        let scheme = if tair { "tair" } else { "redis" };
        let url = format!("{scheme}://{}?connect_timeout=300ms", hostport(&server.url()));
        // Paused: the TCP handshake completes (the kernel accepts), the
        // server never answers: the connect timeout decides.
        server.pause().expect("SIGSTOP");
        let paused = tokio::time::timeout(SOON, verrou::connect(&url))
            .await
            .expect("connect hangs on a paused server");
        assert!(matches!(paused, Err(Error::Backend { .. })), "{url} paused: {paused:?}");
        server.resume().expect("SIGCONT");
        // Down: the connection is refused.
        server.kill().expect("kill");
        let down = tokio::time::timeout(SOON, verrou::connect(&url))
            .await
            .expect("connect hangs on a stopped server");
        assert!(matches!(down, Err(Error::Backend { .. })), "{url} down: {down:?}");
    }
}
