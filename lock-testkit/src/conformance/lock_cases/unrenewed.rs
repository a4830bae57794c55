//! Lock cases: each lock's TTL is its own, whatever other locks of the same
//! client do (a backend that shares one server-side lease among locks must
//! not let one holder's renewals keep another's lock alive).

use std::time::Duration;

use lock_core::LockToken;
use lock_core::{AcquireOutcome, ReleaseOutcome};
use tokio::time::Instant;

use crate::conformance::LockSuite;

/// `ttl` rounded up to whole seconds (what a backend with whole-second
/// server TTLs honours).
fn whole_secs_up(ttl: Duration) -> Duration {
    let secs = ttl.as_secs().saturating_add(u64::from(ttl.subsec_nanos() > 0));
    Duration::from_secs(secs)
}

/// An unrenewed lease expires within its TTL while another lease of the
/// same TTL is renewed: a lock taken with manual renewal and never
/// extended (its guard lost, not dropped), and a raw lock never renewed,
/// both taken by the client that keeps renewing a third lock of the same
/// TTL, are free for another client within their TTL rounded up to whole
/// seconds (plus one TTL, at least a second, and the suite's slack for
/// the server's expiry sweep and scheduling), while the
/// renewed lock stays held.
pub async fn unrenewed_lease_expires_while_another_is_renewed(s: &LockSuite) {
    let (busy_key, idle_key, raw_key) = (s.key("unrenewed-busy"), s.key("unrenewed-idle"), s.key("unrenewed-raw"));
    let holder = s.manager(s.options()).await;
    let busy = holder.lock(&busy_key).await.expect("lock the renewed key");
    let idle = holder
        .lock_opts(&idle_key, &s.manual())
        .await
        .expect("lock the unrenewed key");
    let raw_token = LockToken::generate().expect("token");
    let raw = holder
        .backend()
        .try_acquire(&raw_key, &raw_token, s.ttl)
        .await
        .expect("raw acquire");
    assert!(matches!(raw, AcquireOutcome::Acquired(_)), "raw acquire: {raw:?}");

    let other = s.manager(s.manual()).await;
    if !holder.backend().capabilities().lease_expires {
        // The lock lives with its session: past the TTL both are still
        // held; their releases free them.
        tokio::time::sleep(s.ttl * 2).await;
        assert!(idle.is_lost(), "an unrenewed guard is lost after its TTL");
        for key in [&idle_key, &raw_key] {
            assert!(other.try_lock(key).await.expect("try_lock").is_none(), "{key} expired");
        }
        drop(idle);
        assert_eq!(
            holder.backend().release(&raw_key, &raw_token).await.expect("release"),
            ReleaseOutcome::Released
        );
        for key in [&idle_key, &raw_key] {
            let g = other.lock(key).await.expect("free once released");
            assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
        }
        assert!(!busy.is_lost(), "the renewed lock stays held");
        assert_eq!(busy.release().await.expect("release"), ReleaseOutcome::Released);
        return;
    }
    let bound = whole_secs_up(s.ttl) + s.ttl.max(Duration::from_secs(1)) + s.slack;
    let deadline = Instant::now() + bound;
    let mut taken = Vec::new();
    for key in [&idle_key, &raw_key] {
        let guard = loop {
            if let Some(g) = other.try_lock(key).await.expect("try_lock") {
                break g;
            }
            assert!(
                Instant::now() < deadline,
                "{key}: nobody renews it, yet it is still held {bound:?} after it was taken, \
                 while another lock of the same TTL is renewed"
            );
            tokio::time::sleep(s.ttl / 8).await;
        };
        taken.push(guard);
    }
    assert!(idle.is_lost(), "an unrenewed guard is lost after its TTL");
    assert!(!busy.is_lost(), "the renewed lock stays held");
    assert!(
        other.try_lock(&busy_key).await.expect("try_lock").is_none(),
        "the renewed lock stays held"
    );
    drop(idle);
    for g in taken {
        assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
    }
    assert_eq!(busy.release().await.expect("release"), ReleaseOutcome::Released);
}
