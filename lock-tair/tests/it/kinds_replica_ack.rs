//! Every lock kind under replica acknowledgement on Tair, as on the Lua
//! backend: semaphore, read-write, multi-key and election grants WAIT like
//! mutex acquires (the replica holds the grant when it returns), a grant
//! too few replicas acknowledged is given back and fails, and a renewal
//! counts only once confirmed (else an unknown-outcome error); and every
//! kind's conformance suite passes under it.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use crate::common;

use std::time::Duration;

use lock_core::{
    ElectionManager, LockBackend, LockToken, MultiLockManager, Replication, RwLockManager, RwMode, SemaphoreManager,
};

use lock_core::raw::{ElectionBackend, MultiLockBackend, PermitRequest, RwLockBackend, SemaphoreBackend};

use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_tair::{ReplicaAck, TairBackend};
use lock_testkit::server::ReplicatedPair;
use lock_testkit::{ElectionSuite, MultiSuite, RwSuite, SemaphoreSuite};
use tokio::sync::OnceCell;

/// The kinds' keys of the name `acked` on Tair (`verrou:tair:<kind>:{name}`).
const HOLDERS: &str = "verrou:tair:sem:{acked}";
const WRITER: &str = "verrou:tair:rw:writer:{acked}";
const LEADER: &str = "verrou:tair:leader:{acked}";

async fn pair() -> ReplicatedPair {
    ReplicatedPair::start(common::tair())
        .await
        .expect("start a primary and a replica with the Tair module")
}

