//! Faults against real servers: a killed server, a paused one (SIGSTOP),
//! connections cut by a proxy, a flushed script cache, keys of another
//! type, and a server without Lua scripting.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::{Error, Expiry, LockBackend, LockManager, LockOptions, LockToken, LossReason, Renewal, VersionedStore};

use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_redis_lua::{RedisLuaBackend, RedisLuaBuilder};
use lock_testkit::server::{RedisServer, TcpProxy};
use tokio::time::Instant;

const TTL: Duration = Duration::from_millis(500);
/// Generous bound for "nothing hangs": every operation is bounded by
/// connect + 2 × response (here 150 + 2 × 150 ms).
const NO_HANG: Duration = Duration::from_secs(3);

async fn backend(url: String) -> RedisLuaBackend {
    RedisLuaBuilder::url(url)
        .connect_timeout(Duration::from_millis(150))
        .response_timeout(Duration::from_millis(150))
        .build()
        .await
        .expect("connect")
}

fn options() -> LockOptions {
    LockOptions::with_ttl(TTL)
        .acquire_timeout(TTL)
        .op_timeout(Duration::from_millis(300))
}

fn token() -> LockToken {
    LockToken::generate().expect("token")
}

/// Waits for `lease` to be lost with its deadline unmoved (no renewal got
/// through). Exact at the deadline (`is_lost()` compares clocks); the signal
/// itself, a timer, may be late by scheduling delay only, bounded here by
/// one TTL. Returns the reason and when it fired.
async fn lost_by_deadline(lease: lock_core::LeaseHandle) -> (LossReason, Instant) {
    let deadline = lease.deadline();
    let signal = tokio::spawn({
        let lease = lease.clone();
        async move { (lease.lost().await, Instant::now()) }
    });
    tokio::time::sleep_until(deadline).await;
    assert_eq!(lease.deadline(), deadline, "no renewal may get through");
    assert!(lease.is_lost(), "lost at the deadline");
    tokio::time::timeout(TTL, signal)
        .await
        .expect("lost() fires within a TTL of the deadline")
        .expect("watcher")
}

