//! A primary with a streaming standby: every suite on a primary whose
//! standby is synchronous; a confirmed lease and a versioned write survive
//! the promotion of a synchronous standby; the backend tells synchronous,
//! asynchronous and standby servers apart; a standby refuses writes with a
//! typed error.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::{Expiry, LockBackend, LockToken, VersionedStore};

use lock_core::AcquireOutcome;
use lock_core::{Error, RefusalReason};
use lock_postgres::{PostgresBackend, ReplicationMode};
use lock_testkit::server::{PostgresPair, PostgresServer};
use lock_testkit::{ElectionSuite, LockSuite, MultiSuite, RwSuite, SemaphoreSuite, VersionedSuite};
use tokio::sync::OnceCell;

/// One synchronous pair for the suites of this file.
async fn sync_primary_url() -> String {
    static PAIR: OnceCell<PostgresPair> = OnceCell::const_new();
    PAIR.get_or_init(|| async {
        PostgresPair::start(PostgresServer::builder(), true)
            .await
            .expect("start a synchronous pair")
    })
    .await
    .primary()
    .url()
}

async fn on_sync_primary() -> PostgresBackend {
    PostgresBackend::connect(&sync_primary_url().await)
        .await
        .expect("connect")
}

mod on_a_synchronous_primary {
    use super::*;

    async fn lock_suite() -> LockSuite {
        LockSuite::new(on_sync_primary)
    }

    lock_testkit::lock_conformance!(real, lock_suite());

    mod fair {
        use super::*;
        lock_testkit::fair_conformance!(real, lock_suite());
    }
    mod versioned {
        use super::*;
        lock_testkit::versioned_conformance!(real, async { VersionedSuite::new(on_sync_primary) });
    }
    mod semaphore {
        use super::*;
        lock_testkit::semaphore_conformance!(real, async { SemaphoreSuite::new(on_sync_primary) });
    }
    mod multi {
        use super::*;
        lock_testkit::multi_conformance!(real, async { MultiSuite::new(on_sync_primary) });
    }
    mod rw {
        use super::*;
        lock_testkit::rw_conformance!(real, async { RwSuite::new(on_sync_primary) });
    }
    mod election {
        use super::*;
        lock_testkit::election_conformance!(real, async { ElectionSuite::new(on_sync_primary) });
    }
}

fn acquired_fence(outcome: AcquireOutcome) -> u64 {
    match outcome {
        AcquireOutcome::Acquired(lease) => lease.fencing_token.expect("fence").0,
        other => panic!("{other:?}"),
    }
}

/// A release waits neither for its flush nor for the synchronous standby
/// (lost in a crash or a failover, it brings the lease back until its
/// expiry, never a second holder; the next grant's commit flushes it): with
/// the standby stopped, releases are confirmed, with and without
/// notifications, while a grant waits for the standby and times out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_does_not_wait_for_the_synchronous_standby() {
    let pair = PostgresPair::start(PostgresServer::builder(), true)
        .await
        .expect("pair");
    for notifications in [false, true] {
        let backend = PostgresBackend::builder(&pair.primary().url())
            .expect("url")
            .release_notifications(notifications)
            .response_timeout(Duration::from_secs(1))
            .build()
            .await
            .expect("connect");
        let owner = LockToken::generate().expect("token");
        let key = format!("quick-release:{notifications}");
        let ttl = Duration::from_secs(60);
        acquired_fence(backend.try_acquire(&key, &owner, ttl).await.expect("acquire"));
        pair.standby().pause().expect("pause the standby");
        let released = backend.release(&key, &owner).await;
        let grant = backend
            .try_acquire(&format!("{key}:next"), &LockToken::generate().expect("token"), ttl)
            .await;
        pair.standby().resume().expect("resume the standby");
        assert_eq!(
            released.expect("a release is confirmed without the standby"),
            lock_core::ReleaseOutcome::Released
        );
        let err = grant.expect_err("a grant waits for the synchronous standby");
        assert!(err.is_outcome_unknown(), "{err}");
    }
}

