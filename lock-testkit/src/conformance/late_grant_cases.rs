//! Late grants of released tokens, on backends whose clean-up release can
//! reach the server before the grant it cleans up (the Redis family, across
//! a client reconnect): a release that found nothing of its token's makes a
//! later grant with that token fail, as the semaphore's
//! [`super::semaphore_cases::release_before_acquire_refuses_the_late_acquire`]
//! checks for permits. Not in the every-backend macros: a backend whose
//! clean-up always follows its grant (one connection, one transaction)
//! needs no record, and may grant such a token. Each case sends the raw
//! clean-up first (the token never granted), then the grant, which must be
//! refused (`Held`, nothing written); then normal grants and releases of
//! new tokens work as before.

use lock_core::raw::{ElectionBackend, MultiLockBackend, RwLockBackend};

use lock_core::{AcquireOutcome, ReleaseOutcome};
use lock_core::{LockToken, RwMode};

use super::{ElectionSuite, MultiSuite, RwSuite};

/// The grants' TTL: long enough that nothing a case grants expires before
/// the case releases it, whatever the suite's short TTL and the topology's
/// delays (under replica acknowledgement a grant's WAIT can take most of a
/// short TTL on a loaded machine, and a leader seen expired made the case
/// flaky: `resign` answered `Missing` where it expected `HeldByOther`).
fn held_ttl(suite_ttl: std::time::Duration) -> std::time::Duration {
    suite_ttl.max(std::time::Duration::from_secs(30))
}

fn token() -> LockToken {
    LockToken::generate().expect("token")
}

fn assert_refused(grant: &AcquireOutcome, what: &str) {
    assert!(
        matches!(grant, AcquireOutcome::Held { .. }),
        "{what}: a grant after its own clean-up release must be refused, got {grant:?}"
    );
}

fn assert_granted(grant: &AcquireOutcome, what: &str) {
    assert!(matches!(grant, AcquireOutcome::Acquired(_)), "{what}: {grant:?}");
}

/// A read-write release of a token never granted, then that token's grant
/// (reader, writer, waiting writer): refused, and no intent left behind.
pub async fn rw_grant_after_its_clean_up_is_refused(s: &RwSuite) {
    let name = s.key("late-grant");
    let raw = s.client().await;
    for (mode, waiting) in [(RwMode::Read, false), (RwMode::Write, false), (RwMode::Write, true)] {
        let late = token();
        let what = format!("{mode:?} (waiting: {waiting})");
        assert_eq!(
            raw.release_rw(&name, &late).await.expect("clean-up"),
            ReleaseOutcome::Missing,
            "{what}"
        );
        let grant = raw
            .try_acquire_rw(&name, mode, waiting, &late, held_ttl(s.ttl))
            .await
            .expect("late grant");
        assert_refused(&grant, &what);
    }
    // Nothing was left (no holder, no intent): new tokens are granted,
    // released, and granted again.
    for mode in [RwMode::Read, RwMode::Write] {
        let first = token();
        let grant = raw
            .try_acquire_rw(&name, mode, false, &first, held_ttl(s.ttl))
            .await
            .expect("grant");
        assert_granted(&grant, &format!("{mode:?} of a new token"));
        assert_eq!(
            raw.release_rw(&name, &first).await.expect("release"),
            ReleaseOutcome::Released
        );
        let next = token();
        let grant = raw
            .try_acquire_rw(&name, mode, true, &next, held_ttl(s.ttl))
            .await
            .expect("grant");
        assert_granted(&grant, &format!("{mode:?} of another new token after a release"));
        assert_eq!(
            raw.release_rw(&name, &next).await.expect("release"),
            ReleaseOutcome::Released
        );
    }
}

/// A resignation of a token that never led (none leading, or another
/// leading), then that token's campaign: refused, no leader left.
pub async fn campaign_after_its_clean_up_is_refused(s: &ElectionSuite) {
    let name = s.key("late-grant");
    let raw = s.client().await;
    let late = token();
    assert_eq!(
        raw.resign(&name, &late).await.expect("clean-up"),
        ReleaseOutcome::Missing
    );
    let grant = raw
        .try_lead(&name, &late, b"late", held_ttl(s.ttl))
        .await
        .expect("late campaign");
    assert_refused(&grant, "campaign with no leader");
    assert!(
        raw.leader(&name).await.expect("leader").is_none(),
        "a leader nobody owns"
    );
    // The clean-up while another leads, the late campaign once it resigned.
    let other = token();
    assert_granted(
        &raw.try_lead(&name, &other, b"other", held_ttl(s.ttl))
            .await
            .expect("campaign"),
        "a new token's campaign",
    );
    let late = token();
    assert_eq!(
        raw.resign(&name, &late).await.expect("clean-up"),
        ReleaseOutcome::HeldByOther
    );
    assert_eq!(
        raw.resign(&name, &other).await.expect("resign"),
        ReleaseOutcome::Released
    );
    let grant = raw
        .try_lead(&name, &late, b"late", held_ttl(s.ttl))
        .await
        .expect("late campaign");
    assert_refused(&grant, "campaign after another's resignation");
    assert!(
        raw.leader(&name).await.expect("leader").is_none(),
        "a leader nobody owns"
    );
    let next = token();
    assert_granted(
        &raw.try_lead(&name, &next, b"next", held_ttl(s.ttl))
            .await
            .expect("campaign"),
        "another new token's campaign after a resignation",
    );
    assert_eq!(
        raw.resign(&name, &next).await.expect("resign"),
        ReleaseOutcome::Released
    );
}

/// A multi-key release of a token never granted, then that token's grant
/// of the same set (in either order): refused, the keys left free.
pub async fn multi_grant_after_its_clean_up_is_refused(s: &MultiSuite) {
    let k = s.keys("late-grant", 2);
    let set: Vec<&str> = k.iter().map(String::as_str).collect();
    let reversed: Vec<&str> = set.iter().rev().copied().collect();
    let raw = s.client().await;
    let late = token();
    assert_eq!(
        raw.release_all(&set, &late).await.expect("clean-up"),
        ReleaseOutcome::Missing
    );
    let grant = raw
        .try_acquire_all(&set, &late, held_ttl(s.ttl))
        .await
        .expect("late grant");
    assert_refused(&grant, "multi-key grant");
    let grant = raw
        .try_acquire_all(&reversed, &late, held_ttl(s.ttl))
        .await
        .expect("late grant");
    assert_refused(&grant, "multi-key grant, keys in another order");
    let first = token();
    assert_granted(
        &raw.try_acquire_all(&set, &first, held_ttl(s.ttl)).await.expect("grant"),
        "a new token's grant",
    );
    assert_eq!(
        raw.release_all(&set, &first).await.expect("release"),
        ReleaseOutcome::Released
    );
    let next = token();
    assert_granted(
        &raw.try_acquire_all(&set, &next, held_ttl(s.ttl)).await.expect("grant"),
        "another new token's grant after a release",
    );
    assert_eq!(
        raw.release_all(&set, &next).await.expect("release"),
        ReleaseOutcome::Released
    );
}
