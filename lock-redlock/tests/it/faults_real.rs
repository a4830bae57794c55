//! Redlock over 3 real `redis-server` processes (Lua backend) with node
//! faults: killed, paused (SIGSTOP), restarted without data. Real time;
//! every time bound is derived from a timeout it must beat by far.

#![allow(clippy::expect_used, clippy::panic)] // test set-up

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Backoff, Error, LockBackend, LockManager, LockOptions, LockToken, NodeOutcome};

use lock_core::{AcquireOutcome, ReleaseOutcome};
use lock_redis_lua::{RedisLuaBackend, RedisLuaBuilder};
use lock_redlock::{Redlock, RedlockOptions};
use lock_testkit::server::{Instances, RedisServer};
use tokio::time::Instant;

/// Long enough that renewals (every TTL / 3) reach a quorum on a loaded
/// machine.
const TTL: Duration = Duration::from_secs(1);
const NODE_TIMEOUT: Duration = Duration::from_millis(250);
/// The nodes' own connect and response timeouts: a call that waited for a
/// dead or paused node instead of deciding without it takes this long, so
/// "fast" means well under it (`FAST`).
const NODE_CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
const FAST: Duration = Duration::from_secs(5);

async fn servers(n: usize) -> Instances {
    Instances::start(n, RedisServer::builder())
        .await
        .expect("start redis-servers")
}

async fn client(servers: &Instances) -> Redlock {
    let mut nodes: Vec<(String, Arc<dyn LockBackend>)> = Vec::new();
    for url in servers.urls() {
        let node = RedisLuaBuilder::url(url.clone())
            .connect_timeout(NODE_CLIENT_TIMEOUT)
            .response_timeout(NODE_CLIENT_TIMEOUT)
            .release_notifications(true)
            .build()
            .await
            .expect("connect");
        nodes.push((url, Arc::new(node)));
    }
    Redlock::with_named_nodes(nodes, RedlockOptions::default().node_timeout(NODE_TIMEOUT)).expect("valid redlock")
}

fn manager(redlock: Redlock) -> LockManager {
    LockManager::with_options(redlock, LockOptions::with_ttl(TTL).acquire_timeout(TTL * 4)).expect("valid options")
}

fn token() -> LockToken {
    LockToken::generate().expect("token")
}

/// Every key on a running server (`KEYS *`, through the raw RESP client).
async fn keys(server: &RedisServer) -> Vec<String> {
    let reply = server.cmd(&["KEYS", "*"]).await.expect("KEYS");
    reply
        .as_array()
        .expect("KEYS returns an array")
        .iter()
        .filter_map(|k| k.as_str().map(str::to_owned))
        .collect()
}

