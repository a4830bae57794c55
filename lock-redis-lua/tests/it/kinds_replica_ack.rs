//! The other lock kinds under replica acknowledgement: semaphore and
//! read-write grants WAIT like mutex acquires (a replica holds the permit or
//! the writer when the grant returns), and their renewals count once
//! confirmed, and so do leader elections' wins and renewals and multi-key
//! grants and renewals.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::{
    ElectionManager, LockBackend, LockToken, MultiLockManager, Replication, RwLockManager, RwMode, SemaphoreManager,
};

use lock_core::raw::{ElectionBackend, MultiLockBackend, PermitRequest, RwLockBackend, SemaphoreBackend};

use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_redis_family::kinds::rw::RwKeys;
use lock_redis_family::kinds::semaphore::SemaphoreKeys;
use lock_redis_lua::{RedisLuaBackend, RedisLuaBuilder, ReplicaAck};
use lock_testkit::server::{RedisServer, ReplicatedPair};

async fn acked(url: String) -> RedisLuaBackend {
    RedisLuaBuilder::url(url)
        .response_timeout(Duration::from_millis(500))
        .replica_ack(ReplicaAck::new(1, Duration::from_secs(2)))
        .build()
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_grants_wait_for_the_replica() {
    let pair = ReplicatedPair::start(RedisServer::builder())
        .await
        .expect("start a primary and a replica");
    let backend = acked(pair.primary().url()).await;
    assert!(backend.capabilities().semaphores);
    let sems = SemaphoreManager::new(backend).expect("manager");
    let permit = sems.semaphore("acked", 2).unwrap().acquire(1).await.expect("acquire");
    assert_eq!(permit.replication(), Replication::Confirmed { replicas: 1 });
    // WAIT returned, so the replica already counts the holder.
    let holders = SemaphoreKeys::prefixed("verrou:lua:", "acked").unwrap().holders;
    let on_replica = pair.replica().cmd(&["ZCARD", holders.as_str()]).await.expect("ZCARD");
    assert_eq!(on_replica.as_int(), Some(1));
    permit.release().await.expect("release");
}

/// As for the mutex (issue 11): a permit renewal counts only once WAIT
/// confirms it, so a renewal the replica did not acknowledge is an
/// unknown-outcome error (the guard's deadline stays where it was).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_permit_renewal_is_an_unknown_outcome() {
    let pair = ReplicatedPair::start(RedisServer::builder())
        .await
        .expect("start a primary and a replica");
    // The WAIT timeout is generous: a loaded runner's replica may take a
    // while to acknowledge the confirmed steps.
    let backend = acked(pair.primary().url()).await;
    let token = LockToken::generate().expect("token");
    let ttl = Duration::from_secs(5);
    let granted = backend
        .acquire_permits("renewed", &token, PermitRequest::new(2, 1), ttl)
        .await
        .expect("acquire");
    assert!(matches!(granted, AcquireOutcome::Acquired(_)), "{granted:?}");
    assert_eq!(
        backend
            .renew_permits("renewed", &token, ttl)
            .await
            .expect("confirmed renewal"),
        RenewOutcome::Renewed
    );

    pair.replica().pause().expect("SIGSTOP the replica");
    let err = backend
        .renew_permits("renewed", &token, ttl)
        .await
        .expect_err("a renewal the replica did not acknowledge");
    assert!(err.is_outcome_unknown(), "{err}");
    pair.replica().resume().expect("SIGCONT the replica");
    assert_eq!(
        backend
            .renew_permits("renewed", &token, ttl)
            .await
            .expect("confirmed again"),
        RenewOutcome::Renewed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_is_offered_under_replica_ack() {
    let server = RedisServer::start().await.expect("start");
    let backend = acked(server.url()).await;
    let caps = backend.capabilities();
    assert!(caps.semaphores && caps.multi_key_locks && caps.rw_locks && caps.leader_election);
    assert!(
        MultiLockManager::new(backend.clone()).is_ok(),
        "multi-key grants WAIT too"
    );
    assert!(ElectionManager::new(backend).is_ok(), "elections WAIT too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_key_grants_wait_for_the_replica() {
    let pair = ReplicatedPair::start(RedisServer::builder())
        .await
        .expect("start a primary and a replica");
    let backend = acked(pair.primary().url()).await;
    let locks = MultiLockManager::new(backend).expect("manager");
    let guard = locks.lock(&["{acct}:1", "{acct}:2"]).await.expect("lock");
    assert_eq!(guard.replication(), Replication::Confirmed { replicas: 1 });
    assert!(guard.fencing_token().is_some(), "a multi-key grant carries its token");
    // WAIT returned, so the replica already holds both keys for the holder.
    for key in ["{acct}:1", "{acct}:2"] {
        let on_replica = pair.replica().cmd(&["EXISTS", key]).await.expect("EXISTS");
        assert_eq!(on_replica.as_int(), Some(1), "{key} on the replica");
    }
    guard.release().await.expect("release");
}

/// As for the mutex: a multi-key grant too few replicas acknowledged is
/// given back and fails (the default `ReleaseAndFail`), and a renewal the
/// replica did not acknowledge is an unknown-outcome error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacknowledged_multi_key_grants_and_renewals_do_not_count() {
    let pair = ReplicatedPair::start(RedisServer::builder())
        .await
        .expect("start a primary and a replica");
    let backend = RedisLuaBuilder::url(pair.primary().url())
        .response_timeout(Duration::from_millis(500))
        .replica_ack(ReplicaAck::new(1, Duration::from_millis(300)))
        .build()
        .await
        .expect("connect");
    // The confirmed steps get a wait a loaded machine meets (a fresh
    // replica's first acknowledgement can take longer than 300 ms there).
    let sure = acked(pair.primary().url()).await;
    let keys = ["{acct}:1", "{acct}:2"];
    let token = LockToken::generate().expect("token");
    let ttl = Duration::from_secs(5);
    let granted = sure.try_acquire_all(&keys, &token, ttl).await.expect("acquire");
    assert!(matches!(granted, AcquireOutcome::Acquired(_)), "{granted:?}");
    assert_eq!(
        sure.renew_all(&keys, &token, ttl).await.expect("confirmed renewal"),
        RenewOutcome::Renewed
    );

    pair.replica().pause().expect("SIGSTOP the replica");
    let err = backend
        .renew_all(&keys, &token, ttl)
        .await
        .expect_err("a renewal the replica did not acknowledge");
    assert!(err.is_outcome_unknown(), "{err}");
    assert_eq!(
        backend.release_all(&keys, &token).await.expect("release"),
        ReleaseOutcome::Released
    );
    let other = LockToken::generate().expect("token");
    let err = backend
        .try_acquire_all(&keys, &other, ttl)
        .await
        .expect_err("a grant the replica did not acknowledge");
    assert!(!err.is_outcome_unknown(), "given back: {err}");
    let left = pair.primary().cmd(&["EXISTS", keys[0], keys[1]]).await.expect("EXISTS");
    assert_eq!(left.as_int(), Some(0), "the keys were given back");
    pair.replica().resume().expect("SIGCONT the replica");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rw_grants_wait_for_the_replica() {
    let pair = ReplicatedPair::start(RedisServer::builder())
        .await
        .expect("start a primary and a replica");
    let backend = acked(pair.primary().url()).await;
    assert!(backend.capabilities().rw_locks);
    let locks = RwLockManager::new(backend).expect("manager");
    let writer = locks.write("acked").await.expect("write");
    assert_eq!(writer.replication(), Replication::Confirmed { replicas: 1 });
    // WAIT returned, so the replica already has the writer.
    let key = RwKeys::prefixed("verrou:lua:", "acked").unwrap().writer;
    let on_replica = pair.replica().cmd(&["EXISTS", key.as_str()]).await.expect("EXISTS");
    assert_eq!(on_replica.as_int(), Some(1));
    writer.release().await.expect("release");
    let reader = locks.read("acked").await.expect("read");
    assert_eq!(reader.replication(), Replication::Confirmed { replicas: 1 });
    reader.release().await.expect("release");
}

/// As for the semaphore: an rw renewal the replica did not acknowledge is
/// an unknown-outcome error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_rw_renewal_is_an_unknown_outcome() {
    let pair = ReplicatedPair::start(RedisServer::builder())
        .await
        .expect("start a primary and a replica");
    let backend = acked(pair.primary().url()).await;
    let token = LockToken::generate().expect("token");
    let ttl = Duration::from_secs(5);
    let granted = backend
        .try_acquire_rw("renewed", RwMode::Write, false, &token, ttl)
        .await
        .expect("acquire");
    assert!(matches!(granted, AcquireOutcome::Acquired(_)), "{granted:?}");
    assert_eq!(
        backend
            .renew_rw("renewed", &token, ttl)
            .await
            .expect("confirmed renewal"),
        RenewOutcome::Renewed
    );
    pair.replica().pause().expect("SIGSTOP the replica");
    let err = backend
        .renew_rw("renewed", &token, ttl)
        .await
        .expect_err("a renewal the replica did not acknowledge");
    assert!(err.is_outcome_unknown(), "{err}");
    pair.replica().resume().expect("SIGCONT the replica");
    assert_eq!(
        backend.renew_rw("renewed", &token, ttl).await.expect("confirmed again"),
        RenewOutcome::Renewed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_wins_wait_for_the_replica() {
    let pair = ReplicatedPair::start(RedisServer::builder())
        .await
        .expect("start a primary and a replica");
    let backend = acked(pair.primary().url()).await;
    assert!(backend.capabilities().leader_election);
    let election = ElectionManager::new(backend.clone()).expect("manager");
    let leadership = election.campaign("acked", b"node-a").await.expect("campaign");
    assert_eq!(leadership.replication(), Replication::Confirmed { replicas: 1 });
    let ttl = Duration::from_secs(5);
    pair.replica().pause().expect("SIGSTOP the replica");
    // A renewal of the leader the replica did not acknowledge is an
    // unknown outcome, as for the mutex.
    let err = backend
        .renew_lead("acked", leadership.token(), ttl)
        .await
        .expect_err("a renewal the replica did not acknowledge");
    assert!(err.is_outcome_unknown(), "{err}");
    pair.replica().resume().expect("SIGCONT the replica");
    leadership.resign().await.expect("resign");
}
