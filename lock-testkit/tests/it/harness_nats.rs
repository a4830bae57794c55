//! The NATS harness: a JetStream server and a three-node JetStream cluster
//! start on free loopback ports (2.11 or later, `sync_interval: always`),
//! survive a node's kill and pause, restart whole, and die with their value;
//! a partitionable cluster cuts a node's routes off and heals, and moves a
//! stream's leader where it is asked.
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use lock_testkit::server::{NatsCluster, SyncInterval, nats_server_binary};

/// The server's `INFO` line, read from a fresh connection to `addr`.
fn info(addr: &str) -> Option<String> {
    let s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).ok()?;
    Some(line)
}

/// The state letter of each thread of `pid`, from `/proc`.
fn thread_states(pid: u32) -> Vec<char> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("/proc");
    let states: Vec<char> = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("stat")).ok())
        .filter_map(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
        })
        .collect();
    assert!(states.len() > 1, "a multi-threaded server: {states:?}");
    states
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

    // A pause returns once every thread of the (multi-threaded) server is
    // stopped, a resume once none is.
    let pid = nats.pid(0).expect("a running server");
    nats.pause(0).unwrap();
    assert!(nats.is_running(0));
    assert!(
        thread_states(pid).iter().all(|s| *s == 'T' || *s == 't'),
        "{:?}",
        thread_states(pid)
    );
    nats.resume(0).unwrap();
    assert!(
        thread_states(pid).iter().all(|s| *s != 'T' && *s != 't'),
        "{:?}",
        thread_states(pid)
    );
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

/// The nodes node `i` has a route to, from its `/routez`.
async fn routed_to(nats: &NatsCluster, i: usize) -> Vec<String> {
    let text = nats.monitor(i, "/routez").await.expect("routez").replace("\": ", "\":");
    let key = "\"remote_name\":\"";
    let mut names: Vec<String> = text
        .match_indices(key)
        .filter_map(|(at, _)| {
            let rest = &text[at + key.len()..];
            rest.find('"').map(|end| rest[..end].to_owned())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Every node's routes, `[[n1, n2], [n0, n2], ...]`.
async fn routes(nats: &NatsCluster) -> Vec<Vec<String>> {
    let mut all = Vec::new();
    for i in 0..nats.len() {
        all.push(routed_to(nats, i).await);
    }
    all
}

/// Polls `routes` until they are `want`, at most 30 s.
async fn wait_for_routes(nats: &NatsCluster, want: &[&[&str]]) {
    let started = Instant::now();
    loop {
        let now = routes(nats).await;
        if now.iter().zip(want).all(|(have, want)| have == want) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "routes {now:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The leader of stream `T` as node `i` sees it.
async fn leader_seen_by(nats: &NatsCluster, i: usize) -> Option<String> {
    let text = nats.monitor(i, "/jsz?streams=true").await.ok()?.replace("\": ", "\":");
    let at = text.find("\"name\":\"T\"")?;
    let key = "\"leader\":\"";
    let start = text[at..].find(key)? + at + key.len();
    let end = text[start..].find('"')?;
    Some(text[start..start + end].to_owned())
}

#[tokio::test]
async fn a_partitionable_cluster_cuts_a_node_off_moves_a_leader_and_heals() {
    let nats = NatsCluster::partitionable(3).await.expect("start nats");
    assert!(nats.is_partitionable());
    // Every route runs through the dialled node's proxy: no node dials
    // another's own route port, and each advertises its proxy.
    let confs: Vec<String> = (0..3).map(|i| config(&nats, i)).collect();
    for conf in &confs {
        assert!(conf.contains("advertise: 127.0.0.1:"), "{conf}");
        let listen = conf
            .split("listen: ")
            .nth(2)
            .and_then(|l| l.lines().next())
            .expect("a route listen");
        assert!(
            confs.iter().all(|c| !c.contains(&format!("nats-route://{listen}"))),
            "{listen}"
        );
    }
    wait_for_routes(&nats, &[&["n1", "n2"], &["n0", "n2"], &["n0", "n1"]]).await;

    let created = nats
        .request(
            0,
            "$JS.API.STREAM.CREATE.T",
            r#"{"name":"T","subjects":["t"],"num_replicas":3}"#,
        )
        .await
        .expect("create an R3 stream");
    assert!(!created.contains("\"error\""), "{created}");
    for to in [1, 0] {
        nats.move_stream_leader("T", to, Duration::from_secs(30))
            .await
            .expect("move the leader");
        assert_eq!(leader_seen_by(&nats, to).await.as_deref(), Some(nats.name(to)));
    }

    // Node 0, the leader, cut off: no route left on its side, the other two
    // still routed to each other, its client port still answers, and the
    // majority elects a leader of its own.
    nats.partition(&[0]).expect("partition");
    wait_for_routes(&nats, &[&[], &["n2"], &["n1"]]).await;
    assert!(info(&nats.addr(0)).is_some_and(|l| l.starts_with("INFO ")));
    let started = Instant::now();
    loop {
        let leader = leader_seen_by(&nats, 1).await;
        if matches!(leader.as_deref(), Some("n1" | "n2")) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no new leader: {leader:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    nats.heal().expect("heal");
    wait_for_routes(&nats, &[&["n1", "n2"], &["n0", "n2"], &["n0", "n1"]]).await;
    // A plain cluster has no proxies to partition with.
    let plain = NatsCluster::start(2, SyncInterval::Always).await.expect("start nats");
    assert!(!plain.is_partitionable());
    assert!(plain.partition(&[0]).is_err());
}
