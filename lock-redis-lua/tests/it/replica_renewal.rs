//! Replica acknowledgement covers renewals too (issue 11 item 17): with
//! `ReplicaAck`, a renewal counts only once WAIT confirms it.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::{Error, LockBackend, LockManager, LockOptions, Renewal, Replication};

use lock_core::RenewOutcome;
use lock_redis_lua::{RedisLuaBuilder, ReplicaAck};
use lock_testkit::server::{RedisServer, ReplicatedPair};
use tokio::time::Instant;

const TTL: Duration = Duration::from_millis(1_500);

/// With the replica paused (WAIT comes back short), a renewal is an error
/// and the guard's deadline does not move: the guard is lost at the
/// deadline of its confirmed acquire. Once the replica is back, renewals
/// are confirmed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_renewal_does_not_move_the_deadline() {
    let pair = ReplicatedPair::start(RedisServer::builder())
        .await
        .expect("start a primary and a replica");
    let backend = RedisLuaBuilder::url(pair.primary().url())
        .response_timeout(Duration::from_millis(500))
        .replica_ack(ReplicaAck::new(1, Duration::from_millis(200)))
        .build()
        .await
        .expect("connect");
    let options = LockOptions::with_ttl(TTL).renewal(Renewal::Manual);
    let locks = LockManager::with_options(backend.clone(), options).expect("options");
    let guard = locks.lock("r17").await.expect("lock");
    assert_eq!(guard.replication(), Replication::Confirmed { replicas: 1 });

    pair.replica().pause().expect("SIGSTOP the replica");
    let deadline = guard.deadline();
    let err = guard
        .extend(Duration::from_secs(60))
        .await
        .expect_err("not acknowledged");
    assert!(err.is_outcome_unknown(), "{err}");
    assert_eq!(guard.deadline(), deadline, "an unconfirmed renewal moved the deadline");
    let many = backend
        .renew_many(&[("r17", guard.token())], Duration::from_secs(60))
        .await;
    assert!(
        matches!(
            &many[..],
            [Err(Error::Backend {
                outcome_unknown: true,
                ..
            })]
        ),
        "{many:?}"
    );
    // Lost at the acquire's deadline (generous bound: a few TTLs).
    tokio::time::timeout(TTL * 3, guard.lost())
        .await
        .expect("lost at the old deadline");
    assert!(Instant::now() >= deadline);
    drop(guard);

    pair.replica().resume().expect("SIGCONT the replica");
    let guard = locks.lock("r17b").await.expect("lock");
    let deadline = guard.deadline();
    guard.extend(Duration::from_secs(60)).await.expect("confirmed renewal");
    assert!(guard.deadline() > deadline);
    let many = backend.renew_many(&[("r17b", guard.token())], TTL).await;
    assert!(matches!(&many[..], [Ok(RenewOutcome::Renewed)]), "{many:?}");
}
