//! Topologies: replicated pair, independent instances, cluster.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lock_testkit::server::{Instances, RedisCluster, RedisServer, RedisServerBuilder, ReplicatedPair, RespValue};

fn assert_gone(pid: u32, dir: &Path) {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&cmdline).contains("redis"),
        "pid {pid} still runs a server"
    );
    assert!(!dir.exists(), "{} was not removed", dir.display());
}

fn footprint<'a>(servers: impl IntoIterator<Item = &'a RedisServer>) -> Vec<(u32, PathBuf)> {
    servers
        .into_iter()
        .map(|s| (s.pid().unwrap(), s.dir().to_path_buf()))
        .collect()
}

fn assert_all_gone(footprint: &[(u32, PathBuf)]) {
    for (pid, dir) in footprint {
        assert_gone(*pid, dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_pair_replicates() {
    let pair = ReplicatedPair::start(RedisServer::builder()).await.unwrap();
    let repl = pair.replica().info("replication").await.unwrap();
    assert_eq!(repl["role"], "slave");
    assert_eq!(repl["master_link_status"], "up");
    assert_eq!(repl["master_port"], pair.primary().port().to_string());

    // WAIT counts acknowledgements of this connection's own writes.
    let mut primary = pair.primary().client().await.unwrap();
    primary.cmd(&["SET", "k", "v"]).await.unwrap();
    assert_eq!(
        primary.cmd(&["WAIT", "1", "5000"]).await.unwrap(),
        RespValue::Integer(1)
    );
    assert_eq!(pair.replica().cmd(&["GET", "k"]).await.unwrap(), RespValue::bulk("v"));
    let ro = pair.replica().cmd(&["SET", "k", "w"]).await.unwrap();
    assert!(ro.as_error().unwrap().starts_with("READONLY"), "{ro:?}");

    // The replica resyncs after a restart of its own.
    pair.replica().restart_empty().await.unwrap();
    pair.wait_for_sync(Duration::from_secs(10)).await.unwrap();
    assert_eq!(pair.replica().cmd(&["GET", "k"]).await.unwrap(), RespValue::bulk("v"));

    let fp = footprint([pair.primary(), pair.replica()]);
    drop(pair);
    assert_all_gone(&fp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn independent_instances() {
    let builder = RedisServer::builder().arg("--maxmemory").arg("7mb");
    let instances = Instances::start(3, builder).await.unwrap();
    assert_eq!(instances.len(), 3);
    let ports: HashSet<u16> = instances.servers().iter().map(RedisServer::port).collect();
    assert_eq!(ports.len(), 3);
    assert_eq!(instances.urls().len(), 3);
    assert_eq!(instances.addrs()[1], instances[1].addr());
    for s in instances.servers() {
        let mm = s.cmd(&["CONFIG", "GET", "maxmemory"]).await.unwrap();
        assert_eq!(mm.as_array().unwrap()[1], RespValue::bulk("7340032"));
    }
    // Independent: a write to one is not seen by another.
    instances[0].cmd(&["SET", "k", "v"]).await.unwrap();
    assert_eq!(instances[1].cmd(&["GET", "k"]).await.unwrap(), RespValue::Bulk(None));

    let fp = footprint(instances.servers());
    drop(instances);
    assert_all_gone(&fp);
}

async fn check_cluster(cluster: &RedisCluster, masters: usize, replicas: usize) {
    assert_eq!(cluster.nodes().len(), masters * (1 + replicas));
    assert_eq!(cluster.masters().len(), masters);
    assert_eq!(cluster.replicas().len(), masters * replicas);
    assert_eq!(cluster.urls().len(), cluster.nodes().len());
    assert_eq!(cluster.seed_url(), cluster.masters()[0].url());
    for node in cluster.nodes() {
        let info = node.cmd(&["CLUSTER", "INFO"]).await.unwrap();
        let info = info.as_str().unwrap();
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_slots_assigned:16384"), "{info}");
    }
    for replica in cluster.replicas() {
        assert_eq!(replica.info("replication").await.unwrap()["master_link_status"], "up");
    }
    // Keys go to the node owning their slot; others redirect.
    for key in ["a", "b", "c", "{user1}.lock"] {
        let owner = cluster.master_for_key(key.as_bytes()).await.unwrap();
        assert!(owner.cmd(&["SET", key, "v"]).await.unwrap().is_ok());
        for other in cluster.masters() {
            if other.port() != owner.port() {
                let moved = other.cmd(&["GET", key]).await.unwrap();
                let msg = moved.as_error().unwrap();
                assert!(
                    msg.starts_with("MOVED") && msg.ends_with(&format!(":{}", owner.port())),
                    "{msg}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_with_replicas() {
    let started = Instant::now();
    let cluster = RedisCluster::start(3, 1, RedisServer::builder()).await.unwrap();
    eprintln!("3x2 cluster ready in {:?}", started.elapsed());
    check_cluster(&cluster, 3, 1).await;

    // Kill a master: its replica takes over after the node timeout.
    let mut c = cluster.master_for_key(b"k").await.unwrap().client().await.unwrap();
    c.cmd(&["SET", "k", "v"]).await.unwrap();
    assert_eq!(c.cmd(&["WAIT", "1", "5000"]).await.unwrap(), RespValue::Integer(1));
    let old = cluster.master_for_key(b"k").await.unwrap();
    let fp = footprint(cluster.nodes());
    old.kill().unwrap();
    let started = Instant::now();
    cluster.wait_until_ok(Duration::from_secs(20)).await.unwrap();
    let new = cluster.master_for_key(b"k").await.unwrap();
    eprintln!("failover took {:?}", started.elapsed());
    assert_ne!(new.port(), old.port());
    assert!(cluster.replicas().iter().any(|r| r.port() == new.port()));
    assert_eq!(new.cmd(&["GET", "k"]).await.unwrap(), RespValue::bulk("v"));

    drop(cluster);
    assert_all_gone(&fp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_applies_modules_and_args_to_every_node() {
    // The test command builds the Tair module first; a missing one fails
    // here with the command that builds it.
    lock_testkit::server::tair_module_path().unwrap_or_else(|e| panic!("{e}"));
    let builder: RedisServerBuilder = RedisServer::builder().arg("--maxmemory").arg("9mb").tair_module();
    let started = Instant::now();
    let cluster = RedisCluster::start(3, 0, builder).await.unwrap();
    eprintln!("3x1 cluster ready in {:?}", started.elapsed());
    check_cluster(&cluster, 3, 0).await;
    for node in cluster.nodes() {
        let mm = node.cmd(&["CONFIG", "GET", "maxmemory"]).await.unwrap();
        assert_eq!(mm.as_array().unwrap()[1], RespValue::bulk("9437184"));
        let modules = node.cmd(&["MODULE", "LIST"]).await.unwrap();
        assert_eq!(modules.as_array().unwrap().len(), 1, "{modules:?}");
    }

    // A node restarted with its data keeps its identity, slots and keys.
    let owner = cluster.master_for_key(b"k").await.unwrap();
    owner.cmd(&["SET", "k", "v"]).await.unwrap();
    owner.restart_keeping_data().await.unwrap();
    cluster.wait_until_ok(Duration::from_secs(10)).await.unwrap();
    assert_eq!(owner.cmd(&["GET", "k"]).await.unwrap(), RespValue::bulk("v"));

    let fp = footprint(cluster.nodes());
    drop(cluster);
    assert_all_gone(&fp);
}

#[tokio::test]
async fn cluster_needs_three_masters() {
    let err = RedisCluster::start(2, 0, RedisServer::builder()).await.unwrap_err();
    assert!(err.to_string().contains("at least 3 masters"), "{err}");
}
