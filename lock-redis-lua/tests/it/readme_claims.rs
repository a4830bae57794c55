//! README claims of the Lua backend checked on a real server: the fence rule
//! `max(last + 1, server µs)` with a fence counter that has no TTL, and "a
//! lost pub/sub message costs latency, never correctness".
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::{LockBackend, LockManager, LockOptions, LockToken};

use lock_core::{AcquireOutcome, ReleaseOutcome};
use lock_redis_lua::{RedisLuaBackend, RedisLuaBuilder};
use lock_testkit::server::RedisServer;
use tokio::time::Instant;

fn token() -> LockToken {
    LockToken::generate().expect("token")
}

/// The server's clock in microseconds (`TIME`).
async fn server_micros(server: &RedisServer) -> u64 {
    let time = server.cmd(&["TIME"]).await.unwrap();
    let parts = time.as_array().expect("TIME is an array");
    let part = |i: usize| parts[i].as_str().expect("digits").parse::<u64>().expect("a number");
    part(0) * 1_000_000 + part(1)
}

async fn fence(backend: &RedisLuaBackend, key: &str, token: &LockToken, ttl: Duration) -> u64 {
    match backend.try_acquire(key, token, ttl).await.unwrap() {
        AcquireOutcome::Acquired(lease) => lease.fencing_token.expect("fencing on").0,
        other => panic!("{key}: expected a grant, got {other:?}"),
    }
}

/// Fencing tokens are `max(last + 1, server µs)`, and the counter outlives
/// the lock (no TTL), so tokens keep increasing across release and expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_follow_max_of_last_plus_one_and_server_micros() {
    let server = RedisServer::start().await.expect("start");
    let backend = RedisLuaBuilder::url(server.url()).fencing(true).build().await.unwrap();
    let ttl = Duration::from_secs(30);

    // First grant: the server's clock.
    let before = server_micros(&server).await;
    let mine = token();
    let first = fence(&backend, "job", &mine, ttl).await;
    let after = server_micros(&server).await;
    assert!(before <= first && first <= after, "{before} <= {first} <= {after}");
    assert_eq!(backend.release("job", &mine).await.unwrap(), ReleaseOutcome::Released);

    // Next grant: the clock again, above the last token.
    let again = token();
    let second = fence(&backend, "job", &again, ttl).await;
    assert!(
        second > first && second >= after,
        "{second} after {first} (clock {after})"
    );
    assert_eq!(backend.release("job", &again).await.unwrap(), ReleaseOutcome::Released);

    // The counter ahead of the clock (as after a server clock step back):
    // last + 1 wins.
    let fence_key = RedisLuaBackend::fence_key("job");
    let ahead = server_micros(&server).await + 3_600_000_000;
    let set = server.cmd(&["SET", &fence_key, &ahead.to_string()]).await.unwrap();
    assert!(set.is_ok(), "{set:?}");
    let third = token();
    assert_eq!(fence(&backend, "job", &third, ttl).await, ahead + 1);

    // The counter has no TTL, and survives the lock's expiry.
    assert_eq!(server.cmd(&["PTTL", &fence_key]).await.unwrap().as_int(), Some(-1));
    assert_eq!(server.cmd(&["PEXPIRE", "job", "1"]).await.unwrap().as_int(), Some(1));
    let give_up = Instant::now() + Duration::from_secs(5);
    while server.cmd(&["EXISTS", "job"]).await.unwrap().as_int() != Some(0) {
        assert!(Instant::now() < give_up, "the lock never expired");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(fence(&backend, "job", &token(), ttl).await, ahead + 2);
}

/// A waiter that never hears of a release (no message: the key went away
/// without the release script, as if the message were lost) still gets the
/// lock, from its timer, and never while the key is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_the_waiter_never_hears_of_costs_latency_not_correctness() {
    let server = RedisServer::start().await.expect("start");
    let connect = || async {
        RedisLuaBuilder::url(server.url())
            .release_notifications(true)
            .build()
            .await
            .unwrap()
    };
    let holder = connect().await;
    let held = token();
    assert!(matches!(
        holder.try_acquire("k", &held, Duration::from_secs(60)).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    let waiter = LockManager::with_options(
        connect().await,
        LockOptions::with_ttl(Duration::from_secs(60)).acquire_timeout(Duration::from_secs(30)),
    )
    .unwrap();
    let waiting = tokio::spawn(async move { waiter.lock("k").await });

    // The waiter is waiting: subscribed, with its marker next to the lock.
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let channels = server.cmd(&["PUBSUB", "CHANNELS"]).await.unwrap();
        let subscribed = channels.as_array().is_some_and(|c| !c.is_empty());
        let keys = server.cmd(&["DBSIZE"]).await.unwrap().as_int();
        // The lock, the waiter's marker, the wake set it joined and the
        // set of when its acquire started waiting.
        if subscribed && keys == Some(4) {
            break;
        }
        assert!(Instant::now() < give_up, "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(!waiting.is_finished(), "no grant while the key is held");

    // The key goes away with no message at all.
    assert!(server.cmd(&["CONFIG", "RESETSTAT"]).await.unwrap().is_ok());
    assert_eq!(server.cmd(&["DEL", "k"]).await.unwrap().as_int(), Some(1));
    let guard = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the waiter's timer woke it")
        .unwrap()
        .expect("acquired without a message");
    let info = server.info("commandstats").await.unwrap();
    assert!(!info.contains_key("cmdstat_publish"), "no message was sent: {info:?}");
    assert_eq!(
        server.cmd(&["GET", "k"]).await.unwrap().as_str(),
        Some(guard.token().to_hex().as_str())
    );
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}
