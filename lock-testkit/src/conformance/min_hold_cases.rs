//! Minimum-hold cases ([`lock_core::LockOptions::min_hold`]): a release
//! before the hold is over leaves the key held (by its own token) until
//! then, whichever way the lease ends (`release`, `with_lock`, the guard's
//! drop); a release after it deletes the key at once.

use std::time::Duration;

use lock_core::ReleaseOutcome;
use lock_core::{LockManager, LossReason};
use tokio::time::Instant;

use super::LockSuite;

/// The minimum hold of the cases: two base TTLs (so it outlasts one lease
/// that nobody renews).
fn hold(s: &LockSuite) -> Duration {
    s.ttl * 2
}

/// Waits (bounded) until `other` takes `key`; the grant comes no earlier
/// than `not_before`.
async fn taken_after(s: &LockSuite, other: &LockManager, key: &str, not_before: Instant) {
    let deadline = not_before + s.ttl * 20 + Duration::from_secs(2);
    loop {
        if let Some(g) = other.try_lock(key).await.expect("try_lock") {
            let at = Instant::now();
            assert!(
                at >= not_before,
                "taken {:?} before the minimum hold ended",
                not_before - at
            );
            assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the key was never freed after its minimum hold"
        );
        tokio::time::sleep(s.ttl / 8).await;
    }
}

/// An early `release` answers `Released` and ends the lease for its
/// handles, but the key stays held until the minimum hold has passed.
pub async fn early_release_keeps_the_key_until_the_minimum_hold(s: &LockSuite) {
    let key = s.key("min-hold-release");
    let a = s.manager(s.options().min_hold(hold(s))).await;
    let other = s.manager(s.options()).await;
    let g = a.lock(&key).await.expect("lock");
    let (until, handle) = (g.acquired_at() + hold(s), g.handle());
    assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
    assert!(handle.is_lost(), "the lease ended for its handles");
    assert_eq!(handle.lost().await, LossReason::Released);
    assert!(
        other.try_lock(&key).await.expect("try_lock").is_none(),
        "freed before the minimum hold"
    );
    taken_after(s, &other, &key, until).await;
}

/// `with_lock` whose body returns at once: the key stays held until the
/// minimum hold has passed; the call returns at once with the output.
pub async fn with_lock_keeps_the_key_until_the_minimum_hold(s: &LockSuite) {
    let key = s.key("min-hold-with-lock");
    let a = s.manager(s.options().min_hold(hold(s))).await;
    let other = s.manager(s.options()).await;
    let started = Instant::now();
    let out = a.with_lock(&key, |_| async { 7 }).await.expect("with_lock");
    assert_eq!(out, 7);
    assert!(
        other.try_lock(&key).await.expect("try_lock").is_none(),
        "freed before the minimum hold"
    );
    taken_after(s, &other, &key, started + hold(s)).await;
}

/// A dropped guard's background release honours the minimum hold too.
pub async fn dropped_guard_keeps_the_key_until_the_minimum_hold(s: &LockSuite) {
    let key = s.key("min-hold-drop");
    let a = s.manager(s.options().min_hold(hold(s))).await;
    let other = s.manager(s.options()).await;
    let g = a.lock(&key).await.expect("lock");
    let until = g.acquired_at() + hold(s);
    drop(g);
    tokio::time::sleep(s.ttl / 8).await; // the background call
    assert!(
        other.try_lock(&key).await.expect("try_lock").is_none(),
        "freed before the minimum hold"
    );
    taken_after(s, &other, &key, until).await;
}

/// A release once the minimum hold is over deletes the key at once.
pub async fn release_after_the_minimum_hold_frees_the_key(s: &LockSuite) {
    let key = s.key("min-hold-after");
    let a = s.manager(s.options().min_hold(s.ttl / 2)).await;
    let other = s.manager(s.options()).await;
    let g = a.lock(&key).await.expect("lock");
    tokio::time::sleep(s.ttl).await; // renewed meanwhile
    assert!(!g.is_lost());
    assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
    let taken = other.try_lock(&key).await.expect("try_lock").expect("freed at once");
    assert_eq!(taken.release().await.expect("release"), ReleaseOutcome::Released);
}