/// A refused attempt grants nothing, so it does not wait for the
/// synchronous standby either: with the standby stopped, a plain attempt
/// with release notifications (the default; it marks the lease as waited
/// for) and a fair attempt (it keeps its queue entry, with or without
/// notifications) find the key held instead of timing out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_attempt_does_not_wait_for_the_synchronous_standby() {
    let pair = PostgresPair::start(PostgresServer::builder(), true)
        .await
        .expect("pair");
    for notifications in [false, true] {
        let backend = PostgresBackend::builder(&pair.primary().url())
            .expect("url")
            .release_notifications(notifications)
            .response_timeout(Duration::from_secs(1))
            .build()
            .await
            .expect("connect");
        let key = format!("quick-refusal:{notifications}");
        let ttl = Duration::from_secs(60);
        acquired_fence(
            backend
                .try_acquire(&key, &LockToken::generate().expect("token"), ttl)
                .await
                .expect("acquire"),
        );
        let waiter = lock_core::raw::FairWaiter::new(LockToken::generate().expect("token"), ttl);
        pair.standby().pause().expect("pause the standby");
        let fair = backend
            .try_acquire_fair(&key, &LockToken::generate().expect("token"), ttl, &waiter)
            .await;
        // Without notifications a refused plain attempt locks the row and
        // commits like a grant (it waits for the standby): not sent.
        let plain = if notifications {
            Some(
                backend
                    .try_acquire(&key, &LockToken::generate().expect("token"), ttl)
                    .await,
            )
        } else {
            None
        };
        pair.standby().resume().expect("resume the standby");
        let fair = fair.expect("a refused fair attempt is answered without the standby");
        assert!(matches!(fair, AcquireOutcome::Held { .. }), "{fair:?}");
        if let Some(plain) = plain {
            let plain = plain.expect("a refused attempt is answered without the standby");
            assert!(matches!(plain, AcquireOutcome::Held { .. }), "{plain:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_lease_survives_the_promotion_of_a_synchronous_standby() {
    let pair = PostgresPair::start(PostgresServer::builder(), true)
        .await
        .expect("pair");
    let primary = PostgresBackend::connect(&pair.primary().url()).await.expect("connect");
    assert!(
        matches!(
            primary.replication_at_build(),
            Some(ReplicationMode::Synchronous { .. })
        ),
        "{:?}",
        primary.replication_at_build()
    );
    assert!(
        primary.capabilities().replica_ack,
        "synchronous commits are reported as replica-acknowledged"
    );

    let owner = LockToken::generate().expect("token");
    let ttl = Duration::from_secs(60);
    let fence = acquired_fence(primary.try_acquire("failover", &owner, ttl).await.expect("acquire"));
    primary
        .create("failover:value", b"confirmed", Expiry::Keep)
        .await
        .expect("create");

    pair.fail_over().await.expect("fail over");
    let promoted = PostgresBackend::connect(&pair.standby().url())
        .await
        .expect("connect to the promoted standby");
    let thief = LockToken::generate().expect("token");
    let held = promoted.try_acquire("failover", &thief, ttl).await.expect("acquire");
    assert!(
        matches!(held, AcquireOutcome::Held { .. }),
        "the lease was lost in the failover: {held:?}"
    );
    let value = promoted
        .get("failover:value")
        .await
        .expect("get")
        .expect("the write survived");
    assert_eq!(value.value, b"confirmed");
    // The owner still holds it there, and fencing tokens keep growing.
    assert_eq!(
        promoted.release("failover", &owner).await.expect("release"),
        lock_core::ReleaseOutcome::Released
    );
    assert!(acquired_fence(promoted.try_acquire("failover", &thief, ttl).await.expect("acquire")) > fence);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asynchronous_and_standby_servers_are_told_apart_and_a_standby_refuses_writes() {
    let pair = PostgresPair::start(PostgresServer::builder(), false)
        .await
        .expect("pair");
    let primary = PostgresBackend::connect(&pair.primary().url()).await.expect("connect");
    assert_eq!(
        primary.replication().await.expect("detect"),
        ReplicationMode::Asynchronous { standbys: 1 }
    );
    assert!(!primary.capabilities().replica_ack);

    // The schema reaches the standby by replication (asynchronously).
    let mut standby = None;
    for _ in 0..100 {
        match PostgresBackend::builder(&pair.standby().url())
            .expect("url")
            .create_schema(false)
            .build()
            .await
        {
            Ok(b) => {
                standby = Some(b);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let standby = standby.expect("the schema replicated to the standby");
    assert_eq!(standby.replication().await.expect("detect"), ReplicationMode::Standby);
    let err = standby
        .try_acquire("ro", &LockToken::generate().expect("token"), Duration::from_secs(1))
        .await
        .expect_err("a standby cannot take a lock");
    assert!(
        matches!(
            err,
            Error::Refused {
                reason: RefusalReason::ReadOnly,
                ..
            }
        ),
        "{err}"
    );
    assert!(!err.is_outcome_unknown(), "a refused write did nothing: {err}");
}
