//! Cases on a Redis Sentinel group whose primary fails over, shared by the
//! Redis backends: each takes the group, two clients built by the caller
//! with the backend's own options, and where that backend's waiter leaves
//! its marker.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{AcquireOutcome, LockBackend, LockToken, ReleaseOutcome};

use crate::server::{RedisServer, SentinelGroup};

/// A lease long enough that only a release ends it during the case.
const TTL: Duration = Duration::from_secs(120);
/// Longest wait for the sentinels to promote a replica.
const FAILOVER: Duration = Duration::from_secs(30);

/// Release notifications keep working after a failover: the waiter's
/// pub/sub connection leaves a primary the sentinels replaced (here one
/// still paused, whose connections stay open) and subscribes again on the
/// new primary, where the release publishes. `holder` and `waiter` are two
/// clients of the group; `marker` names the key a waiter of a lock key
/// leaves on the primary once it listens; `settle` is how long a waiter
/// waits before a release may wake it (the backend's starvation bound).
///
/// # Cancel safety
///
/// Not cancel safe: dropped while the old primary is paused, it leaves it
/// paused.
pub async fn release_notifications_follow_the_failover(
    group: &SentinelGroup,
    holder: Arc<dyn LockBackend>,
    waiter: Arc<dyn LockBackend>,
    marker: impl Fn(&str) -> String,
    settle: Duration,
) {
    let old = group.primary().await.expect("the primary");
    let wakes = |primary, name| release_wakes(&holder, &waiter, primary, name, &marker, settle);
    assert!(
        wakes(old, "before").await,
        "a release wakes the waiter before the failover"
    );
    old.pause().expect("pause the primary");
    let new = group
        .wait_for_failover(old.port(), FAILOVER)
        .await
        .expect("a promotion");
    let woken = wakes(new, "after").await;
    old.resume().expect("resume the old primary");
    assert!(
        woken,
        "a release on the new primary wakes the waiter, not its 20 s timer"
    );
}

/// Holds a fresh key in `holder` (retried, bounded: the first calls after a
/// failover may fail), lets `waiter` wait for it with a 20 s timer,
/// releases it once the waiter registered on `primary` and has waited
/// `settle`, and tells whether the release woke the waiter (within 10 s:
/// far sooner than its timer).
async fn release_wakes(
    holder: &Arc<dyn LockBackend>,
    waiter: &Arc<dyn LockBackend>,
    primary: &RedisServer,
    name: &str,
    marker: &impl Fn(&str) -> String,
    settle: Duration,
) -> bool {
    let mine = LockToken::generate().expect("token");
    let mut held = None;
    for attempt in 0..200 {
        // A key per attempt: an attempt whose outcome is unknown may hold its key.
        let key = format!("{name}-{attempt}");
        match holder.try_acquire(&key, &mine, TTL).await {
            Ok(AcquireOutcome::Acquired(_)) => {
                held = Some(key);
                break;
            }
            Ok(other) => panic!("{key} is free, got {other:?}"),
            Err(e) => eprintln!("acquire attempt {attempt}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let key = held.expect("a grant");
    let waiting = waiter.clone();
    let owned = key.clone();
    let wait = tokio::spawn(async move { waiting.wait_for_release(&owned, Duration::from_secs(20)).await });
    registered(primary, &marker(&key)).await;
    tokio::time::sleep(settle).await;
    let released = match holder.release(&key, &mine).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("first release: {e}");
            holder.release(&key, &mine).await.expect("release")
        }
    };
    assert_eq!(released, ReleaseOutcome::Released);
    tokio::time::timeout(Duration::from_secs(10), wait).await.is_ok()
}

/// Waits (bounded) until `server` has the key `marker`: the waiter
/// subscribed and registered.
async fn registered(server: &RedisServer, marker: &str) {
    for _ in 0..600 {
        if server.cmd(&["EXISTS", marker]).await.ok().and_then(|v| v.as_int()) == Some(1) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the waiter never registered on port {}", server.port());
}
