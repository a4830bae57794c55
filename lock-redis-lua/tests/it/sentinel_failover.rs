//! Following a failover through Redis Sentinel: the primary is killed (or
//! paused past `down-after-milliseconds`), the sentinels promote a replica,
//! and the backend finds the new primary by itself. A lock granted with
//! replica acknowledgement before the failover is still its holder's after
//! it; new grants happen on the new primary; a demoted primary is never
//! written to.

use std::sync::Arc;
use std::time::Duration;

use lock_core::AcquireOutcome;
use lock_core::{LockBackend, LockToken, Replication};
use lock_core::{ReleaseOutcome, RenewOutcome};
use lock_redis_lua::RedisLuaBackend;
use lock_testkit::server::{RedisServer, SentinelGroup};
use tokio::time::Instant;

const FAILOVER: Duration = Duration::from_secs(30);
/// Long enough to outlive any failover here: the lock must survive by being
/// on the new primary, not by being re-granted.
const TTL: Duration = Duration::from_secs(120);

fn token() -> LockToken {
    LockToken::generate().expect("token")
}

async fn connect(group: &SentinelGroup) -> RedisLuaBackend {
    let url = format!(
        "{}?replica_ack=1&replica_ack_timeout=2s&response_timeout=500ms",
        group.url("redis+sentinel")
    );
    RedisLuaBackend::connect(&url).await.expect("connect through Sentinel")
}