/// Retries `f` until it succeeds or `within` passes.
async fn eventually<T, F, Fut>(within: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = lock_core::Result<T>>,
{
    let give_up = Instant::now() + within;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if Instant::now() >= give_up => panic!("still failing after {within:?}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_server_loses_the_lease_by_its_deadline_and_recovers_after_restart() {
    let server = RedisServer::start().await.expect("start");
    let backend = backend(server.url()).await;
    let locks = LockManager::with_options(backend.clone(), options()).unwrap();
    let guard = locks.lock("killed").await.expect("lock");
    let deadline = guard.deadline();
    server.kill().expect("kill");

    let (reason, fired) = lost_by_deadline(guard.handle()).await;
    assert_eq!(reason, LossReason::DeadlinePassed);
    assert!(fired >= deadline);

    let started = Instant::now();
    let err = locks.try_lock("other").await.expect_err("server down");
    assert!(started.elapsed() < NO_HANG);
    assert!(
        matches!(&err, Error::Backend { message, .. } if message.contains("connect")),
        "a clear connection error, got {err:?}"
    );
    drop(guard);

    server.restart_empty().await.expect("restart");
    let guard = eventually(Duration::from_secs(3), || async {
        locks.try_lock("other").await?.ok_or_else(|| Error::invalid("held"))
    })
    .await;
    assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_times_out_and_nothing_hangs() {
    let server = RedisServer::start().await.expect("start");
    let backend = backend(server.url()).await;
    let locks = LockManager::with_options(backend.clone(), options()).unwrap();
    let guard = locks.lock("paused").await.expect("lock");
    let deadline = guard.deadline();
    let lost = tokio::spawn(lost_by_deadline(guard.handle()));
    server.pause().expect("SIGSTOP");

    let mine = token();
    for round in 0..3 {
        let started = Instant::now();
        let acquire = tokio::time::timeout(NO_HANG, backend.try_acquire("paused-2", &mine, TTL))
            .await
            .expect("acquire must not hang");
        let err = acquire.expect_err("server paused");
        assert!(err.is_backend(), "round {round}: {err:?}");
        let renew = tokio::time::timeout(NO_HANG, backend.renew("paused", guard.token(), TTL))
            .await
            .expect("renew must not hang");
        assert!(renew.is_err(), "round {round}");
        let get = tokio::time::timeout(NO_HANG, backend.get("paused-value"))
            .await
            .expect("get must not hang");
        assert!(get.is_err(), "round {round}");
        assert!(started.elapsed() < NO_HANG);
    }
    // A timed-out acquire may or may not have been applied.
    let err = backend.try_acquire("paused-3", &mine, TTL).await.expect_err("paused");
    assert!(
        err.is_outcome_unknown() || err.to_string().contains("connect"),
        "{err:?}"
    );

    let (reason, fired) = lost.await.expect("lost() fires");
    assert_eq!(reason, LossReason::DeadlinePassed);
    assert!(fired >= deadline);
    drop(guard);

    server.resume().expect("SIGCONT");
    let outcome = eventually(Duration::from_secs(3), || backend.try_acquire("paused-4", &mine, TTL)).await;
    assert!(matches!(outcome, AcquireOutcome::Acquired(_)));
}

/// Connections cut under a held lock: after each cut, a renewal reaches the
/// server through a new connection and moves the deadline, so the lease is
/// still held, and the server agrees. Synchronised on those events, not on
/// sleeps: a renewal that never gets through fails the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_connections_reconnect_and_the_lease_is_renewed() {
    let server = RedisServer::start().await.expect("start");
    let proxy = TcpProxy::start(server.addr()).await.expect("proxy");
    let backend = backend(proxy.url()).await;
    // A renewal every half second: a failed one (the cut) and the next
    // (reconnect + renew) both fit in the TTL with a second to spare.
    let ttl = Duration::from_secs(2);
    let locks = LockManager::with_options(
        backend.clone(),
        LockOptions::with_ttl(ttl).renewal(Renewal::Auto { interval: ttl / 4 }),
    )
    .unwrap();
    let guard = locks.lock("cut").await.expect("lock");
    for round in 0..3 {
        proxy.cut_all();
        // Two renewals move the deadline: the renewer has one call in flight
        // at a time, so at least the second went over a new connection.
        let give_up = Instant::now() + ttl * 5;
        for _ in 0..2 {
            let before = guard.deadline();
            while guard.deadline() <= before {
                assert!(
                    !guard.is_lost(),
                    "round {round}: lost: no renewal got through after the cut"
                );
                assert!(Instant::now() < give_up, "round {round}: no renewal after the cut");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        assert!(proxy.connections() > 0, "round {round}: renewed over a new connection");
        assert!(!guard.is_lost(), "round {round}");
        let on_server = server.cmd(&["GET", "cut"]).await.expect("GET");
        assert_eq!(
            on_server.as_str(),
            Some(guard.token().to_hex().as_str()),
            "round {round}: the guard holds the lock: the server must agree"
        );
    }
    assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Released);
    assert!(server.cmd(&["GET", "cut"]).await.expect("GET").as_str().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_between_calls_reloads_the_scripts() {
    let server = RedisServer::start().await.expect("start");
    let backend = RedisLuaBuilder::url(server.url()).fencing(true).build().await.unwrap();
    let mine = token();
    assert!(matches!(
        backend.try_acquire("flush", &mine, TTL * 10).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    let created = backend.create("flush-value", b"a", Expiry::Keep).await.unwrap();
    let lock_core::CreateOutcome::Created { version } = created else {
        panic!("{created:?}")
    };
    assert!(server.cmd(&["SCRIPT", "FLUSH"]).await.unwrap().is_ok());
    assert_eq!(
        backend.renew("flush", &mine, TTL * 10).await.unwrap(),
        lock_core::RenewOutcome::Renewed
    );
    assert!(server.cmd(&["SCRIPT", "FLUSH"]).await.unwrap().is_ok());
    assert_eq!(backend.release("flush", &mine).await.unwrap(), ReleaseOutcome::Released);
    assert!(server.cmd(&["SCRIPT", "FLUSH"]).await.unwrap().is_ok());
    assert!(matches!(
        backend
            .compare_and_set("flush-value", version, b"b", Expiry::Keep)
            .await
            .unwrap(),
        lock_core::CasOutcome::Written { .. }
    ));
    assert!(server.cmd(&["SCRIPT", "FLUSH"]).await.unwrap().is_ok());
    assert!(matches!(
        backend.try_acquire("flush", &mine, TTL).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_another_type_give_a_clear_error() {
    let server = RedisServer::start().await.expect("start");
    let backend = backend(server.url()).await;
    assert!(server.cmd(&["HSET", "a-hash", "f", "v"]).await.unwrap().as_int() == Some(1));
    assert!(server.cmd(&["SET", "a-string", "v"]).await.unwrap().is_ok());
    assert!(server.cmd(&["RPUSH", "a-list", "v"]).await.unwrap().as_int() == Some(1));

    let wrongtype = |r: Result<(), Error>| matches!(&r, Err(Error::InvalidArgument(m)) if m.contains("WRONGTYPE"));
    let mine = token();
    assert!(wrongtype(backend.try_acquire("a-hash", &mine, TTL).await.map(drop)));
    assert!(wrongtype(backend.release("a-list", &mine).await.map(drop)));
    // A renewal finds the lock lost (issue 11 item 12), as Tair does.
    assert_eq!(
        backend.renew("a-hash", &mine, TTL).await.unwrap(),
        RenewOutcome::HeldByOther
    );
    assert!(wrongtype(backend.get("a-string").await.map(drop)));
    assert!(wrongtype(backend.create("a-list", b"x", Expiry::Keep).await.map(drop)));
    assert!(wrongtype(
        backend
            .compare_and_set("a-string", 1, b"x", Expiry::Keep)
            .await
            .map(drop)
    ));
    assert!(wrongtype(backend.delete("a-string", 1).await.map(drop)));
    // A hash that is not a versioned value is refused too.
    let err = backend.create("a-hash", b"x", Expiry::Keep).await.unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.contains("not written by verrou")),
        "{err:?}"
    );

    // The manager returns it at once instead of waiting for the timeout.
    let locks = LockManager::with_options(backend, options().acquire_timeout(Duration::from_secs(30))).unwrap();
    let started = Instant::now();
    let err = locks.lock("a-hash").await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a third of the 30 s acquire timeout: the error is not retried"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_without_scripting_is_unsupported() {
    let server = RedisServer::builder()
        .args(["--rename-command", "EVALSHA", ""])
        .args(["--rename-command", "EVAL", ""])
        .start()
        .await
        .expect("start");
    let backend = backend(server.url()).await;
    let err = backend.try_acquire("k", &token(), TTL).await.unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    let err = backend.create("v", b"x", Expiry::Keep).await.unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
}