/// Acknowledged by the one replica within `wait`.
async fn acked(url: &str, wait: Duration) -> TairBackend {
    common::connect(common::builder(url).replica_ack(ReplicaAck::new(1, wait))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_is_offered_under_replica_ack() {
    let server = common::tair_server().await;
    let backend = acked(&server.url(), Duration::from_millis(100)).await;
    let caps = backend.capabilities();
    assert!(caps.replica_ack);
    assert!(caps.semaphores && caps.multi_key_locks && caps.rw_locks && caps.leader_election);
    assert!(SemaphoreManager::new(backend.clone()).is_ok());
    assert!(RwLockManager::new(backend.clone()).is_ok());
    assert!(MultiLockManager::new(backend.clone()).is_ok());
    assert!(ElectionManager::new(backend).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_of_every_kind_wait_for_the_replica() {
    let pair = pair().await;
    let backend = acked(&pair.primary().url(), Duration::from_secs(2)).await;
    let confirmed = Replication::Confirmed { replicas: 1 };
    let replica = pair.replica();

    let sems = SemaphoreManager::new(backend.clone()).expect("semaphores");
    let permit = sems.semaphore("acked", 2).unwrap().acquire(1).await.expect("permit");
    assert_eq!(permit.replication(), confirmed);
    assert_eq!(replica.cmd(&["ZCARD", HOLDERS]).await.unwrap().as_int(), Some(1));
    permit.release().await.expect("release");

    let rw = RwLockManager::new(backend.clone()).expect("rw");
    let writer = rw.write("acked").await.expect("write");
    assert_eq!(writer.replication(), confirmed);
    assert_eq!(replica.cmd(&["EXISTS", WRITER]).await.unwrap().as_int(), Some(1));
    writer.release().await.expect("release");
    let reader = rw.read("acked").await.expect("read");
    assert_eq!(reader.replication(), confirmed);
    reader.release().await.expect("release");

    let multi = MultiLockManager::new(backend.clone()).expect("multi");
    let set = multi.lock(&["{acct}:1", "{acct}:2"]).await.expect("lock");
    assert_eq!(set.replication(), confirmed);
    assert!(set.fencing_token().is_some());
    for key in ["{acct}:1", "{acct}:2"] {
        assert_eq!(replica.cmd(&["EXISTS", key]).await.unwrap().as_int(), Some(1), "{key}");
    }
    set.release().await.expect("release");

    let election = ElectionManager::new(backend).expect("election");
    let leadership = election.campaign("acked", b"node-a").await.expect("campaign");
    assert_eq!(leadership.replication(), confirmed);
    assert_eq!(replica.cmd(&["EXISTS", LEADER]).await.unwrap().as_int(), Some(1));
    leadership.resign().await.expect("resign");
}

/// With the replica stopped, each kind's renewal is an unknown-outcome
/// error (not counted), and each kind's grant is given back and fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacknowledged_grants_and_renewals_do_not_count() {
    let pair = pair().await;
    // The grants and renewals that must be confirmed get a wait a loaded
    // machine meets; the ones that must not, with the replica stopped, a
    // short one.
    let sure = acked(&pair.primary().url(), Duration::from_secs(2)).await;
    let backend = acked(&pair.primary().url(), Duration::from_millis(300)).await;
    let ttl = Duration::from_secs(5);
    let (sem, rw, multi, lead) = (
        LockToken::generate().unwrap(),
        LockToken::generate().unwrap(),
        LockToken::generate().unwrap(),
        LockToken::generate().unwrap(),
    );
    let keys = ["{acct}:1", "{acct}:2"];
    let granted = |o: AcquireOutcome| assert!(matches!(o, AcquireOutcome::Acquired(_)), "{o:?}");
    granted(
        sure.acquire_permits("s", &sem, PermitRequest::new(2, 1), ttl)
            .await
            .unwrap(),
    );
    granted(sure.try_acquire_rw("rw", RwMode::Write, false, &rw, ttl).await.unwrap());
    granted(sure.try_acquire_all(&keys, &multi, ttl).await.unwrap());
    granted(sure.try_lead("e", &lead, b"a", ttl).await.unwrap());
    assert_eq!(sure.renew_permits("s", &sem, ttl).await.unwrap(), RenewOutcome::Renewed);
    assert_eq!(sure.renew_rw("rw", &rw, ttl).await.unwrap(), RenewOutcome::Renewed);
    assert_eq!(sure.renew_all(&keys, &multi, ttl).await.unwrap(), RenewOutcome::Renewed);
    assert_eq!(sure.renew_lead("e", &lead, ttl).await.unwrap(), RenewOutcome::Renewed);

    pair.replica().pause().expect("SIGSTOP the replica");
    let unknown = |r: lock_core::Result<RenewOutcome>, what: &str| match r {
        Err(e) => assert!(e.is_outcome_unknown(), "{what}: {e}"),
        Ok(o) => panic!("{what}: an unacknowledged renewal counted: {o:?}"),
    };
    unknown(backend.renew_permits("s", &sem, ttl).await, "permits");
    unknown(backend.renew_rw("rw", &rw, ttl).await, "rw");
    unknown(backend.renew_all(&keys, &multi, ttl).await, "multi");
    unknown(backend.renew_lead("e", &lead, ttl).await, "leader");

    // Released (no WAIT on a release), then granted again to others: each
    // grant is given back and fails (the default `ReleaseAndFail`).
    assert_eq!(
        backend.release_permits("s", &sem).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(backend.release_rw("rw", &rw).await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(
        backend.release_all(&keys, &multi).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(backend.resign("e", &lead).await.unwrap(), ReleaseOutcome::Released);
    let other = LockToken::generate().unwrap();
    let refused = |r: lock_core::Result<AcquireOutcome>, what: &str| match r {
        Err(e) => assert!(!e.is_outcome_unknown(), "{what}: given back: {e}"),
        Ok(o) => panic!("{what}: an unacknowledged grant counted: {o:?}"),
    };
    refused(
        backend
            .acquire_permits("s", &other, PermitRequest::new(2, 1), ttl)
            .await,
        "permits",
    );
    refused(
        backend.try_acquire_rw("rw", RwMode::Write, false, &other, ttl).await,
        "rw",
    );
    refused(backend.try_acquire_all(&keys, &other, ttl).await, "multi");
    refused(backend.try_lead("e", &other, b"b", ttl).await, "leader");
    let primary = pair.primary();
    assert_eq!(
        primary.cmd(&["EXISTS", keys[0], keys[1]]).await.unwrap().as_int(),
        Some(0)
    );
    pair.replica().resume().expect("SIGCONT the replica");
}

/// The suites' TTL: the longest of the usual test TTLs, so that a `WAIT`
/// on a loaded machine leaves most of the lease to the timing cases.
const SUITE_TTL: Duration = Duration::from_millis(500);

/// One primary and its replica for the suites.
async fn shared_primary_url() -> String {
    static PAIR: OnceCell<ReplicatedPair> = OnceCell::const_new();
    PAIR.get_or_init(pair).await.primary().url()
}

/// A client of the shared primary whose grants and renewals WAIT.
async fn suite_backend() -> TairBackend {
    acked(&shared_primary_url().await, Duration::from_secs(2)).await
}

/// Every kind's suite with `ReplicaAck`: the grants and renewals WAIT, the
/// kinds' behaviour is the same.
mod suites {
    use super::*;

    mod semaphore {
        use super::*;
        lock_testkit::semaphore_conformance!(real, async {
            SemaphoreSuite::new(suite_backend)
                .reserved_prefixes(["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX])
                .ttl(SUITE_TTL)
        });
    }

    mod multi {
        use super::*;
        lock_testkit::multi_conformance!(real, async {
            MultiSuite::new(suite_backend)
                .reserved_prefixes(["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX])
                .ttl(SUITE_TTL)
        });
    }

    mod rw {
        use super::*;
        lock_testkit::rw_conformance!(real, async {
            RwSuite::new(suite_backend)
                .reserved_prefixes(["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX])
                .ttl(SUITE_TTL)
        });
    }

    mod election {
        use super::*;
        lock_testkit::election_conformance!(real, async {
            ElectionSuite::new(suite_backend)
                .reserved_prefixes(["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX])
                .ttl(SUITE_TTL)
        });
    }
}
