//! The uncontended path on Redis ≥ 7.0: a plain `SET NX PX GET` acquire, a
//! release that publishes only to a subscribed waiter, and the safety of a
//! re-sent acquire (our own token found: granted, TTL refreshed); a
//! multi-key release wakes the mutex waiters of its keys too.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::{LockBackend, LockToken};

use lock_core::raw::MultiLockBackend;

use lock_core::{AcquireOutcome, ReleaseOutcome};
use lock_redis_lua::{RedisLuaBackend, RedisLuaBuilder};
use lock_testkit::server::RedisServer;
use tokio::time::Instant;

const TTL: Duration = Duration::from_millis(500);

fn token() -> LockToken {
    LockToken::generate().expect("token")
}

/// Calls of `command` since the last `CONFIG RESETSTAT`.
async fn calls(server: &RedisServer, command: &str) -> u64 {
    server.command_calls(command).await.expect("INFO commandstats")
}

async fn server_version(server: &RedisServer) -> (u32, u32) {
    let info = server.cmd(&["INFO", "server"]).await.unwrap();
    let text = String::from_utf8_lossy(info.as_bytes().expect("INFO text")).into_owned();
    let version = text
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .expect("redis_version");
    let mut parts = version.trim().split('.').map(|p| p.parse::<u32>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncontended_pair_is_set_nx_and_a_release_script_without_publish() {
    let server = RedisServer::start().await.expect("start");
    assert!(
        server_version(&server).await >= (7, 0),
        "this test needs Redis 7.0 or later"
    );
    let backend = RedisLuaBuilder::url(server.url())
        .release_notifications(true)
        .build()
        .await
        .unwrap();
    // Warm-up: the release script cached.
    let first = token();
    backend.try_acquire("hot", &first, TTL).await.unwrap();
    backend.release("hot", &first).await.unwrap();
    assert!(server.cmd(&["CONFIG", "RESETSTAT"]).await.unwrap().is_ok());
    let mine = token();
    assert!(matches!(
        backend.try_acquire("hot", &mine, TTL).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    let theirs = token();
    assert!(matches!(
        backend.try_acquire("hot", &theirs, TTL).await.unwrap(),
        AcquireOutcome::Held { retry_after: None }
    ));
    assert_eq!(backend.release("hot", &mine).await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(calls(&server, "set").await, 2, "acquires are plain SETs");
    assert_eq!(calls(&server, "pttl").await, 0);
    assert_eq!(calls(&server, "publish").await, 0, "nobody waited: no PUBLISH");
    assert_eq!(calls(&server, "evalsha").await, 1, "the release");
    assert_eq!(calls(&server, "eval").await, 0);
    // Inside the release script: GET, then one DEL of the key and its
    // waiter marker, nothing else when nobody waits (README: "an
    // uncontended release costs nothing extra").
    assert_eq!(calls(&server, "get").await, 1, "the release's owner check");
    assert_eq!(calls(&server, "del").await, 1, "key and marker in one DEL");
    assert_eq!(calls(&server, "exists").await, 0, "no marker lookup of its own");
    assert_eq!(
        calls(&server, "zrangebyscore").await,
        0,
        "no wake-set work when nobody waits"
    );

    // A waiter in another backend (another process) subscribes, and the
    // release wakes it long before its timer.
    let holder = token();
    assert!(matches!(
        backend.try_acquire("hot", &holder, TTL * 10).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    let other = RedisLuaBuilder::url(server.url())
        .release_notifications(true)
        .build()
        .await
        .unwrap();
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        other.wait_for_release("hot", Duration::from_secs(5)).await;
        started.elapsed()
    });
    let subscribed = Instant::now() + Duration::from_secs(3);
    loop {
        // Subscribed, and the marker left (it follows the SUBSCRIBE): a
        // release before the marker would not publish.
        let channels = server.cmd(&["PUBSUB", "CHANNELS", "verrou:wake:*"]).await.unwrap();
        let marker = server.cmd(&["EXISTS", "verrou:lua:waiting:{hot}"]).await.unwrap();
        if channels.as_array().map(<[_]>::len) == Some(1) && marker.as_int() == Some(1) {
            break;
        }
        assert!(Instant::now() < subscribed, "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A release wakes only a waiter that has waited the starvation bound
    // (a precondition, not a timing assertion).
    tokio::time::sleep(Duration::from_millis(3 * lock_redis_family::wake::STARVING_MS)).await;
    assert_eq!(backend.release("hot", &holder).await.unwrap(), ReleaseOutcome::Released);
    let waited = tokio::time::timeout(Duration::from_secs(4), waiter)
        .await
        .expect("the waiter woke")
        .unwrap();
    assert!(waited < Duration::from_secs(4), "woken by the release, not the timer");
    assert_eq!(calls(&server, "publish").await, 1);
    let marker = server.cmd(&["EXISTS", "verrou:lua:waiting:{hot}"]).await.unwrap();
    assert_eq!(marker.as_int(), Some(0), "the release removed the waiter's marker");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_acquire_finds_its_token_and_refreshes_the_ttl() {
    let server = RedisServer::start().await.expect("start");
    let backend = RedisLuaBackend::connect(&server.url()).await.unwrap();
    let mine = token();
    assert!(matches!(
        backend.try_acquire("resent", &mine, TTL).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    // As if the first acquire had been sent long ago: little TTL left.
    assert_eq!(
        server.cmd(&["PEXPIRE", "resent", "50"]).await.unwrap().as_int(),
        Some(1)
    );
    assert!(matches!(
        backend.try_acquire("resent", &mine, TTL * 10).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    let pttl = server.cmd(&["PTTL", "resent"]).await.unwrap().as_int().unwrap();
    assert!(
        pttl > 1000,
        "the TTL was refreshed from the second acquire, got {pttl} ms"
    );
    assert_eq!(
        backend.release("resent", &mine).await.unwrap(),
        ReleaseOutcome::Released
    );
}

/// Three waiters in three backends (three processes) on a held key, with a
/// backoff so long that only a release wakes them: each release wakes one
/// waiter, so the three hand the key on with one acquire each (the herd
/// took 3 + 2 + 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_one_waiter_not_the_herd() {
    use lock_core::{Backoff, LockManager, LockOptions};
    let server = RedisServer::start().await.expect("start");
    let connect = || async {
        RedisLuaBuilder::url(server.url())
            .release_notifications(true)
            .build()
            .await
            .unwrap()
    };
    let holder = connect().await;
    let mine = token();
    assert!(matches!(
        holder.try_acquire("herd", &mine, TTL * 40).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    let sleepy = Backoff::new(Duration::from_secs(8), Duration::from_secs(8)).min(Duration::from_secs(8));
    let options = LockOptions::with_ttl(TTL)
        .backoff(sleepy)
        .acquire_timeout(Duration::from_secs(30));
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let m = LockManager::with_options(connect().await, options.clone()).unwrap();
        waiters.push(tokio::spawn(async move {
            let g = m.lock("herd").await.expect("woken waiter");
            g.release().await.expect("release");
        }));
    }
    // All three subscribed (one channel per process; before, one per key)
    // and registered: the marker left, and each in the wake set (both
    // follow the SUBSCRIBE; before the wake set there was only the marker).
    let registered = Instant::now() + Duration::from_secs(10);
    loop {
        let int = |v: lock_testkit::server::RespValue| v.as_int();
        let per_key = server.cmd(&["PUBSUB", "NUMSUB", "verrou:released:herd"]).await.unwrap();
        let per_key = per_key.as_array().and_then(|a| a.get(1)?.as_int());
        let per_process = server.cmd(&["PUBSUB", "CHANNELS", "verrou:wake:*"]).await.unwrap();
        let per_process = per_process.as_array().map(|c| c.len() as i64);
        let subscribed = per_key.filter(|n| *n > 0).or(per_process);
        let marker = int(server.cmd(&["EXISTS", "verrou:lua:waiting:{herd}"]).await.unwrap());
        let woken_set = int(server.cmd(&["EXISTS", "verrou:lua:wake:{herd}"]).await.unwrap());
        let in_set = int(server.cmd(&["ZCARD", "verrou:lua:wake:{herd}"]).await.unwrap());
        if subscribed == Some(3) && marker == Some(1) && (woken_set == Some(0) || in_set == Some(3)) {
            break;
        }
        assert!(Instant::now() < registered, "the waiters never registered");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A release wakes only a waiter that has waited the starvation bound:
    // let them all get there (a precondition, not a timing assertion).
    tokio::time::sleep(Duration::from_millis(3 * lock_redis_family::wake::STARVING_MS)).await;
    assert!(server.cmd(&["CONFIG", "RESETSTAT"]).await.unwrap().is_ok());
    let released = Instant::now();
    assert_eq!(holder.release("herd", &mine).await.unwrap(), ReleaseOutcome::Released);
    for w in waiters {
        w.await.expect("waiter");
    }
    assert!(
        released.elapsed() < Duration::from_secs(8),
        "the hand-offs came from releases, not the 8 s timers"
    );
    // Three acquires (each claiming the reservation a release left for
    // it), three reservations, and the marker set again by the two releases
    // that left waiters behind (it goes with the key in one DEL). A herd
    // would add every woken waiter's failed try.
    // At most: a waiter whose own look after RECHECK_MS (or whose timer)
    // finds the key free takes it with no reservation, no wake-up and no
    // marker set again, so fewer is fine; a herd would be more.
    let sets = calls(&server, "set").await;
    assert!(
        sets <= 3 + 3 + 2,
        "one acquire per waiter: nobody woke in vain ({sets} SETs)"
    );
    let publishes = calls(&server, "publish").await;
    assert!(publishes <= 3, "at most one wake-up per release ({publishes})");
}

/// A multi-key lock holds the mutex's own keys, so its release must wake a
/// mutex waiter of one of them as a mutex release does: the waiter's timer
/// is 20 s, it must wake within 10 s (in practice milliseconds), and the
/// server must have run one PUBLISH (on the key the waiter marked only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_key_release_wakes_a_mutex_waiter_of_its_keys() {
    let server = RedisServer::start().await.expect("start");
    let (timer, woken_within) = (Duration::from_secs(20), Duration::from_secs(10));
    let holder_backend = RedisLuaBackend::connect(&server.url()).await.unwrap();
    let holder = token();
    let keys = ["{acct}:1", "{acct}:2"];
    assert!(matches!(
        holder_backend.try_acquire_all(&keys, &holder, timer * 2).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    let waiter_backend = RedisLuaBuilder::url(server.url())
        .release_notifications(true)
        .build()
        .await
        .unwrap();
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        waiter_backend.wait_for_release("{acct}:1", timer).await;
        started.elapsed()
    });
    let subscribed = Instant::now() + Duration::from_secs(5);
    loop {
        let channels = server.cmd(&["PUBSUB", "CHANNELS", "verrou:wake:*"]).await.unwrap();
        let marker = server.cmd(&["EXISTS", "verrou:lua:waiting:t:{acct}:1"]).await.unwrap();
        let in_set = server.cmd(&["ZCARD", "verrou:lua:wake:t:{acct}:1"]).await.unwrap();
        if channels.as_array().map(<[_]>::len) == Some(1) && marker.as_int() == Some(1) && in_set.as_int() == Some(1) {
            break;
        }
        assert!(Instant::now() < subscribed, "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let published = calls(&server, "publish").await;
    assert_eq!(
        holder_backend.release_all(&keys, &holder).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(
        calls(&server, "publish").await,
        published + 1,
        "one waiter, one PUBLISH"
    );
    let waited = tokio::time::timeout(woken_within, waiter)
        .await
        .expect("the multi-key release woke the waiter before its timer")
        .unwrap();
    assert!(waited < woken_within);
    let marker = server.cmd(&["EXISTS", "verrou:lua:waiting:t:{acct}:1"]).await.unwrap();
    assert_eq!(marker.as_int(), Some(0), "the release removed the waiter's marker");
}
