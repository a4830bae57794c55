//! Faults on real servers: killed, paused (SIGSTOP), connections cut or
//! blackholed through a TCP proxy. Loss is signalled by the deadline,
//! operations fail (never hang) while the server is gone, and everything
//! works again once it is back.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::future::Future;
use std::time::Duration;

use lock_core::{
    CasOutcome, CreateOutcome, Error, Expiry, LeaseHandle, LockBackend, LockGuard, LockManager, LockOptions, LockToken,
    LossReason, VersionedStore,
};

use lock_core::{AcquireOutcome, ReleaseOutcome};
use lock_tair::TairBackend;
use lock_testkit::server::TcpProxy;
use tokio::time::Instant;

/// Failures must come within a generous multiple of it (5×): the bound
/// catches a hang, not a slow scheduler.
const COMMAND_TIMEOUT: Duration = Duration::from_millis(300);

fn options(ttl: Duration) -> LockOptions {
    LockOptions::with_ttl(ttl)
        .acquire_timeout(Duration::from_millis(400))
        .op_timeout(COMMAND_TIMEOUT)
}

async fn backend(url: &str) -> TairBackend {
    common::connect(common::builder(url).response_timeout(COMMAND_TIMEOUT)).await
}

/// Run `op`, which must fail within `bound`; returns the error.
async fn fails_within<T: std::fmt::Debug>(
    what: &str,
    bound: Duration,
    op: impl Future<Output = lock_core::Result<T>>,
) -> Error {
    let started = Instant::now();
    let result = tokio::time::timeout(bound, op)
        .await
        .unwrap_or_else(|_| panic!("{what} hung for more than {bound:?}"));
    let err = result.expect_err(what);
    println!("{what} failed after {:?}: {err}", started.elapsed());
    err
}

/// Retry `try_lock` until the server is back (reconnect included).
async fn lock_when_back(locks: &LockManager, key: &str) -> LockGuard {
    let started = Instant::now();
    loop {
        if let Ok(Some(guard)) = locks.try_lock(key).await {
            println!(
                "{key}: acquired again {:?} after the server came back",
                started.elapsed()
            );
            return guard;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "no recovery after the server came back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Watch `lease` in the background: the returned task checks that the lease
/// is lost at its deadline, exactly (`is_lost()` compares clocks, and no
/// renewal moved the deadline), and that the `lost()` signal, a timer,
/// follows within one TTL (scheduling delay on a loaded machine).
fn expect_lost_by_deadline(lease: LeaseHandle, ttl: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let deadline = lease.deadline();
        let signal = tokio::spawn({
            let lease = lease.clone();
            async move { lease.lost().await }
        });
        tokio::time::sleep_until(deadline).await;
        assert_eq!(lease.deadline(), deadline, "no renewal may get through");
        assert!(lease.is_lost(), "lost at the deadline");
        let reason = tokio::time::timeout(ttl, signal)
            .await
            .expect("lost() must fire within a TTL of the deadline")
            .expect("watcher");
        assert_eq!(reason, LossReason::DeadlinePassed);
    })
}

/// Server killed while a lock is held: `lost()` fires by the deadline, new
/// acquires and reads fail (clearly, promptly) while it is down, and succeed
/// after a restart without the application doing anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_killed_while_held() {
    let server = common::tair_server().await;
    let b = backend(&server.url()).await;
    let ttl = Duration::from_millis(600);
    let locks = LockManager::with_options(b.clone(), options(ttl)).unwrap();
    let guard = locks.lock("k").await.unwrap();
    let lost = expect_lost_by_deadline(guard.handle(), ttl);
    server.kill().unwrap();
    lost.await.unwrap();
    drop(guard);

    let err = fails_within("try_lock while down", Duration::from_secs(2), locks.try_lock("k2")).await;
    assert!(err.is_backend(), "{err:?}");
    let err = fails_within("lock while down", Duration::from_secs(3), locks.lock("k2")).await;
    assert!(err.is_backend(), "the backend error, not a Timeout: {err:?}");
    let err = fails_within("get while down", Duration::from_secs(2), b.get("v")).await;
    assert!(
        err.is_backend() && !err.is_outcome_unknown(),
        "a failed read changed nothing: {err:?}"
    );

    server.restart_empty().await.unwrap();
    let guard = lock_when_back(&locks, "k").await;
    assert!(!guard.is_lost());
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

/// Server paused (SIGSTOP): every operation times out within its bound and
/// reports an unknown outcome for writes; the held lock is lost by its
/// deadline; after SIGCONT everything works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_paused() {
    let server = common::tair_server().await;
    let b = backend(&server.url()).await;
    let ttl = Duration::from_millis(600);
    let locks = LockManager::with_options(b.clone(), options(ttl)).unwrap();
    let guard = locks.lock("k").await.unwrap();
    let CreateOutcome::Created { version } = b.create("v", b"1", Expiry::Keep).await.unwrap() else {
        panic!("create")
    };
    let lost = expect_lost_by_deadline(guard.handle(), ttl);
    server.pause().unwrap();

    let bound = COMMAND_TIMEOUT * 5;
    let err = fails_within(
        "try_acquire while paused",
        bound,
        b.try_acquire("k2", &LockToken::generate().unwrap(), Duration::from_secs(1)),
    )
    .await;
    assert!(err.is_outcome_unknown(), "{err:?}");
    let err = fails_within(
        "compare_and_set while paused",
        bound,
        b.compare_and_set("v", version, b"2", Expiry::Keep),
    )
    .await;
    assert!(err.is_outcome_unknown(), "{err:?}");
    let err = fails_within("get while paused", bound, b.get("v")).await;
    assert!(err.is_backend() && !err.is_outcome_unknown(), "{err:?}");
    let err = fails_within("try_lock while paused", bound, locks.try_lock("k2")).await;
    assert!(err.is_outcome_unknown(), "{err:?}");
    lost.await.unwrap();
    assert!(guard.is_lost());
    let err = fails_within("release while paused", bound, guard.release()).await;
    assert!(err.is_backend(), "{err:?}");

    server.resume().unwrap();
    let guard = lock_when_back(&locks, "k").await;
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    // The CAS sent while paused may or may not have run (outcome unknown):
    // either way the value is one of the two, and the store is usable.
    let now = b.get("v").await.unwrap().expect("present");
    assert!(now.value == b"1" || now.value == b"2", "{now:?}");
}

