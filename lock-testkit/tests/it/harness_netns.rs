//! The network-namespace harness: hosts, silent partitions, heal, clean-up.
//! Needs root and `ip` (CI has both): without them these tests fail with
//! an install hint, they are never skipped.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use std::path::Path;
use std::time::Duration;

use lock_testkit::server::{
    NET_NATS_PORT, NetCluster, NetNatsServer, NetRedisServer, Network, RespClient, RespValue, clean_stale_namespaces,
    netem_available,
};
use tokio::io::AsyncBufReadExt;

const SHORT: Duration = Duration::from_millis(500);

fn namespace_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

/// Measured, not assumed: whether `tc ... netem` works here. The docs say
/// this kernel has none; the test prints what it finds.
#[test]
fn netem_is_measured() {
    let has = netem_available().expect("namespaces available");
    eprintln!("netem qdisc available on this kernel: {has}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_is_silent_and_heals() {
    let net = Network::new().expect("network");
    let client_host = net.add_host("client").expect("client host");
    let server_host = net.add_host("server").expect("server host");
    let server = NetRedisServer::builder().start(&server_host).await.expect("server");
    let addr = server.addr();

    // The client, on its own host, talks to the server over the switch.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(Vec<String>, tokio::sync::oneshot::Sender<_>)>(4);
    client_host.handle().expect("client runtime").spawn(async move {
        let mut conn = RespClient::connect_timeout(addr, SHORT).await;
        while let Some((args, reply)) = rx.recv().await {
            let r = match &mut conn {
                Ok(c) => tokio::time::timeout(SHORT, c.cmd(&args))
                    .await
                    .map_err(|_| "timeout".to_owned()),
                Err(e) => Err(format!("connect: {e}")),
            };
            let r = r.and_then(|r| {
                r.map_err(|e| {
                    if e.is_timeout() {
                        "timeout".to_owned()
                    } else {
                        format!("{e}")
                    }
                })
            });
            let _ = reply.send(r);
        }
    });
    let ask = |args: &[&str]| {
        let tx = tx.clone();
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        async move {
            let (rtx, rrx) = tokio::sync::oneshot::channel();
            tx.send((args, rtx)).await.expect("client task");
            rrx.await.expect("client task")
        }
    };
    assert_eq!(ask(&["SET", "k", "before"]).await.expect("set").as_str(), Some("OK"));

    net.partition(&[&server_host]).expect("partition");
    // Silent: the open connection gets no answer (no reset, no error)...
    assert_eq!(ask(&["SET", "k", "during"]).await.expect_err("no answer"), "timeout");
    // ...a new one is not refused: it times out.
    let fresh = client_host
        .cmd(addr, &["PING"], SHORT)
        .await
        .expect_err("no connection across the partition");
    assert!(fresh.is_timeout(), "a timeout, not a refusal: {fresh}");
    // The server itself is fine, seen from its own host.
    assert_eq!(server.cmd(&["PING"]).await.expect("local ping").as_str(), Some("PONG"));

    net.heal().expect("heal");
    // A new connection works again (bounded retries: ARP and TCP retransmits).
    let mut healed = false;
    for _ in 0..50 {
        if let Ok(RespValue::Simple(s)) = client_host.cmd(addr, &["PING"], SHORT).await {
            healed = s == "PONG";
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(healed, "the client reaches the server after heal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolating_a_host_cuts_it_from_everyone_and_partitions_keep_sides_connected() {
    let net = Network::new().expect("network");
    let a = net.add_host("a").expect("a");
    let b = net.add_host("b").expect("b");
    let c = net.add_host("c").expect("c");
    let sb = NetRedisServer::builder().start(&b).await.expect("server b");
    let sc = NetRedisServer::builder().start(&c).await.expect("server c");
    // a and b on one side, c on the other.
    net.partition(&[&a, &b]).expect("partition");
    assert!(a.cmd(sb.addr(), &["PING"], SHORT).await.is_ok(), "same side");
    assert!(a.cmd(sc.addr(), &["PING"], SHORT).await.is_err(), "other side");
    net.heal().expect("heal");
    net.isolate(&b).expect("isolate");
    assert!(a.cmd(sb.addr(), &["PING"], SHORT).await.is_err(), "isolated");
    net.heal().expect("heal");
    let mut back = false;
    for _ in 0..50 {
        if a.cmd(sc.addr(), &["PING"], SHORT).await.is_ok() && a.cmd(sb.addr(), &["PING"], SHORT).await.is_ok() {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(back, "every host reachable after heal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_is_removed_on_drop_and_stale_namespaces_are_cleaned() {
    let names;
    {
        let net = Network::new().expect("network");
        let h = net.add_host("x").expect("host");
        let _server = NetRedisServer::builder().start(&h).await.expect("server");
        names = vec![
            h.name().to_owned(),
            format!("{}-sw", h.name().rsplit_once('-').unwrap().0),
        ];
        for n in &names {
            assert!(namespace_exists(n), "{n} exists while in use");
        }
    }
    for n in &names {
        assert!(!namespace_exists(n), "{n} deleted on drop");
    }
    // A namespace left by a process that is gone.
    let dead = std::process::Command::new("true").spawn().expect("spawn");
    let pid = dead.id();
    let mut dead = dead;
    dead.wait().expect("wait");
    let stale = format!("verrou-{pid}-0-sw");
    let ok = std::process::Command::new("ip")
        .args(["netns", "add", &stale])
        .status()
        .expect("ip");
    assert!(ok.success());
    let deleted = clean_stale_namespaces().expect("clean");
    assert!(deleted >= 1);
    assert!(!namespace_exists(&stale), "stale namespace deleted");
}

/// Redis Cluster's split-brain, shown: one master and a client partitioned
/// into the minority while the majority promotes that master's replica.
/// For a while both nodes are masters of the same slots; a write the old
/// master acknowledged in the minority is lost when the partition heals
/// (the old master becomes a replica of the new one and resyncs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_master_and_its_promoted_replica_are_both_masters_and_the_minority_write_is_lost() {
    let net = Network::new().expect("network");
    let cluster = NetCluster::start(&net, 3, Duration::from_millis(1000), NetRedisServer::builder())
        .await
        .expect("cluster");
    let client = net.add_host("client").expect("client host");
    let (old, new) = (&cluster.masters()[0], &cluster.replicas()[0]);
    // A key in the first master's slots.
    let mut key = None;
    for i in 0..100 {
        let k = format!("split-{i}");
        if cluster.master_index_for_key(&k).await.expect("keyslot") == 0 {
            key = Some(k);
            break;
        }
    }
    let key = key.expect("a key on master 0");
    let ok = client
        .cmd(old.addr(), &["SET", &key, "before"], SHORT)
        .await
        .expect("set");
    assert!(ok.is_ok(), "{ok:?}");
    let acked = old.cmd(&["WAIT", "1", "2000"]).await.expect("wait");
    assert_eq!(acked.as_int(), Some(1), "replicated before the partition");

    net.partition(&[old.host(), &client]).expect("partition");
    // The minority master still accepts a write at once (it has not yet
    // noticed it lost the majority: that takes cluster-node-timeout).
    let w = client
        .cmd(old.addr(), &["SET", &key, "minority"], SHORT)
        .await
        .expect("minority write");
    assert!(w.is_ok(), "the minority master acknowledged the write: {w:?}");
    // The majority promotes the replica (bounded wait).
    let mut promoted = false;
    for _ in 0..200 {
        if NetCluster::is_master(new).await.unwrap_or(false) {
            promoted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(promoted, "the replica was promoted on the majority side");
    assert!(
        NetCluster::is_master(old).await.expect("role"),
        "two masters for the same slots: the old one still believes it is master"
    );

    net.heal().expect("heal");
    let mut demoted = false;
    for _ in 0..200 {
        if !NetCluster::is_master(old).await.unwrap_or(true) {
            demoted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(demoted, "the old master became a replica after the heal");
    cluster
        .wait_until_ok(Duration::from_secs(20))
        .await
        .expect("cluster ok after heal");
    let v = new.cmd(&["GET", &key]).await.expect("get");
    assert_eq!(
        v.as_str(),
        Some("before"),
        "the write acknowledged in the minority is lost"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_server_on_its_host_is_reached_across_the_switch_and_a_partition_cuts_it() {
    let net = Network::new().expect("network");
    let client = net.add_host("client").expect("client host");
    let server = NetNatsServer::start(&net.add_host("nats").expect("server host"))
        .await
        .expect("nats-server");
    let addr = server.addr();
    assert_eq!(addr.port(), NET_NATS_PORT);
    assert_eq!(server.url(), format!("nats://{addr}"));
    // The server's INFO line, read by a fresh connection from the client's host.
    let info = move || async move {
        tokio::time::timeout(SHORT, async {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            let mut line = String::new();
            tokio::io::BufReader::new(stream).read_line(&mut line).await?;
            Ok::<_, std::io::Error>(line)
        })
        .await
    };
    let line = client
        .run(info)
        .await
        .expect("client host")
        .expect("in time")
        .expect("INFO");
    assert!(
        line.starts_with("INFO ") && line.contains("\"jetstream\":true"),
        "{line}"
    );

    net.partition(&[&client]).expect("partition");
    assert!(
        client.run(info).await.expect("client host").is_err(),
        "no answer across the partition"
    );
    net.heal().expect("heal");
    let mut healed = false;
    for _ in 0..50 {
        if let Ok(Ok(Ok(line))) = client.run(info).await {
            healed = line.starts_with("INFO ");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(healed, "the client reaches the server after heal");
}
