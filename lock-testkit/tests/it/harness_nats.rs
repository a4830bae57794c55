//! The NATS harness: a JetStream server and a three-node JetStream cluster
//! start on free loopback ports (2.11 or later, `sync_interval: always`),
//! survive a node's kill and pause, restart whole, and die with their value.
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::io::{BufRead, BufReader};
use std::time::Duration;

use lock_testkit::server::{NatsCluster, SyncInterval, nats_server_binary};

/// The server's `INFO` line, read from a fresh connection to `addr`.
fn info(addr: &str) -> Option<String> {
    let s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).ok()?;
    Some(line)
}

fn config(cluster: &NatsCluster, i: usize) -> String {
    std::fs::read_to_string(cluster.dir().join(format!("{}.conf", cluster.name(i)))).unwrap()
}

#[tokio::test]
async fn single_server_runs_jetstream_and_dies_with_its_value() {
    let binary = nats_server_binary().expect("a nats-server 2.11+");
    assert!(binary.is_absolute(), "{}", binary.display());
    let nats = NatsCluster::single().await.expect("start nats");
    assert_eq!((nats.len(), nats.replicas()), (1, 1));
    assert!(nats.url().starts_with("nats://127.0.0.1:"));
    let line = info(&nats.addr(0)).expect("INFO");
    assert!(line.starts_with("INFO "), "{line}");
    assert!(line.contains("\"jetstream\":true"), "{line}");
    assert!(config(&nats, 0).contains("sync_interval: always"));
    assert_eq!(nats.stream_leader("KV_none", Duration::from_secs(1)).await.unwrap(), 0);

    nats.pause(0).unwrap();
    assert!(nats.is_running(0));
    nats.resume(0).unwrap();
    nats.restart(0).await.expect("restart");
    assert!(info(&nats.addr(0)).is_some());

    let (addr, dir) = (nats.addr(0), nats.dir().to_path_buf());
    drop(nats);
    assert!(info(&addr).is_none(), "the server is gone");
    assert!(!dir.exists(), "its directory is gone");
}

#[tokio::test]
async fn three_nodes_form_one_jetstream_cluster() {
    let nats = NatsCluster::three().await.expect("start nats");
    assert_eq!((nats.len(), nats.replicas()), (3, 3));
    assert_eq!(nats.url().matches("127.0.0.1:").count(), 3);
    for i in 0..3 {
        let line = info(&nats.addr(i)).expect("INFO");
        assert!(line.contains(&format!("\"server_name\":\"n{i}\"")), "{line}");
        let conf = config(&nats, i);
        assert!(
            conf.contains("sync_interval: always") && conf.contains("routes"),
            "{conf}"
        );
    }
    nats.kill(1).unwrap();
    assert!(!nats.is_running(1));
    assert!(info(&nats.addr(1)).is_none());
    nats.restart(1).await.expect("restart one node");
    assert!(nats.is_running(1));
    nats.restart_all().await.expect("restart the whole cluster");
    assert!((0..3).all(|i| nats.is_running(i) && info(&nats.addr(i)).is_some()));
}

#[tokio::test]
async fn the_default_sync_interval_is_left_out_of_the_config() {
    let nats = NatsCluster::start(1, SyncInterval::Default).await.expect("start nats");
    assert_eq!(nats.sync_interval(), SyncInterval::Default);
    assert!(!config(&nats, 0).contains("sync_interval"));
}
