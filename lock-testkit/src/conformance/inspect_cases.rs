//! Inspect cases ([`lock_core::LockManager::inspect`]): what it reports of
//! free and held keys, and that it is a read: the fencing counter, a fair
//! queue and a waiter's wait are what they would have been without it.
//! A backend that cannot inspect must say so with `Unsupported`.

use std::time::Duration;

use lock_core::ReleaseOutcome;
use lock_core::{Error, Inspection, LockManager};
use tokio::time::Instant;

use super::LockSuite;
use super::fair_cases::{counted, fair};

/// `inspect`, or `None` after checking that an `Unsupported` refusal says
/// why (the case then ends).
async fn inspect(m: &LockManager, key: &str) -> Option<Inspection> {
    match m.inspect(key).await {
        Ok(seen) => Some(seen),
        Err(Error::Unsupported { what, .. }) => {
            assert!(!what.is_empty(), "an Unsupported inspect must give its reason");
            None
        }
        Err(e) => panic!("inspect failed: {e:?}"),
    }
}

/// A key nobody took is free; a held key reports its holder's fencing
/// token and a remaining lease no longer than the TTL (plus etcd's whole
/// second); a released key is free again. (Every lease of these cases is
/// renewed: a loaded machine must not let one expire before its release.)
pub async fn inspect_reports_free_and_held(s: &LockSuite) {
    let key = s.key("inspect-held");
    let m = s.manager(s.options()).await;
    let Some(free) = inspect(&m, &key).await else { return };
    assert!(!free.is_held(), "a key nobody took: {free:?}");
    assert_eq!(
        (free.info.remaining, free.info.fencing_token, free.expires_by),
        (None, None, None)
    );
    let g = m.lock(&key).await.expect("lock");
    let seen = inspect(&m, &key).await.expect("inspect answered before");
    assert!(seen.is_held(), "a held key: {seen:?}");
    assert_eq!(seen.info.fencing_token, g.fencing_token(), "the holder's fencing token");
    if let Some(left) = seen.info.remaining {
        assert!(
            left <= s.ttl + Duration::from_secs(1),
            "remaining {left:?}, ttl {:?}",
            s.ttl
        );
        let by = seen.expires_by.expect("a bound when the remaining lease is known");
        assert!(by >= seen.received_at + left, "{seen:?}");
    }
    assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
    let after = inspect(&m, &key).await.expect("inspect answered before");
    assert!(!after.is_held(), "released: {after:?}");
}

/// Inspecting a free key draws no fencing token: the holder after the
/// inspections gets a token above the one before, and inspecting while it
/// holds reports its own token every time (no grant in between).
pub async fn inspect_leaves_the_fencing_counter_alone(s: &LockSuite) {
    let key = s.key("inspect-fence");
    let m = s.manager(s.options()).await;
    let Some(_) = inspect(&m, &key).await else { return };
    let g = m.lock(&key).await.expect("lock");
    let before = g.fencing_token();
    assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
    for _ in 0..5 {
        let seen = inspect(&m, &key).await.expect("inspect");
        assert!(!seen.is_held(), "an inspection took the key: {seen:?}");
    }
    let g = m.lock(&key).await.expect("lock again");
    let after = g.fencing_token();
    assert_eq!(before.is_some(), after.is_some());
    if let (Some(before), Some(after)) = (before, after) {
        assert!(after > before, "fencing tokens {before:?} then {after:?}");
    }
    for _ in 0..5 {
        let seen = inspect(&m, &key).await.expect("inspect");
        assert_eq!(seen.info.fencing_token, after, "inspect while held: {seen:?}");
    }
    assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
}

/// Inspecting a free key never makes a `try_lock` beside it fail, and a
/// waiter gets a released key while inspections run.
pub async fn inspect_does_not_delay_a_waiter(s: &LockSuite) {
    let key = s.key("inspect-waiter");
    let m = s.manager(s.options()).await;
    let Some(_) = inspect(&m, &key).await else { return };
    let taker = s.manager(s.options()).await;
    for round in 0..10 {
        let (seen, taken) = tokio::join!(m.inspect(&key), taker.try_lock(&key));
        let taken = taken
            .expect("try_lock")
            .unwrap_or_else(|| panic!("round {round}: an inspection held the key"));
        seen.expect("inspect");
        assert_eq!(taken.release().await.expect("release"), ReleaseOutcome::Released);
    }
    let holder = m.lock(&key).await.expect("holder");
    let waiter = s.manager(s.options().acquire_timeout(s.ttl * 20)).await;
    let k = key.clone();
    let waiting = tokio::spawn(async move { waiter.lock(&k).await });
    tokio::time::sleep(s.ttl / 4).await;
    assert_eq!(holder.release().await.expect("release"), ReleaseOutcome::Released);
    let deadline = Instant::now() + s.ttl * 20;
    while !waiting.is_finished() && Instant::now() < deadline {
        m.inspect(&key).await.expect("inspect");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let g = waiting
        .await
        .expect("waiter task")
        .expect("the waiter gets the released key");
    assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
}

/// On a backend with a fair queue, inspecting never takes the head's turn:
/// the queued waiter gets the key once the holder releases, and an
/// inspection then reports the waiter's own fencing token.
pub async fn inspect_leaves_the_fair_queue_alone(s: &LockSuite) {
    let key = s.key("inspect-fair");
    let m = s.manager(s.options()).await;
    if !m.backend().capabilities().fair_queue {
        return;
    }
    let Some(_) = inspect(&m, &key).await else { return };
    let claim = s.ttl * 10;
    let holder = s.manager(fair(s.options(), claim)).await;
    let g = holder.lock(&key).await.expect("holder");
    let (waiter, counter) = counted(s, fair(s.options().acquire_timeout(s.ttl * 40), claim)).await;
    let k = key.clone();
    let waiting = tokio::spawn(async move { waiter.lock(&k).await });
    counter.answered_at_least(1).await; // queued
    for _ in 0..3 {
        assert!(m.inspect(&key).await.expect("inspect").is_held());
    }
    assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
    let deadline = Instant::now() + s.ttl * 40;
    while !waiting.is_finished() && Instant::now() < deadline {
        m.inspect(&key).await.expect("inspect");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let won = waiting
        .await
        .expect("waiter task")
        .expect("the queued waiter gets the key");
    let seen = m.inspect(&key).await.expect("inspect");
    assert_eq!(
        seen.info.fencing_token,
        won.fencing_token(),
        "held by the queued waiter: {seen:?}"
    );
    assert!(seen.is_held());
    assert_eq!(won.release().await.expect("release"), ReleaseOutcome::Released);
}
