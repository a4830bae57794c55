//! Redis Sentinel on network-namespace hosts: a partition leaves the
//! primary in a minority, the sentinels promote a replica on the other
//! side, and the heal demotes the old primary, losing what it took alone.
//! Needs root and `ip`, like the other namespace tests (never skipped).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_testkit::server::{NetRedisServer, NetSentinelGroup, Network, RespClient};

/// Bounds each command and connect: generous, as the other namespace tests
/// run beside it on a loaded machine (a bound, never a timing assertion).
const SHORT: Duration = Duration::from_secs(5);
const CONVERGE: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_sentinel_primary_is_replaced_then_demoted_and_its_minority_write_is_lost() {
    let net = Network::new().expect("network");
    let group = NetSentinelGroup::start(&net, NetRedisServer::builder())
        .await
        .expect("sentinel group");
    let url = group.url("redis+sentinel");
    assert!(
        url.starts_with("redis+sentinel://") && url.ends_with("/verrou"),
        "{url}"
    );
    assert!(
        !url.contains("127.0.0.1"),
        "the sentinels are named by their host addresses: {url}"
    );
    let client = net.add_host("client").expect("client host");
    let old = group.primary().await.expect("primary");
    assert_eq!(old.addr(), group.nodes()[0].addr());
    let ok = client
        .cmd(old.addr(), &["SET", "k", "before"], SHORT)
        .await
        .expect("set");
    assert!(ok.is_ok(), "{ok:?}");
    let acked = old.cmd(&["WAIT", "2", "2000"]).await.expect("wait");
    assert_eq!(acked.as_int(), Some(2), "replicated before the partition");

    net.partition(&[old.host(), &client]).expect("partition");
    // Nobody tells the minority primary: it takes the write; no replica
    // follows it any more, so WAIT 1 (on the writing connection: WAIT
    // waits for that connection's own writes) acknowledges nothing.
    let addr = old.addr();
    let (w, acked) = client
        .run(move || async move {
            let mut c = RespClient::connect_timeout(addr, SHORT).await.expect("connect");
            let w = c.cmd(&["SET", "k", "minority"]).await.expect("minority write");
            let acked = c.cmd(&["WAIT", "1", "300"]).await.expect("wait");
            (w, acked)
        })
        .await
        .expect("on the client's host");
    assert!(w.is_ok(), "the minority primary acknowledged the write: {w:?}");
    assert_eq!(acked.as_int(), Some(0), "no replica acknowledges the minority write");
    let new = group.wait_for_failover(old, CONVERGE).await.expect("failover");
    assert_ne!(new.addr(), old.addr());
    assert!(
        NetSentinelGroup::is_primary(old).await.expect("role"),
        "two primaries: the old one still believes it is the primary"
    );

    net.heal().expect("heal");
    group
        .wait_until_settled(CONVERGE)
        .await
        .expect("settled after the heal");
    assert!(!NetSentinelGroup::is_primary(old).await.expect("role"), "demoted");
    let v = new.cmd(&["GET", "k"]).await.expect("get");
    assert_eq!(
        v.as_str(),
        Some("before"),
        "the write the minority primary took is lost"
    );
}
