//! Release notifications on a single Tair server: a waiter subscribes on
//! its process's channel and registers on the server, the release wakes it
//! long before its timer, one waiter per release (not the herd), and the
//! uncontended release is the native `CAD` alone; an ACL user without
//! channel rights keeps working on timers.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use crate::common;

use std::time::Duration;

use lock_core::{Backoff, Fairness, LockBackend, LockManager, LockOptions, LockToken};

use lock_core::{AcquireOutcome, ReleaseOutcome};
use lock_tair::TairBackend;
use lock_testkit::server::{RedisServer, TcpProxy};
use tokio::time::Instant;

use common::{builder, connect, tair_server};

const TTL: Duration = Duration::from_millis(500);

fn token() -> LockToken {
    LockToken::generate().expect("token")
}

/// Calls of `command` since the last `CONFIG RESETSTAT`.
async fn calls(server: &RedisServer, command: &str) -> u64 {
    let info = server.cmd(&["INFO", "commandstats"]).await.unwrap();
    let text = String::from_utf8_lossy(info.as_bytes().expect("INFO text")).into_owned();
    let prefix = format!("cmdstat_{command}:calls=");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

async fn int(server: &RedisServer, args: &[&str]) -> Option<i64> {
    server.cmd(args).await.unwrap().as_int()
}

/// Subscribed waiter channels (one per waiting backend).
async fn wake_channels(server: &RedisServer) -> usize {
    let channels = server.cmd(&["PUBSUB", "CHANNELS", "verrou:wake:*"]).await.unwrap();
    channels.as_array().map_or(0, <[_]>::len)
}

/// The uncontended pair costs `SET NX` and the native `CAD`, as with
/// notifications off (no `EXISTS`, no script, no `PUBLISH`); a waiter in
/// another backend (another process) marks the key and is woken by the
/// release, its 20 s timer notwithstanding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_the_release_not_its_timer() {
    let server = tair_server().await;
    let backend = connect(builder(&server.url())).await;
    // Warm-up: connections open.
    let first = token();
    backend.try_acquire("hot", &first, TTL).await.unwrap();
    backend.release("hot", &first).await.unwrap();
    assert!(server.cmd(&["CONFIG", "RESETSTAT"]).await.unwrap().is_ok());
    let mine = token();
    assert!(matches!(
        backend.try_acquire("hot", &mine, TTL).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    assert!(matches!(
        backend.try_acquire("hot", &token(), TTL).await.unwrap(),
        AcquireOutcome::Held { .. }
    ));
    assert_eq!(backend.release("hot", &mine).await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(calls(&server, "set").await, 2, "acquires are plain SETs");
    assert_eq!(calls(&server, "publish").await, 0, "nobody waited: no PUBLISH");
    assert_eq!(calls(&server, "cad").await, 1, "the release is the native CAD");
    assert_eq!(calls(&server, "exists").await, 0, "and nothing else: no marker read");
    assert_eq!(calls(&server, "evalsha").await, 0, "no script when nobody waits");
    assert_eq!(
        calls(&server, "zrangebyscore").await,
        0,
        "no wake-set work when nobody waits"
    );

    let holder = token();
    assert!(matches!(
        backend
            .try_acquire("hot", &holder, Duration::from_secs(60))
            .await
            .unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    let other = connect(builder(&server.url())).await;
    let (timer, woken_within) = (Duration::from_secs(20), Duration::from_secs(10));
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        other.wait_for_release("hot", timer).await;
        started.elapsed()
    });
    // Subscribed and registered (the marker follows the SUBSCRIBE). Without
    // notifications this never happens: go on after a while, and the
    // waiter's timer decides.
    let registered = Instant::now() + Duration::from_secs(3);
    while Instant::now() < registered {
        let marker = int(&server, &["EXISTS", "verrou:tair:waiting:hot"]).await;
        if wake_channels(&server).await == 1 && marker == Some(1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A release wakes only a waiter that has waited the starvation bound
    // (a precondition, not a timing assertion).
    tokio::time::sleep(Duration::from_millis(3 * lock_redis_family::wake::STARVING_MS)).await;
    assert_eq!(backend.release("hot", &holder).await.unwrap(), ReleaseOutcome::Released);
    let waited = tokio::time::timeout(woken_within, waiter)
        .await
        .expect("woken by the release, not by its 20 s timer")
        .unwrap();
    assert!(waited < woken_within);
    assert_eq!(calls(&server, "publish").await, 1, "one waiter, one PUBLISH");
    assert_eq!(
        int(&server, &["EXISTS", "verrou:tair:waiting:hot"]).await,
        Some(0),
        "the release removed the waiter's marker"
    );
}

/// Three waiters in three backends (three processes) on a held key, with a
/// backoff so long that only a release wakes them: each release wakes one
/// waiter, so the three hand the key on with one acquire each (a herd
/// would take 3 + 2 + 1 `SET NX`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_one_waiter_not_the_herd() {
    let server = tair_server().await;
    let holder = connect(builder(&server.url())).await;
    let mine = token();
    assert!(matches!(
        holder
            .try_acquire("herd", &mine, Duration::from_secs(60))
            .await
            .unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    let timer = Duration::from_secs(20);
    let sleepy = Backoff::new(timer, timer).min(timer);
    let options = LockOptions::with_ttl(TTL)
        .backoff(sleepy)
        .acquire_timeout(Duration::from_secs(60));
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let m = LockManager::with_options(connect(builder(&server.url())).await, options.clone()).unwrap();
        waiters.push(tokio::spawn(async move {
            let g = m.lock("herd").await.expect("woken waiter");
            g.release().await.expect("release");
        }));
    }
    // All three subscribed and in the wake set; without notifications this
    // never happens: go on after a while, and the timers decide.
    let registered = Instant::now() + Duration::from_secs(5);
    while Instant::now() < registered {
        let in_set = int(&server, &["ZCARD", "verrou:tair:wake:herd"]).await;
        if wake_channels(&server).await == 3 && in_set == Some(3) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A release wakes only a waiter that has waited the starvation bound
    // (a precondition, not a timing assertion).
    tokio::time::sleep(Duration::from_millis(3 * lock_redis_family::wake::STARVING_MS)).await;
    assert!(server.cmd(&["CONFIG", "RESETSTAT"]).await.unwrap().is_ok());
    let released = Instant::now();
    assert_eq!(holder.release("herd", &mine).await.unwrap(), ReleaseOutcome::Released);
    for w in waiters {
        tokio::time::timeout(Duration::from_secs(15), w)
            .await
            .expect("the hand-offs came from releases, not the 20 s timers")
            .expect("waiter");
    }
    assert!(released.elapsed() < timer);
    // Three acquires (each claiming the reservation a release left for
    // it), three reservations, and the marker set again by the two releases
    // that left waiters behind. A herd adds every woken waiter's failed try.
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

/// A server with user `u` (password `pw`): every key and command, no channel.
async fn server_without_channel_rights() -> RedisServer {
    let server = tair_server().await;
    let reply = server
        .cmd(&["ACL", "SETUSER", "u", "on", ">pw", "~*", "+@all", "resetchannels"])
        .await
        .expect("ACL SETUSER");
    assert!(reply.is_ok(), "{reply:?}");
    server
}

/// `n` waits on the busy key, then the client count once it stops falling
/// (a closed connection may take a moment to leave the server's list).
async fn waits_then_settled_count(backend: &TairBackend, server: &RedisServer, n: usize) -> u64 {
    for _ in 0..n {
        backend.wait_for_release("busy", Duration::from_millis(1)).await;
    }
    let mut count = connected_clients(server).await;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        count = count.min(connected_clients(server).await);
    }
    count
}

/// A backend for user `u` on `port` (the server's, or a proxy's), and a
/// holder (default user, straight to `server`) holding `busy` for 30 s.
async fn user_backend_and_busy_key(server: &RedisServer, port: u16) -> (TairBackend, TairBackend, LockToken) {
    let backend = connect(builder(&format!("redis://u:pw@127.0.0.1:{port}"))).await;
    let holder = connect(builder(&server.url())).await;
    let held = token();
    assert!(matches!(
        holder
            .try_acquire("busy", &held, Duration::from_secs(30))
            .await
            .unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    (backend, holder, held)
}

async fn connected_clients(server: &RedisServer) -> u64 {
    server.info("clients").await.expect("INFO clients")["connected_clients"]
        .parse()
        .expect("a number")
}

/// SUBSCRIBE refused (NOPERM): the next waits do not try again (no
/// connection per wait, and the refused one is closed),
/// a waiter still takes the lock on its timer, and a release whose
/// `PUBLISH` is refused is still a release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_subscribe_leaks_no_connection_and_waiters_use_their_timers() {
    let server = server_without_channel_rights().await;
    let (backend, holder, held) = user_backend_and_busy_key(&server, server.port()).await;
    let before = connected_clients(&server).await;
    // The first waits meet the refusal; the refused subscription's
    // connection is closed, and no wait opens another.
    let first = waits_then_settled_count(&backend, &server, 100).await;
    assert!(first <= before, "connected_clients went from {before} to {first}");
    let second = waits_then_settled_count(&backend, &server, 200).await;
    assert!(
        second <= first,
        "connected_clients grew with the waits: {first} to {second}"
    );

    let locks = LockManager::with_options(
        backend.clone(),
        LockOptions::with_ttl(TTL)
            .backoff(Backoff::new(Duration::from_millis(20), Duration::from_millis(100)))
            .acquire_timeout(Duration::from_secs(20)),
    )
    .unwrap();
    let waiter = tokio::spawn(async move { locks.lock("busy").await.map(drop) });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(holder.release("busy", &held).await.unwrap(), ReleaseOutcome::Released);
    waiter.await.unwrap().expect("the waiter acquires on its timer");

    // This user's release finds a waiter's marker; its PUBLISH is refused.
    let mine = token();
    assert!(matches!(
        backend.try_acquire("p", &mine, Duration::from_secs(30)).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    let marked = server
        .cmd(&["SET", "verrou:tair:waiting:p", "1", "PX", "30000"])
        .await
        .unwrap();
    assert!(marked.is_ok());
    server
        .cmd(&["ZADD", "verrou:tair:wake:p", "99999999999999", &"0".repeat(64)])
        .await
        .unwrap();
    assert_eq!(backend.release("p", &mine).await.unwrap(), ReleaseOutcome::Released);
    assert!(server.cmd(&["GET", "p"]).await.unwrap().is_null());
}

/// Fair mode on one server: three waiters of three backends queue in turn
/// behind a holder; each release wakes the queue's head (a waiter polls only
/// every third of its 30 s claim), so they are served in queue order well
/// before the first poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiters_are_woken_in_queue_order_by_releases() {
    let server = tair_server().await;
    let holder_backend = connect(builder(&server.url())).await;
    assert!(holder_backend.capabilities().fair_queue, "fair mode on one server");
    let claim = Duration::from_secs(30);
    let options = LockOptions::with_ttl(TTL)
        .fairness(Fairness::Fifo { claim })
        .acquire_timeout(Duration::from_secs(60));
    let holder = LockManager::with_options(holder_backend, options.clone()).unwrap();
    let guard = holder.lock("fifo").await.expect("holder");
    let served = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..3 {
        let m = LockManager::with_options(connect(builder(&server.url())).await, options.clone()).unwrap();
        let served = served.clone();
        waiters.push(tokio::spawn(async move {
            let g = m.lock("fifo").await.expect("queued waiter");
            served.lock().unwrap().push(i);
            g.release().await.expect("release");
        }));
        // Queued (and subscribed) before the next one starts.
        let queued = Instant::now() + Duration::from_secs(10);
        while int(&server, &["ZCARD", "verrou:tair:queue:fifo"]).await != Some(i + 1)
            || wake_channels(&server).await < usize::try_from(i + 1).unwrap()
        {
            assert!(Instant::now() < queued, "waiter {i} never queued");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let released = Instant::now();
    guard.release().await.expect("release");
    for w in waiters {
        tokio::time::timeout(Duration::from_secs(8), w)
            .await
            .expect("woken by releases, not by the 10 s polls")
            .expect("waiter");
    }
    assert!(released.elapsed() < claim / 3);
    assert_eq!(*served.lock().unwrap(), vec![0, 1, 2], "FIFO order across backends");
}

/// With replica acknowledgement there is no fair queue (as on the Lua
/// backend): fair locking is refused with `Unsupported`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_mode_is_refused_with_replica_acks() {
    let server = tair_server().await;
    let backend = connect(builder(&server.url()).replica_ack(lock_tair::ReplicaAck::new(1, TTL))).await;
    assert!(!backend.capabilities().fair_queue);
    let manager = LockManager::with_options(backend, LockOptions::with_ttl(TTL).fair()).unwrap();
    let refused = manager.lock("fair-ack").await;
    assert!(
        matches!(refused, Err(lock_core::Error::Unsupported { .. })),
        "{refused:?}"
    );
}

/// Waits much shorter than the connection's set-up (a slow link: every wait
/// gives up half-way through connecting) leave no connection behind once
/// the subscription is refused, nor once the backend is dropped. Before the
/// fix, each cut-short wait started fred's connection task again; a
/// replaced task, ending, made fred believe the client stopped, so the
/// refusal's QUIT was never sent and one connection stayed open for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_cut_short_while_connecting_leave_no_connection_after_a_refusal() {
    let server = server_without_channel_rights().await;
    let proxy = TcpProxy::start(server.addr()).await.expect("proxy");
    proxy.set_latency(Duration::from_millis(5));
    let (backend, _holder, _held) = user_backend_and_busy_key(&server, proxy.port()).await;
    let before = connected_clients(&server).await;
    let after = waits_then_settled_count(&backend, &server, 100).await;
    assert!(after <= before, "connected_clients went from {before} to {after}");
    drop(backend);
    let give_up = Instant::now() + Duration::from_secs(30);
    let mut dropped = connected_clients(&server).await;
    while dropped + 1 > before && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(20)).await;
        dropped = connected_clients(&server).await;
    }
    assert!(
        dropped < before,
        "dropping the backend left {dropped} of {before} clients"
    );
}

/// Waiters' subscriptions through a TCP proxy (one more hop, so the
/// `PUBSUB NUMSUB` check on a command connection can reach the server
/// before the `SUBSCRIBE` it checks) are made, not taken for refusals:
/// fred reports RESP2's `SUBSCRIBE` done before the server ran it. Before
/// the fix the first `NUMSUB` could count none, and the backend turned its
/// notifications off for good (about one backend in three here: eight
/// backends in turn).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_through_a_proxy_are_not_taken_for_refusals() {
    let server = tair_server().await;
    let proxy = TcpProxy::start(server.addr()).await.expect("proxy");
    let holder = connect(builder(&server.url())).await;
    let held = token();
    assert!(matches!(
        holder.try_acquire("sub", &held, Duration::from_secs(30)).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    for round in 0..8 {
        let backend = connect(builder(&proxy.url())).await;
        let waiter = tokio::spawn(async move { backend.wait_for_release("sub", Duration::from_secs(30)).await });
        let give_up = Instant::now() + Duration::from_secs(10);
        while wake_channels(&server).await == 0 {
            assert!(Instant::now() < give_up, "backend {round} never subscribed");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The dropped backend closes its subscription.
        waiter.abort();
        let _ = waiter.await;
        let gone = Instant::now() + Duration::from_secs(10);
        while wake_channels(&server).await > 0 {
            assert!(Instant::now() < gone, "backend {round} kept its subscription");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