/// Connections cut under a held lock: after each cut a renewal gets through
/// a new connection and the lock survives; a write whose connection is cut
/// in flight reports an unknown outcome; a blackhole times out, and the
/// store works once it lifts. Synchronised on events, not sleeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_cut_through_a_proxy() {
    let server = common::tair_server().await;
    let proxy = TcpProxy::start(server.addr()).await.unwrap();
    let b = backend(&proxy.url()).await;
    // A renewal every half second: the failed one (the cut) and the next
    // (reconnect + renew) both fit in the TTL with a second to spare.
    let ttl = Duration::from_secs(2);
    let locks = LockManager::with_options(
        b.clone(),
        options(ttl).renewal(lock_core::Renewal::Auto { interval: ttl / 4 }),
    )
    .unwrap();
    let guard = locks.lock("k").await.unwrap();
    for round in 0..3 {
        proxy.cut_all();
        // Two renewals move the deadline: the renewer has one call in
        // flight at a time, so at least the second used a new connection.
        let give_up = Instant::now() + ttl * 5;
        for _ in 0..2 {
            let before = guard.deadline();
            while guard.deadline() <= before {
                assert!(!guard.is_lost(), "round {round}: lost: the renewer must reconnect");
                assert!(Instant::now() < give_up, "round {round}: no renewal after the cut");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        assert!(!guard.is_lost(), "round {round}");
        let stored = server.cmd(&["GET", "k"]).await.unwrap();
        assert_eq!(stored.as_str(), Some(guard.token().to_hex().as_str()), "round {round}");
    }
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);

    // A write in flight when its connection is cut: the server applied it
    // (seen directly, not through the proxy) and its reply is held back by
    // the proxy's latency when the cut comes. A long command timeout
    // proves the error comes from the cut, not from a timeout.
    let patient_timeout = Duration::from_secs(10);
    let patient = common::connect(common::builder(&proxy.url()).response_timeout(patient_timeout)).await;
    proxy.set_latency(Duration::from_secs(1));
    let started = Instant::now();
    let in_flight = tokio::spawn(async move {
        patient
            .try_acquire("w", &LockToken::generate().unwrap(), Duration::from_secs(30))
            .await
    });
    while server.cmd(&["EXISTS", "w"]).await.unwrap().as_int() != Some(1) {
        assert!(
            started.elapsed() < patient_timeout,
            "the write never reached the server"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    proxy.cut_all();
    let err = in_flight.await.unwrap().expect_err("cut in flight");
    assert!(err.is_outcome_unknown(), "{err:?}");
    assert!(
        started.elapsed() < patient_timeout,
        "the cut, not the command timeout, ended the call"
    );
    proxy.set_latency(Duration::ZERO);

    // Blackhole: replies never come.
    // A retried create may find what an earlier attempt wrote (that
    // attempt's reply was lost to the cut above): then read its version.
    let version = match retry(|| b.create("v", b"1", Expiry::Keep)).await {
        CreateOutcome::Created { version } => version,
        _ => {
            retry(|| b.get("v"))
                .await
                .expect("written by an earlier attempt")
                .version
        }
    };
    proxy.set_blackhole(true);
    let bound = COMMAND_TIMEOUT * 5;
    let err = fails_within(
        "compare_and_set in a blackhole",
        bound,
        b.compare_and_set("v", version, b"2", Expiry::Keep),
    )
    .await;
    assert!(err.is_outcome_unknown(), "{err:?}");
    let err = fails_within(
        "release in a blackhole",
        bound,
        b.release("w", &LockToken::generate().unwrap()),
    )
    .await;
    assert!(err.is_outcome_unknown(), "{err:?}");
    proxy.set_blackhole(false);
    let now = retry(|| b.get("v")).await.expect("present");
    let next = retry(|| b.compare_and_set("v", now.version, b"3", Expiry::Keep)).await;
    assert!(matches!(next, CasOutcome::Written { .. }), "{next:?}");
    let t = LockToken::generate().unwrap();
    assert!(matches!(
        retry(|| b.try_acquire("after", &t, Duration::from_secs(1))).await,
        AcquireOutcome::Acquired(_)
    ));
}

/// Retry an operation until it succeeds (a reconnect may be under way).
async fn retry<T, F, Fut>(mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = lock_core::Result<T>>,
{
    let started = Instant::now();
    loop {
        match op().await {
            Ok(v) => return v,
            Err(e) => {
                assert!(started.elapsed() < Duration::from_secs(15), "no recovery: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