/// Tries `key` until a grant (bounded: errors are expected while the
/// sentinels still name the dead primary); returns when it came.
async fn first_grant(backend: &RedisLuaBackend, key: &str, token: &LockToken) -> Instant {
    let mut last = None;
    for attempt in 0..600 {
        // A key per attempt: an attempt whose outcome is unknown may hold its key.
        let key = format!("{key}-{attempt}");
        match backend.try_acquire(&key, token, TTL).await {
            Ok(AcquireOutcome::Acquired(lease)) => {
                assert!(
                    matches!(lease.replication, Replication::Confirmed { .. }),
                    "{:?}",
                    lease.replication
                );
                return Instant::now();
            }
            Ok(other) => panic!("{key} is free, got {other:?}"),
            Err(e) => {
                eprintln!("grant attempt {attempt} after the failover: {e}");
                last = Some(e)
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no grant on the new primary; last error: {last:?}");
}

/// The lock's holder still holds it after the failover, and nobody else
/// is granted it; the new primary has it.
async fn still_held(
    group: &SentinelGroup,
    holder: &RedisLuaBackend,
    other: &RedisLuaBackend,
    mine: &LockToken,
    new_port: u16,
) {
    match other
        .try_acquire("held", &token(), TTL)
        .await
        .expect("try the held key")
    {
        AcquireOutcome::Held { .. } => {}
        AcquireOutcome::Acquired(_) => panic!("the lock granted before the failover was granted again"),
        other => panic!("unexpected {other:?}"),
    }
    // A connection the failover closed (the sentinels disconnect a demoted
    // primary's clients) fails its next call, outcome unknown, as any
    // dropped connection does; the call after it reaches the new primary.
    let renewed = match holder.renew("held", mine, TTL).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("first renew after the failover: {e}");
            holder.renew("held", mine, TTL).await.expect("renew on the new primary")
        }
    };
    assert_eq!(renewed, RenewOutcome::Renewed);
    let primary = group
        .nodes()
        .iter()
        .find(|n| n.port() == new_port)
        .expect("the new primary");
    let value = primary.cmd(&["GET", "held"]).await.expect("GET on the new primary");
    assert_eq!(value.as_str(), Some(mine.to_hex().as_str()));
    let released = match holder.release("held", mine).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("first release after the failover: {e}");
            holder.release("held", mine).await.expect("release")
        }
    };
    assert_eq!(released, ReleaseOutcome::Released);
    let after = token();
    assert!(matches!(
        other
            .try_acquire("held", &after, TTL)
            .await
            .expect("acquire after the release"),
        AcquireOutcome::Acquired(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_acked_lock_survives_the_primary_killed() {
    let group = SentinelGroup::start(RedisServer::builder())
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
    let granted = first_grant(&other, "fresh", &token()).await.duration_since(killed);
    eprintln!(
        "failover timeline (primary killed at 0): promotion seen by every sentinel after {promoted:?}, first grant \
         on the new primary (port {}) after {granted:?}",
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
    let group = SentinelGroup::start(RedisServer::builder())
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
    let granted = first_grant(&other, "fresh", &token()).await.duration_since(paused);
    eprintln!(
        "failover timeline (primary paused at 0): promotion seen after {promoted:?}, first grant on the new \
         primary (port {}) after {granted:?}",
        new.port()
    );
    group
        .wait_until_settled(FAILOVER)
        .await
        .expect("the old primary rejoins as a replica");
    assert_eq!(old.info("replication").await.expect("INFO")["role"], "slave");
    still_held(&group, &holder, &other, &mine, new.port()).await;
    // Every grant since went to the new primary (a replica answers a write
    // with READONLY, and the old primary is one now).
    for i in 0..20 {
        let key = format!("after-{i}");
        let t = token();
        let AcquireOutcome::Acquired(_) = holder.try_acquire(&key, &t, TTL).await.expect("acquire") else {
            panic!("{key} is free")
        };
        let value = new.cmd(&["GET", key.as_str()]).await.expect("GET on the new primary");
        assert_eq!(value.as_str(), Some(t.to_hex().as_str()));
    }
}

/// A primary paused past the failover and then resumed still answers as a
/// primary until the sentinels demote it, which Sentinel does only some
/// seconds after it sees it back (four hello periods, 8 s): a client that
/// had it as its primary must not wait for that demotion (every write
/// there would fail its replica acknowledgement: no replica follows it any
/// more). It leaves on the sentinels' `+switch-master`, so that its next
/// grant comes from the new primary while the old one is still a primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaves_a_returned_primary_before_the_sentinels_demote_it() {
    let group = SentinelGroup::start(RedisServer::builder())
        .await
        .expect("start a Sentinel group");
    let backend = connect(&group).await;
    // Its shared and write + WAIT connections are open to the primary.
    let t = token();
    let AcquireOutcome::Acquired(_) = backend.try_acquire("warm", &t, TTL).await.expect("acquire") else {
        panic!("free key")
    };
    let old = group.primary().await.expect("the primary");
    old.pause().expect("pause the primary");
    let new = group
        .wait_for_failover(old.port(), FAILOVER)
        .await
        .expect("a promotion");
    old.resume().expect("resume the old primary");
    let granted = first_grant(&backend, "after-resume", &token()).await;
    let role = old.info("replication").await.expect("INFO on the old primary");
    assert_eq!(
        role["role"], "master",
        "the first grant came only after the sentinels demoted the old primary"
    );
    eprintln!(
        "first grant on port {} {:?} after the old primary's resume",
        new.port(),
        granted.elapsed()
    );
}

/// `SENTINEL` calls on the sentinels, and the primary's calls of every
/// command but those the sentinels and replicas send it on their own
/// (`PING`, `INFO`, `PUBLISH` of their hellos, `REPLCONF`, `CLIENT`).
async fn calls(group: &SentinelGroup, primary: &lock_testkit::server::RedisServer) -> (u64, u64) {
    let mut sentinel = 0;
    for s in group.sentinels() {
        sentinel += s.command_calls("sentinel").await.expect("sentinel stats");
    }
    let stats = primary.info("commandstats").await.expect("INFO commandstats");
    let own = ["ping", "info", "publish", "replconf", "client"];
    let processed = stats
        .iter()
        .filter(|(name, _)| !own.iter().any(|o| name.as_str() == format!("cmdstat_{o}")))
        .filter_map(|(_, v)| v.split(',').find_map(|kv| kv.strip_prefix("calls=")))
        .filter_map(|n| n.parse::<u64>().ok())
        .sum();
    (sentinel, processed)
}

/// The hot path through Sentinel is the standalone one: no sentinel is
/// asked anything per operation, and the primary sees as many commands per
/// lock and unlock as from a backend connected to it directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_sentinel_round_trip_per_operation() {
    let group = SentinelGroup::start(RedisServer::builder())
        .await
        .expect("start a Sentinel group");
    let primary = group.primary().await.expect("the primary");
    let through = RedisLuaBackend::connect(&group.url("redis+sentinel"))
        .await
        .expect("connect through Sentinel");
    let direct = RedisLuaBackend::connect(&primary.url())
        .await
        .expect("connect directly");
    const N: u64 = 100;
    let mut per_op = Vec::new();
    for backend in [&through, &direct] {
        // The first release loads its script (NOSCRIPT, then EVAL) once per
        // server, whichever backend runs first.
        let t = token();
        backend.try_acquire("warm-up", &t, TTL).await.expect("acquire");
        backend.release("warm-up", &t).await.expect("release");
    }
    for backend in [&through, &direct] {
        let (sentinel_before, before) = calls(&group, primary).await;
        for i in 0..N {
            let t = token();
            let key = format!("hot-{i}");
            let AcquireOutcome::Acquired(_) = backend.try_acquire(&key, &t, TTL).await.expect("acquire") else {
                panic!("{key} is free")
            };
            assert_eq!(
                backend.release(&key, &t).await.expect("release"),
                ReleaseOutcome::Released
            );
        }
        let (sentinel_after, after) = calls(&group, primary).await;
        assert_eq!(
            sentinel_after, sentinel_before,
            "the sentinels were asked during the operations"
        );
        per_op.push(after - before);
    }
    assert_eq!(
        per_op[0], per_op[1],
        "commands on the primary: through Sentinel vs direct"
    );
    eprintln!(
        "primary commands for {N} lock + unlock pairs: {} through Sentinel, {} direct",
        per_op[0], per_op[1]
    );
}

/// Release notifications keep working after a failover (the suite's
/// case: the waiter leaves the replaced primary and
/// subscribes again on the new one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_notifications_follow_the_failover() {
    let group = SentinelGroup::start(RedisServer::builder())
        .await
        .expect("start a Sentinel group");
    let url = format!("{}?response_timeout=500ms", group.url("redis+sentinel"));
    let holder = RedisLuaBackend::connect(&url).await.expect("connect through Sentinel");
    let waiter = RedisLuaBackend::connect(&url).await.expect("connect through Sentinel");
    lock_testkit::conformance::failover::release_notifications_follow_the_failover(
        &group,
        Arc::new(holder),
        Arc::new(waiter),
        |key| format!("verrou:lua:waiting:{{{key}}}"),
        Duration::from_millis(3 * lock_redis_family::wake::STARVING_MS),
    )
    .await;
}
