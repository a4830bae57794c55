//! The Tair backend through Redis Sentinel (`tair+sentinel://`): fred finds
//! the primary through the sentinels (checking its `ROLE`), and finds it
//! again after a lost connection or a `READONLY` reply. The conformance
//! suites on one shared group, plain and with replica acknowledgement; and
//! the failover itself, the primary killed or paused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{LockBackend, LockToken, Replication};
use lock_tair::TairBackend;
use lock_testkit::server::SentinelGroup;
use lock_testkit::{ElectionSuite, LockSuite, MultiSuite, RwSuite, SemaphoreSuite, VersionedSuite};
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::common;

/// The shared group's `down-after-milliseconds`: long, so that a loaded
/// machine's slow reply does not fail it over while the suites run.
const DOWN_AFTER: Duration = Duration::from_secs(10);
const FAILOVER: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(120);
const PREFIXES: [&str; 2] = ["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX];

async fn shared_url(params: &str) -> String {
    static GROUP: OnceCell<SentinelGroup> = OnceCell::const_new();
    let group = GROUP
        .get_or_init(|| async {
            SentinelGroup::start_with(common::tair(), DOWN_AFTER)
                .await
                .expect("start a Sentinel group with the Tair module")
        })
        .await;
    format!("{}?response_timeout=500ms{params}", group.url("tair+sentinel"))
}

async fn plain() -> TairBackend {
    TairBackend::connect(&shared_url("&fencing=true").await)
        .await
        .expect("connect through Sentinel")
}

async fn acked() -> TairBackend {
    TairBackend::connect(&shared_url("&replica_ack=1&replica_ack_timeout=2s").await)
        .await
        .expect("connect through Sentinel")
}

macro_rules! every_suite {
    ($backend:ident) => {
        mod lock {
            use super::*;
            fn suite() -> LockSuite {
                LockSuite::new($backend).reserved_prefixes(PREFIXES)
            }
            lock_testkit::lock_conformance!(real, async { suite() });
            mod fair {
                use super::*;
                lock_testkit::fair_conformance!(real, async { suite() });
            }
        }
        mod versioned {
            use super::*;
            lock_testkit::versioned_conformance!(real, async { VersionedSuite::new($backend) });
        }
        mod semaphore {
            use super::*;
            lock_testkit::semaphore_conformance!(real, async {
                SemaphoreSuite::new($backend).reserved_prefixes(PREFIXES)
            });
        }
        mod multi {
            use super::*;
            lock_testkit::multi_conformance!(real, async {
                MultiSuite::new($backend).reserved_prefixes(PREFIXES)
            });
        }
        mod rw {
            use super::*;
            lock_testkit::rw_conformance!(real, async { RwSuite::new($backend).reserved_prefixes(PREFIXES) });
        }
        mod election {
            use super::*;
            lock_testkit::election_conformance!(real, async {
                ElectionSuite::new($backend).reserved_prefixes(PREFIXES)
            });
        }
    };
}

mod through_sentinel {
    use super::*;
    every_suite!(plain);
}

mod through_sentinel_replica_ack {
    use super::*;
    every_suite!(acked);
}

fn token() -> LockToken {
    LockToken::generate().expect("token")
}

async fn connect(group: &SentinelGroup) -> TairBackend {
    let url = format!(
        "{}?replica_ack=1&replica_ack_timeout=2s&response_timeout=500ms",
        group.url("tair+sentinel")
    );
    TairBackend::connect(&url).await.expect("connect through Sentinel")
}

/// Tries `key` until a grant (bounded: errors are expected while the
/// sentinels still name the dead primary); returns when it came.
async fn first_grant(backend: &TairBackend, key: &str) -> Instant {
    let mut last = None;
    for attempt in 0..600 {
        // A key per attempt: an attempt whose outcome is unknown may hold its key.
        let key = format!("{key}-{attempt}");
        match backend.try_acquire(&key, &token(), TTL).await {
            Ok(AcquireOutcome::Acquired(lease)) => {
                assert!(matches!(lease.replication, Replication::Confirmed { .. }), "{lease:?}");
                return Instant::now();
            }
            Ok(other) => panic!("{key} is free, got {other:?}"),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no grant on the new primary; last error: {last:?}");
}

/// Runs `op` again once when it fails: a connection the failover closed
/// fails its next call, outcome unknown, as any dropped connection does.
macro_rules! once_more {
    ($what:literal, $op:expr) => {
        match $op.await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("first {} after the failover: {e}", $what);
                $op.await.expect($what)
            }
        }
    };
}

async fn still_held(group: &SentinelGroup, holder: &TairBackend, other: &TairBackend, mine: &LockToken, new_port: u16) {
    match once_more!("try of the held key", other.try_acquire("held", &token(), TTL)) {
        AcquireOutcome::Held { .. } => {}
        AcquireOutcome::Acquired(_) => panic!("the lock granted before the failover was granted again"),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        once_more!("renew", holder.renew("held", mine, TTL)),
        RenewOutcome::Renewed
    );
    let primary = group
        .nodes()
        .iter()
        .find(|n| n.port() == new_port)
        .expect("the new primary");
    assert_eq!(
        primary.cmd(&["EXISTS", "held"]).await.expect("EXISTS").as_int(),
        Some(1)
    );
    assert_eq!(
        once_more!("release", holder.release("held", mine)),
        ReleaseOutcome::Released
    );
    assert!(matches!(
        other
            .try_acquire("held", &token(), TTL)
            .await
            .expect("acquire after the release"),
        AcquireOutcome::Acquired(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_acked_lock_survives_the_primary_killed() {
    let group = SentinelGroup::start(common::tair())
        .await
        .expect("start a Sentinel group");
    let holder = connect(&group).await;
    let other = connect(&group).await;
    let mine = token();
    let AcquireOutcome::Acquired(lease) = holder.try_acquire("held", &mine, TTL).await.expect("acquire") else {
        panic!("free key")
    };
    assert!(matches!(lease.replication, Replication::Confirmed { replicas } if replicas >= 1));
    let old = group.primary().await.expect("the primary");
    let killed = Instant::now();
    old.kill().expect("kill the primary");
    let new = group
        .wait_for_failover(old.port(), FAILOVER)
        .await
        .expect("a promotion");
    let promoted = killed.elapsed();
    let granted = first_grant(&other, "fresh").await.duration_since(killed);
    eprintln!(
        "tair failover timeline (primary killed at 0): promotion seen after {promoted:?}, first grant on the new \
         primary (port {}) after {granted:?}",
        new.port()
    );
    // The other replica follows the new primary: WAIT can count it again.
    group
        .wait_until_settled(FAILOVER)
        .await
        .expect("the replica follows the new primary");
    still_held(&group, &holder, &other, &mine, new.port()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_primary_is_never_written_to() {
    let group = SentinelGroup::start(common::tair())
        .await
        .expect("start a Sentinel group");
    let holder = connect(&group).await;
    let other = connect(&group).await;
    let mine = token();
    let AcquireOutcome::Acquired(_) = holder.try_acquire("held", &mine, TTL).await.expect("acquire") else {
        panic!("free key")
    };
    let old = group.primary().await.expect("the primary");
    let paused = Instant::now();
    old.pause().expect("pause the primary");
    let new = group
        .wait_for_failover(old.port(), FAILOVER)
        .await
        .expect("a promotion");
    let promoted = paused.elapsed();
    old.resume().expect("resume the old primary");
    let granted = first_grant(&other, "fresh").await.duration_since(paused);
    eprintln!(
        "tair failover timeline (primary paused at 0): promotion seen after {promoted:?}, first grant on the new \
         primary (port {}) after {granted:?}",
        new.port()
    );
    group
        .wait_until_settled(FAILOVER)
        .await
        .expect("the old primary rejoins as a replica");
    assert_eq!(old.info("replication").await.expect("INFO")["role"], "slave");
    still_held(&group, &holder, &other, &mine, new.port()).await;
    // Every grant since went to the new primary (the old one, a replica,
    // would answer READONLY).
    for i in 0..20 {
        let key = format!("after-{i}");
        let AcquireOutcome::Acquired(_) = once_more!("acquire", holder.try_acquire(&key, &token(), TTL)) else {
            panic!("{key} is free")
        };
        assert_eq!(
            new.cmd(&["EXISTS", key.as_str()]).await.expect("EXISTS").as_int(),
            Some(1)
        );
    }
}

/// A primary paused past the failover and then resumed still answers as a
/// primary until the sentinels demote it, seconds later (Sentinel waits
/// four hello periods, 8 s, before it reconfigures a returned primary): a
/// backend that had it as its primary leaves it on the sentinels'
/// `+switch-master`, so that its next grant comes from the new primary
/// while the old one is still a primary (every write there would fail its
/// replica acknowledgement).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaves_a_returned_primary_before_the_sentinels_demote_it() {
    let group = SentinelGroup::start(common::tair())
        .await
        .expect("start a Sentinel group");
    let backend = connect(&group).await;
    // Its command and write + WAIT connections are open to the primary.
    let AcquireOutcome::Acquired(_) = backend.try_acquire("warm", &token(), TTL).await.expect("acquire") else {
        panic!("free key")
    };
    let old = group.primary().await.expect("the primary");
    old.pause().expect("pause the primary");
    let new = group
        .wait_for_failover(old.port(), FAILOVER)
        .await
        .expect("a promotion");
    old.resume().expect("resume the old primary");
    let resumed = Instant::now();
    first_grant(&backend, "after-resume").await;
    let role = old.info("replication").await.expect("INFO on the old primary");
    assert_eq!(
        role["role"], "master",
        "the first grant came only after the sentinels demoted the old primary"
    );
    eprintln!(
        "first grant on port {} {:?} after the old primary's resume",
        new.port(),
        resumed.elapsed()
    );
}

/// Release notifications keep working after a failover (the suite's
/// case: the waiter leaves the replaced primary on `+switch-master` and
/// subscribes again on the new one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_notifications_follow_the_failover() {
    let group = SentinelGroup::start(common::tair())
        .await
        .expect("start a Sentinel group");
    let url = format!("{}?response_timeout=500ms", group.url("tair+sentinel"));
    let holder = TairBackend::connect(&url).await.expect("connect through Sentinel");
    let waiter = TairBackend::connect(&url).await.expect("connect through Sentinel");
    lock_testkit::conformance::failover::release_notifications_follow_the_failover(
        &group,
        Arc::new(holder),
        Arc::new(waiter),
        |key| format!("verrou:tair:waiting:{key}"),
        Duration::from_millis(3 * lock_redis_family::wake::STARVING_MS),
    )
    .await;
}
