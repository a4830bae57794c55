//! Replica acknowledgement (WAIT) against a real primary + replica.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::{
    CasOutcome, CreateOutcome, Error, Expiry, LockBackend, LockManager, LockOptions, LockToken, Replication,
    VersionedStore,
};

use lock_core::AcquireOutcome;
use lock_redis_lua::{OnShortfall, RedisLuaBackend, RedisLuaBuilder, ReplicaAck};
use lock_testkit::server::{RedisServer, ReplicatedPair};
use tokio::time::Instant;

async fn pair() -> ReplicatedPair {
    ReplicatedPair::start(RedisServer::builder())
        .await
        .expect("start a primary and a replica")
}

async fn acked(url: String, ack: ReplicaAck) -> RedisLuaBackend {
    RedisLuaBuilder::url(url)
        .response_timeout(Duration::from_millis(500))
        .fencing(true)
        .replica_ack(ack)
        .build()
        .await
        .expect("connect")
}

fn token() -> LockToken {
    LockToken::generate().expect("token")
}

/// With a live replica, acquires and versioned writes are confirmed, and the
/// replica really holds the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_replica_acknowledges() {
    let pair = pair().await;
    let backend = acked(pair.primary().url(), ReplicaAck::new(1, Duration::from_secs(2))).await;
    assert!(backend.capabilities().replica_ack);
    let mine = token();
    let AcquireOutcome::Acquired(lease) = backend
        .try_acquire("acked", &mine, Duration::from_secs(5))
        .await
        .expect("acquire")
    else {
        panic!("free key")
    };
    assert_eq!(lease.replication, Replication::Confirmed { replicas: 1 });
    // WAIT returned, so the replica has applied the acquire already.
    let on_replica = pair.replica().cmd(&["GET", "acked"]).await.expect("GET on the replica");
    assert_eq!(on_replica.as_str(), Some(mine.to_hex().as_str()));

    // Through the manager: the guard reports the confirmation.
    let locks = LockManager::new(backend.clone()).expect("manager");
    let guard = locks.lock("acked-guard").await.expect("lock");
    assert_eq!(guard.replication(), Replication::Confirmed { replicas: 1 });
    guard.release().await.expect("release");

    let CreateOutcome::Created { version } = backend.create("acked-value", b"1", Expiry::Keep).await.expect("create")
    else {
        panic!("create")
    };
    assert!(matches!(
        backend
            .compare_and_set("acked-value", version, b"2", Expiry::Keep)
            .await
            .expect("cas"),
        CasOutcome::Written { .. }
    ));
    let on_replica = pair
        .replica()
        .cmd(&["HGET", "acked-value", "v"])
        .await
        .expect("HGET on the replica");
    assert_eq!(on_replica.as_str(), Some("2"));
}

/// With the replica killed, WAIT reports the shortfall within its timeout,
/// and the other traffic of the same backend does not queue behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_replica_is_reported_without_stalling_other_traffic() {
    let pair = pair().await;
    // Long enough that the side traffic below runs while WAIT is pending on
    // any machine; that it did is checked on the server, not on the clock.
    let wait = Duration::from_secs(2);
    let backend = acked(
        pair.primary().url(),
        ReplicaAck::new(1, wait).on_shortfall(OnShortfall::MarkUnconfirmed),
    )
    .await;
    // A lock held before the replica dies, to renew while WAIT is pending,
    // and a key held by "someone else", to try while WAIT is pending.
    let held = token();
    assert!(matches!(
        backend
            .try_acquire("held", &held, Duration::from_secs(10))
            .await
            .expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    pair.replica().kill().expect("kill the replica");

    let waiting = {
        let backend = backend.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let outcome = backend
                .try_acquire("under-replicated", &token(), Duration::from_secs(10))
                .await;
            (outcome, started.elapsed())
        })
    };
    // Synchronise on the server: the WAIT is blocked there.
    let blocked = || async { pair.primary().info("clients").await.expect("INFO")["blocked_clients"].clone() };
    let give_up = Instant::now() + wait;
    while blocked().await == "0" {
        assert!(Instant::now() < give_up, "WAIT never blocked");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let other = backend
        .try_acquire("held", &token(), Duration::from_secs(10))
        .await
        .expect("try_acquire on a held key");
    let read = backend.get("nothing-here").await.expect("get");
    assert!(matches!(other, AcquireOutcome::Held { .. }));
    assert_eq!(read, None);
    // Both answered while WAIT was still blocked: none queued behind it.
    assert_eq!(blocked().await, "1", "the side traffic ran while WAIT was pending");
    assert!(
        !waiting.is_finished(),
        "WAIT should still be pending after the side traffic"
    );

    // A renewal WAITs too (issue 11 item 17): unacknowledged, it fails.
    let renewed = backend.renew("held", &held, Duration::from_secs(10)).await;
    assert!(
        matches!(
            renewed,
            Err(Error::Backend {
                outcome_unknown: true,
                ..
            })
        ),
        "{renewed:?}"
    );

    let (outcome, took) = waiting.await.expect("task");
    let AcquireOutcome::Acquired(lease) = outcome.expect("acquire") else {
        panic!("free key")
    };
    assert_eq!(
        lease.replication,
        Replication::Unconfirmed {
            acknowledged: 0,
            requested: 1
        }
    );
    assert!(
        took >= wait - Duration::from_millis(100),
        "WAIT returned after {took:?}"
    );
    assert!(took < wait * 3, "WAIT is bounded by its timeout, took {took:?}");
}

/// The default policy releases an under-replicated lock and fails clearly;
/// a versioned write fails with an unknown outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shortfall_releases_and_fails_by_default() {
    let pair = pair().await;
    let backend = acked(pair.primary().url(), ReplicaAck::new(1, Duration::from_millis(300))).await;
    pair.replica().kill().expect("kill the replica");

    let err = backend
        .try_acquire("shortfall", &token(), Duration::from_secs(10))
        .await
        .expect_err("under-replicated acquire");
    assert!(
        matches!(&err, Error::Backend { outcome_unknown: false, message, .. }
            if message.contains("0 of 1 replicas") && message.contains("released")),
        "got {err:?}"
    );
    // It was given back: a client without WAIT takes it at once.
    let plain = RedisLuaBackend::connect(&pair.primary().url()).await.expect("connect");
    assert!(matches!(
        plain
            .try_acquire("shortfall", &token(), Duration::from_secs(1))
            .await
            .expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    // The manager surfaces the error (try_lock) rather than a guard.
    let locks = LockManager::with_options(backend.clone(), LockOptions::with_ttl(Duration::from_secs(5))).unwrap();
    let err = locks.try_lock("shortfall-2").await.expect_err("under-replicated");
    assert!(
        matches!(&err, Error::Backend { outcome_unknown: false, message, .. } if message.contains("released")),
        "got {err:?}"
    );

    let err = backend
        .create("shortfall-value", b"x", Expiry::Keep)
        .await
        .expect_err("under-replicated write");
    assert!(err.is_outcome_unknown(), "got {err:?}");
}
