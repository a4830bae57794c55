//! The fault-injecting TCP proxy.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::time::{Duration, Instant};

use lock_testkit::server::{RedisServer, RespClient, RespValue, TcpProxy};

fn pong() -> RespValue {
    RespValue::Simple("PONG".into())
}

async fn round_trip(c: &mut RespClient) -> Duration {
    let started = Instant::now();
    assert_eq!(c.cmd(&["PING"]).await.unwrap(), pong());
    started.elapsed()
}

async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwards_and_adds_latency() {
    let server = RedisServer::start().await.unwrap();
    let proxy = TcpProxy::start(server.addr()).await.unwrap();
    assert_eq!(proxy.target(), server.addr());
    assert_eq!(proxy.url(), format!("redis://127.0.0.1:{}", proxy.port()));
    let mut c = RespClient::connect(proxy.addr()).await.unwrap();
    let direct = round_trip(&mut c).await;
    assert_eq!(c.cmd_raw(&["GET", "missing"]).await.unwrap(), b"$-1\r\n");
    eventually("one open connection", || proxy.connections() == 1).await;

    // Each direction is delayed: a round trip gains twice the latency. The
    // latency is large so that the bounds below, derived from it, leave
    // room for a loaded machine on both sides.
    let latency = Duration::from_millis(500);
    proxy.set_latency(latency);
    let rtt = round_trip(&mut c).await;
    assert!(rtt >= latency * 2, "{rtt:?}");

    // Latency delays, it does not serialise: three pipelined commands take
    // one delayed round trip (2 × latency), not three (6 × latency).
    c.send_raw(b"PING\r\nPING\r\nPING\r\n").await.unwrap();
    let started = Instant::now();
    for _ in 0..3 {
        assert_eq!(c.read().await.unwrap(), pong());
    }
    let pipelined = started.elapsed();
    assert!(pipelined < latency * 4, "{pipelined:?}: serialised");

    // Back to no latency: the first round trip drains what was read with
    // the old latency; after it, the added delay is gone.
    proxy.set_latency(Duration::ZERO);
    round_trip(&mut c).await;
    let after = round_trip(&mut c).await;
    assert!(after < latency, "{after:?} (before any latency: {direct:?})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackhole_stalls_until_lifted() {
    let server = RedisServer::start().await.unwrap();
    let proxy = TcpProxy::start(server.addr()).await.unwrap();
    let mut c = RespClient::connect(proxy.addr()).await.unwrap();
    round_trip(&mut c).await;

    proxy.set_blackhole(true);
    c.set_timeout(Duration::from_millis(300));
    assert!(c.cmd(&["PING"]).await.unwrap_err().is_timeout());

    // New connections are accepted, but nothing comes back.
    let mut held = RespClient::connect(proxy.addr()).await.unwrap();
    held.set_timeout(Duration::from_secs(5));
    let pending = tokio::spawn(async move { held.cmd(&["PING"]).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!pending.is_finished());

    // Held bytes flow once it is lifted.
    proxy.set_blackhole(false);
    assert_eq!(pending.await.unwrap().unwrap(), pong());
    let mut fresh = RespClient::connect(proxy.addr()).await.unwrap();
    round_trip(&mut fresh).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_all_drops_every_connection() {
    let server = RedisServer::start().await.unwrap();
    let proxy = TcpProxy::start(server.addr()).await.unwrap();
    let mut a = RespClient::connect(proxy.addr()).await.unwrap();
    let mut b = RespClient::connect(proxy.addr()).await.unwrap();
    round_trip(&mut a).await;
    round_trip(&mut b).await;
    eventually("two open connections", || proxy.connections() == 2).await;
    let clients = server.info("clients").await.unwrap();
    assert_eq!(clients["connected_clients"], "3"); // a, b, and INFO's own

    proxy.cut_all();
    eventually("no open connection", || proxy.connections() == 0).await;
    assert!(a.cmd(&["PING"]).await.is_err());
    assert!(b.cmd(&["PING"]).await.is_err());
    // The server lost its side too.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let clients = server.info("clients").await.unwrap();
        if clients["connected_clients"] == "1" {
            break;
        }
        assert!(Instant::now() < deadline, "{clients:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // New connections work.
    let mut c = RespClient::connect(proxy.addr()).await.unwrap();
    round_trip(&mut c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_the_server_and_closes_on_drop() {
    let server = RedisServer::start().await.unwrap();
    let proxy = TcpProxy::start(server.addr()).await.unwrap();
    let mut c = RespClient::connect(proxy.addr()).await.unwrap();
    round_trip(&mut c).await;

    // Server killed: open connections end, new ones are closed at once.
    server.kill().unwrap();
    assert!(c.cmd(&["PING"]).await.is_err());
    let mut d = RespClient::connect(proxy.addr()).await.unwrap();
    assert!(d.cmd(&["PING"]).await.is_err());

    // Back on the same port: the proxy reaches it again.
    server.restart_empty().await.unwrap();
    let mut e = RespClient::connect(proxy.addr()).await.unwrap();
    round_trip(&mut e).await;

    let addr = proxy.addr();
    drop(proxy);
    eventually("the proxy to close", || std::net::TcpStream::connect(addr).is_err()).await;
    assert!(e.cmd(&["PING"]).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_after_next_reply_ends_one_connection_after_its_reply() {
    let server = RedisServer::start().await.unwrap();
    let proxy = TcpProxy::start(server.addr()).await.unwrap();
    let mut c = RespClient::connect(proxy.addr()).await.unwrap();
    let mut other = RespClient::connect(proxy.addr()).await.unwrap();
    round_trip(&mut c).await;
    round_trip(&mut other).await;

    proxy.close_after_next_reply();
    // The reply that fires the fault is delivered whole, then the stream ends.
    assert_eq!(c.cmd(&["PING"]).await.unwrap(), pong());
    c.set_timeout(Duration::from_secs(5));
    let after = c.cmd(&["PING"]).await;
    assert!(after.is_err(), "the connection should be closed: {after:?}");
    eventually("the closed connection to be gone", || proxy.connections() == 1).await;

    // One-shot: the other connection, and new ones, are untouched.
    round_trip(&mut other).await;
    round_trip(&mut other).await;
    let mut fresh = RespClient::connect(proxy.addr()).await.unwrap();
    round_trip(&mut fresh).await;
}