/// A failed acquire (or a release decided by a quorum) gives back what
/// answered in time before returning, and what answers later as soon as it
/// does: the node is empty shortly after.
async fn no_keys_soon(server: &RedisServer) {
    let give_up = Instant::now() + FAST;
    loop {
        let left = keys(server).await;
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < give_up, "stray keys {left:?} on {}", server.url());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The token stored under `key`, if any.
async fn stored(server: &RedisServer, key: &str) -> Option<String> {
    server
        .cmd(&["GET", key])
        .await
        .expect("GET")
        .as_str()
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_killed_node_of_three_still_acquires_renews_and_releases() {
    let servers = servers(3).await;
    let locks = manager(client(&servers).await);
    servers[1].kill().expect("kill");
    let guard = locks.lock("k").await.expect("lock with 2 of 3");
    tokio::time::sleep(TTL * 3).await;
    assert!(!guard.is_lost(), "renewals reach 2 of 3");
    assert!(stored(&servers[0], "k").await.is_some());
    let other = manager(client_without(&servers, 1).await);
    assert!(other.try_lock("k").await.expect("try_lock").is_none());
    assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Released);
    // Released once a quorum answered; the other node's release may still
    // be on its way.
    no_keys_soon(&servers[0]).await;
    no_keys_soon(&servers[2]).await;
}

/// A client built while node `down` is dead. The Lua backend connects
/// eagerly, so it cannot be built for that node: an always-failing stand-in
/// takes its place.
async fn client_without(servers: &Instances, down: usize) -> Redlock {
    let mut nodes: Vec<Arc<dyn LockBackend>> = Vec::new();
    for (i, url) in servers.urls().into_iter().enumerate() {
        if i == down {
            let (node, control) = lock_testkit::FaultyBackend::new(Arc::new(lock_memory::MemoryBackend::new()));
            control.set(lock_testkit::Fault::Fail);
            nodes.push(Arc::new(node));
        } else {
            nodes.push(Arc::new(RedisLuaBackend::connect(&url).await.expect("connect")));
        }
    }
    Redlock::with_options(nodes, RedlockOptions::default().node_timeout(NODE_TIMEOUT)).expect("valid redlock")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_killed_nodes_of_three_fail_fast_and_leave_no_key() {
    let servers = servers(3).await;
    let redlock = client(&servers).await;
    servers[0].kill().expect("kill");
    servers[2].kill().expect("kill");
    let started = Instant::now();
    let err = redlock.try_acquire("k", &token(), TTL).await.expect_err("no quorum");
    let took = started.elapsed();
    assert!(took < FAST, "the quorum error took {took:?}");
    match &err {
        Error::QuorumUnreachable {
            granted,
            required: 2,
            nodes,
        } => {
            // Decided as soon as the two dead nodes failed: node 1 may not
            // have answered yet.
            assert!(*granted <= 1);
            assert!(nodes.0[0].1 != NodeOutcome::Granted && nodes.0[2].1 != NodeOutcome::Granted);
            assert!(err.to_string().contains(&servers[1].url()), "{err}");
        }
        other => panic!("expected QuorumUnreachable, got {other:?}"),
    }
    no_keys_soon(&servers[1]).await;

    // Through the manager: retried with backoff until the acquire timeout.
    let locks = manager(redlock);
    let started = Instant::now();
    let err = locks.lock("k").await.expect_err("no quorum");
    assert!(matches!(err, Error::QuorumUnreachable { .. }), "{err}");
    assert!(started.elapsed() < TTL * 4 + FAST, "gave up at the acquire timeout");
    no_keys_soon(&servers[1]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_node_slows_acquisition_by_at_most_the_node_timeout() {
    let servers = servers(3).await;
    let locks = manager(client(&servers).await);
    servers[2].pause().expect("SIGSTOP");
    let started = Instant::now();
    let guard = locks.lock("k").await.expect("lock with 2 of 3");
    let took = started.elapsed();
    assert!(took < FAST, "acquire took {took:?}: it waited for the paused node");
    tokio::time::sleep(TTL * 2).await;
    assert!(!guard.is_lost(), "renewals reach the 2 running nodes");
    let started = Instant::now();
    assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Released);
    assert!(started.elapsed() < FAST, "release waited for the paused node");
    servers[2].resume().expect("SIGCONT");
    // Once resumed, the paused node runs the queued SET and the DEL queued
    // after it on the same connection, or its key expires: either way it is
    // gone soon after the TTL.
    for i in 0..3 {
        let give_up = Instant::now() + TTL * 10;
        while !keys(&servers[i]).await.is_empty() {
            assert!(Instant::now() < give_up, "stray key on node {i}");
            tokio::time::sleep(TTL / 10).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_acquire_leaves_only_the_holders_keys() {
    let servers = servers(3).await;
    let holder = client(&servers).await;
    let held = token();
    assert!(matches!(
        holder.try_acquire("k", &held, TTL * 10).await,
        Ok(AcquireOutcome::Acquired(_))
    ));
    // The holder loses node 2 (its key is deleted behind its back), once
    // its grant has landed there: the acquire returns at a quorum, and a
    // grant still in flight would put the key back after the DEL.
    let give_up = Instant::now() + FAST;
    while stored(&servers[2], "k").await.as_deref() != Some(held.to_hex().as_str()) {
        assert!(Instant::now() < give_up, "the holder's grant never reached node 2");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    servers[2].cmd(&["DEL", "k"]).await.expect("DEL");
    let other = client(&servers).await;
    let outcome = other.try_acquire("k", &token(), TTL).await.expect("held");
    // No `retry_after` check: whether a refusal carries the holder's PTTL is
    // up to the node backend (the Lua one sends none on its `SET NX` path).
    assert!(matches!(outcome, AcquireOutcome::Held { .. }), "{outcome:?}");
    for i in 0..2 {
        assert_eq!(keys(&servers[i]).await, vec!["k".to_owned()]);
        assert_eq!(stored(&servers[i], "k").await, Some(held.to_hex()));
    }
    // Node 2's grant may land after the refusal was decided: it is given
    // back as soon as it answers (in the background), so wait for that.
    no_keys_soon(&servers[2]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_empty_while_held_is_reseeded_by_renewals() {
    let servers = servers(3).await;
    let locks = manager(client(&servers).await);
    let guard = locks.lock("k").await.expect("lock");
    let token = guard.token().to_hex();
    servers[0].restart_empty().await.expect("restart without data");
    assert_eq!(
        stored(&servers[0], "k").await,
        None,
        "the restarted node forgot the lock"
    );

    // Meanwhile nobody else gets a quorum: 2 of 3 still hold it.
    let other = manager(client(&servers).await);
    assert!(other.try_lock("k").await.expect("try_lock").is_none());

    // The holder's renewals (every TTL / 3) reconnect and put the key back.
    let give_up = Instant::now() + TTL * 10;
    while stored(&servers[0], "k").await.as_deref() != Some(token.as_str()) {
        assert!(Instant::now() < give_up, "node 0 was never re-seeded");
        tokio::time::sleep(TTL / 10).await;
    }
    assert!(!guard.is_lost());
    assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Released);
    // Released once a quorum answered; the last node's release may still be
    // on its way.
    for server in servers.servers() {
        no_keys_soon(server).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_wake_on_release_notifications() {
    let servers = servers(3).await;
    let long = Duration::from_secs(60);
    let a = LockManager::with_options(client(&servers).await, LockOptions::with_ttl(long)).expect("valid options");
    // Without a wake-up, the waiter would sleep 30 s between tries (the
    // holder's TTL hint is 60 s): a hand-over under half that was a wake-up.
    let backoff = Duration::from_secs(30);
    let slow = Backoff::new(backoff, backoff).factor(1.0).min(backoff);
    let b = LockManager::with_options(
        client(&servers).await,
        LockOptions::with_ttl(long).backoff(slow).acquire_timeout(long),
    )
    .expect("valid options");
    let guard = a.lock("k").await.expect("lock");
    let waiter = tokio::spawn(async move {
        let g = b.lock("k").await.expect("handed over");
        let at = Instant::now();
        g.release().await.expect("release");
        at
    });
    // Synchronise on the waiter really waiting: subscribed on a node, with
    // its marker key next to the lock (names aside: a key besides "k").
    let give_up = Instant::now() + FAST;
    'waiting: loop {
        for server in servers.servers() {
            let channels = server.cmd(&["PUBSUB", "CHANNELS"]).await.expect("PUBSUB");
            let subscribed = channels.as_array().is_some_and(|c| !c.is_empty());
            if subscribed && keys(server).await.len() >= 2 {
                break 'waiting;
            }
        }
        assert!(Instant::now() < give_up, "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let released = Instant::now();
    guard.release().await.expect("release");
    let acquired = waiter.await.expect("task");
    let hand_over = acquired.saturating_duration_since(released);
    assert!(hand_over < backoff / 2, "hand-over took {hand_over:?}: not woken");
}
