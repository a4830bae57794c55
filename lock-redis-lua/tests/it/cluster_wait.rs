//! WAIT after a write in a cluster must count the replicas of the node that
//! made the write, on the connection that made it (issue 11 item 16).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::{LockBackend, LockToken, Replication};

use lock_core::AcquireOutcome;
use lock_redis_lua::{OnShortfall, RedisLuaBuilder, ReplicaAck};
use lock_testkit::server::{RedisCluster, RedisServer, RespClient};

async fn text(node: &RedisServer, args: &[&str]) -> String {
    let reply = node.cmd(args).await.expect("command");
    reply
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("{args:?}: {reply:?}"))
}

/// The key's slot is being migrated from A to B (A answers ASK, the write
/// goes to B), and B's replica is paused: the write cannot be acknowledged.
/// WAIT used to go to A (the slot's master in the client's map), whose
/// connection had written nothing, and came back at once with A's replica:
/// a false `Confirmed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_after_an_ask_redirect_counts_the_node_that_wrote() {
    let cluster = RedisCluster::start(3, 1, RedisServer::builder())
        .await
        .expect("start a 3-master cluster with replicas");
    let key = "w16";
    let source = cluster.master_for_key(key.as_bytes()).await.expect("source");
    let target = cluster
        .masters()
        .into_iter()
        .find(|m| m.port() != source.port())
        .expect("another master");
    let slot = node_int(source, &["CLUSTER", "KEYSLOT", key]).await.to_string();
    let source_id = text(source, &["CLUSTER", "MYID"]).await;
    let target_id = text(target, &["CLUSTER", "MYID"]).await;
    let mut target_replica = None;
    for replica in cluster.replicas() {
        let info = replica.info("replication").await.expect("INFO replication");
        if info.get("master_port").map(String::as_str) == Some(target.port().to_string().as_str()) {
            target_replica = Some(replica);
        }
    }
    let target_replica = target_replica.expect("the target's replica");

    let backend = RedisLuaBuilder::cluster(cluster.masters().iter().map(|m| m.url()))
        .response_timeout(Duration::from_secs(1))
        // Generous: on a loaded machine a live replica must not fall short by
        // itself (the paused one below then costs the whole 2 s).
        .replica_ack(ReplicaAck::new(1, Duration::from_secs(2)).on_shortfall(OnShortfall::MarkUnconfirmed))
        .build()
        .await
        .expect("connect to the cluster");
    // Warm: the dedicated connections exist and the slot map is known.
    let warm = LockToken::generate().expect("token");
    let AcquireOutcome::Acquired(lease) = backend
        .try_acquire("{w16}:warm", &warm, Duration::from_secs(30))
        .await
        .expect("warm acquire")
    else {
        panic!("free key")
    };
    assert_eq!(lease.replication, Replication::Confirmed { replicas: 1 });

    assert!(
        target
            .cmd(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id])
            .await
            .expect("IMPORTING")
            .is_ok()
    );
    assert!(
        source
            .cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id])
            .await
            .expect("MIGRATING")
            .is_ok()
    );
    target_replica.pause().expect("SIGSTOP the target's replica");

    let mine = LockToken::generate().expect("token");
    let AcquireOutcome::Acquired(lease) = backend
        .try_acquire(key, &mine, Duration::from_secs(30))
        .await
        .expect("acquire")
    else {
        panic!("free key")
    };
    target_replica.resume().expect("SIGCONT");
    // The write went to the target (ASK), whose replica could not ack it.
    let mut on_target = RespClient::connect(target.addr()).await.expect("connect");
    assert!(on_target.cmd(&["ASKING"]).await.expect("ASKING").is_ok());
    let held = on_target.cmd(&["GET", key]).await.expect("GET");
    assert_eq!(
        held.as_str(),
        Some(mine.to_hex().as_str()),
        "the write is on the target"
    );
    assert_eq!(
        lease.replication,
        Replication::Unconfirmed {
            acknowledged: 0,
            requested: 1
        },
        "a WAIT confirmed a write its node's replica never saw"
    );
}

async fn node_int(node: &RedisServer, args: &[&str]) -> i64 {
    node.cmd(args).await.expect("command").as_int().expect("an integer")
}
