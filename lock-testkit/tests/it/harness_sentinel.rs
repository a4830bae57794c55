//! The Sentinel topology: discovery, a failover after a kill and after a
//! pause.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_testkit::server::{RedisServer, RespValue, SENTINEL_MASTER_NAME, SentinelGroup};

const FAILOVER: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_promote_a_replica_when_the_primary_is_killed() {
    let group = SentinelGroup::start(RedisServer::builder()).await.unwrap();
    assert_eq!(group.nodes().len(), 3);
    assert_eq!(group.sentinels().len(), 3);
    assert!(
        group
            .url("redis+sentinel")
            .ends_with(&format!("/{SENTINEL_MASTER_NAME}"))
    );
    let old = group.primary().await.unwrap();
    assert_eq!(old.port(), group.nodes()[0].port());
    old.cmd(&["SET", "k", "v"]).await.unwrap();
    let mut client = old.client().await.unwrap();
    client.cmd(&["SET", "k2", "v2"]).await.unwrap();
    assert_eq!(client.cmd(&["WAIT", "2", "5000"]).await.unwrap(), RespValue::Integer(2));

    old.kill().unwrap();
    let new = group.wait_for_failover(old.port(), FAILOVER).await.unwrap();
    assert_ne!(new.port(), old.port());
    assert_eq!(new.cmd(&["GET", "k2"]).await.unwrap(), RespValue::bulk("v2"));
    assert!(new.cmd(&["SET", "k3", "v3"]).await.unwrap().is_ok());
    // The other replica follows the new primary.
    group.wait_until_settled(FAILOVER).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_promote_a_replica_when_the_primary_is_paused() {
    let group = SentinelGroup::start(RedisServer::builder()).await.unwrap();
    let old = group.primary().await.unwrap();
    old.pause().unwrap();
    let new = group.wait_for_failover(old.port(), FAILOVER).await.unwrap();
    assert_ne!(new.port(), old.port());
    // Resumed, the old primary is demoted to a replica of the new one.
    old.resume().unwrap();
    group.wait_until_settled(FAILOVER).await.unwrap();
    let role = old.info("replication").await.unwrap();
    assert_eq!(role["role"], "slave");
    let ro = old.cmd(&["SET", "k", "v"]).await.unwrap();
    assert!(ro.as_error().unwrap().starts_with("READONLY"), "{ro:?}");
}
