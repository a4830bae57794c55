//! Lock cases: the lease over time (expiry, renewal, `extend`, the loss
//! signal, `with_lock`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lock_core::{Error, LockManager, LockToken, LossReason};

use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use tokio::time::Instant;

use crate::conformance::LockSuite;
use crate::faulty::{Fault, FaultyBackend};

/// Without renewal the lease expires and another client takes the key.
pub async fn expiry_then_reacquire(s: &LockSuite) {
    let key = s.key("expiry");
    let a = s.manager(s.manual()).await;
    let b = s.manager(s.manual()).await;
    let g = a.lock(&key).await.expect("lock");
    assert!(!g.is_lost());
    tokio::time::sleep(s.ttl * 2).await;
    assert!(
        g.is_lost(),
        "the local deadline passed, so the guard must say it is lost"
    );
    if !lives_with_session(s, &b, &key).await {
        // The lock lives with its session: held past its TTL, free once
        // the lost guard is dropped (its release).
        drop(g);
        let g2 = b.lock(&key).await.expect("free once the guard is dropped");
        assert_eq!(g2.release().await.expect("release"), ReleaseOutcome::Released);
        return;
    }
    let g2 = b
        .try_lock(&key)
        .await
        .expect("try_lock")
        .expect("expired key is acquired");
    drop(g);
    assert_eq!(g2.release().await.expect("release"), ReleaseOutcome::Released);
}

/// The design notes' scenario: holder 1 stalls past its TTL, holder 2
/// acquires, holder 1's release and renew report not-held, holder 2 intact.
pub async fn stale_holder_cannot_release_or_renew(s: &LockSuite) {
    let key = s.key("stale");
    let a = s.manager(s.manual()).await;
    let b = s.manager(s.manual().ttl(s.ttl * 4)).await;
    let stale = a.lock(&key).await.expect("lock 1");
    tokio::time::sleep(s.ttl * 2).await; // holder 1 "stalls" past its TTL
    if !lives_with_session(s, &b, &key).await {
        // Nothing expires: the stalled holder still holds the key, and
        // its release frees it.
        assert_eq!(stale.release().await.expect("release"), ReleaseOutcome::Released);
        let fresh = b.lock(&key).await.expect("lock 2");
        assert_eq!(fresh.release().await.expect("release"), ReleaseOutcome::Released);
        return;
    }
    let fresh = b.lock(&key).await.expect("lock 2");
    let err = stale.extend(s.ttl).await.expect_err("a stale holder must not renew");
    assert!(matches!(err, Error::NotHeld { .. }), "got {err:?}");
    // Even bypassing the guard's local check, the backend refuses the token.
    let backend = s.client().await;
    assert_eq!(
        backend.renew(&key, stale.token(), s.ttl).await.expect("renew"),
        RenewOutcome::HeldByOther
    );
    assert_eq!(
        stale.release().await.expect("stale release"),
        ReleaseOutcome::HeldByOther
    );
    assert!(!fresh.is_lost());
    fresh.extend(s.ttl * 4).await.expect("holder 2 still owns the key");
    let c = s.manager(s.manual()).await;
    assert!(
        c.try_lock(&key).await.expect("try_lock").is_none(),
        "holder 2's lock is intact"
    );
    assert_eq!(fresh.release().await.expect("release"), ReleaseOutcome::Released);
}

/// A manual `extend` keeps the lock past the original TTL.
pub async fn extend_keeps_lock_past_ttl(s: &LockSuite) {
    let key = s.key("extend");
    let a = s.manager(s.manual()).await;
    let b = s.manager(s.manual()).await;
    let g = a.lock(&key).await.expect("lock");
    let original = g.deadline();
    g.extend(s.ttl * 4).await.expect("extend");
    assert!(g.deadline() > original, "extend must move the deadline");
    // Half a TTL past the original deadline, well inside the extended one.
    tokio::time::sleep_until(original + s.ttl / 2).await;
    assert!(!g.is_lost());
    assert!(
        b.try_lock(&key).await.expect("try_lock").is_none(),
        "extended lock must still be held"
    );
    assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
    let err = LockManager::from_arc(s.client().await, s.manual())
        .expect("manager")
        .lock(&key)
        .await
        .expect("lock again")
        .extend(Duration::ZERO)
        .await
        .expect_err("zero ttl");
    assert!(matches!(err, Error::InvalidArgument(_)));
}

/// Automatic renewal keeps the lock through six renewals, twice its TTL.
pub async fn auto_renew_keeps_lock(s: &LockSuite) {
    let key = s.key("auto-renew");
    // Three base TTLs: each renewal has two thirds of the TTL to get
    // through a loaded machine before the deadline.
    let ttl = s.ttl * 3;
    let (faulty, control) = FaultyBackend::new(s.client().await);
    let a = LockManager::with_options(faulty, s.options().ttl(ttl)).expect("manager");
    let b = s.manager(s.manual()).await;
    let g = a.lock(&key).await.expect("lock");
    // Synchronise on the renewals themselves, not on a sleep.
    let give_up = Instant::now() + ttl * 20;
    while control.counts().renew < 6 {
        assert!(!g.is_lost(), "lost after {} renewals", control.counts().renew);
        assert!(Instant::now() < give_up, "the renewer stopped renewing");
        tokio::time::sleep(s.ttl / 10).await;
    }
    assert!(
        g.acquired_at().elapsed() > ttl,
        "six renewals must take the lease past its original TTL"
    );
    assert!(!g.is_lost(), "auto-renewed lease must not be lost");
    assert!(g.remaining() > Duration::ZERO);
    assert!(
        b.try_lock(&key).await.expect("try_lock").is_none(),
        "auto-renewed lock must still be held"
    );
    assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
}

/// A batched renewal answers item by item exactly as `renew` would, and
/// extends only the leases it reports renewed.
pub async fn renew_many_matches_renew(s: &LockSuite) {
    let backend = s.client().await;
    let other = s.client().await;
    let (a, b, theirs, missing) = (
        s.key("batch-a"),
        s.key("batch-b"),
        s.key("batch-theirs"),
        s.key("batch-missing"),
    );
    let mine = LockToken::generate().expect("token");
    let foreign = LockToken::generate().expect("token");
    for key in [&a, &b] {
        assert!(matches!(
            backend.try_acquire(key, &mine, s.ttl).await.expect("acquire"),
            AcquireOutcome::Acquired(_)
        ));
    }
    assert!(matches!(
        other.try_acquire(&theirs, &foreign, s.ttl * 4).await.expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    let items = [
        (a.as_str(), &mine),
        (b.as_str(), &mine),
        (theirs.as_str(), &mine),
        (missing.as_str(), &mine),
    ];
    let results: Vec<RenewOutcome> = backend
        .renew_many(&items, s.ttl * 4)
        .await
        .into_iter()
        .map(|r| r.expect("renew_many item"))
        .collect();
    assert_eq!(results.len(), 4);
    assert_eq!(
        &results[..3],
        &[RenewOutcome::Renewed, RenewOutcome::Renewed, RenewOutcome::HeldByOther]
    );
    assert_eq!(results[3], RenewOutcome::Missing);
    assert!(backend.renew_many(&[], s.ttl).await.is_empty());
    let invalid = backend.renew_many(&items[..2], Duration::ZERO).await;
    assert!(
        invalid.iter().all(|r| matches!(r, Err(Error::InvalidArgument(_)))),
        "{invalid:?}"
    );
    // Past the original TTL: the renewed leases hold, nothing was created.
    tokio::time::sleep(s.ttl * 2).await;
    let probe = LockToken::generate().expect("token");
    for key in [&a, &b, &theirs] {
        assert!(
            matches!(
                other.try_acquire(key, &probe, s.ttl).await.expect("probe"),
                AcquireOutcome::Held { .. }
            ),
            "{key} must still be held"
        );
    }
    assert!(matches!(
        other.try_acquire(&missing, &probe, s.ttl).await.expect("probe"),
        AcquireOutcome::Acquired(_)
    ));
    for key in [&a, &b] {
        assert_eq!(
            backend.release(key, &mine).await.expect("release"),
            ReleaseOutcome::Released
        );
    }
    assert_eq!(
        other.release(&theirs, &foreign).await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_eq!(
        other.release(&missing, &probe).await.expect("release"),
        ReleaseOutcome::Released
    );
}

/// `lost()` fires when the key is deleted and taken behind the holder's back.
pub async fn lost_fires_when_key_is_taken(s: &LockSuite) {
    let key = s.key("taken");
    // A TTL of 5 base TTLs: the first renewal (at a third of it) must find
    // the thief long before the deadline could pass on a loaded machine, so
    // the reason is `NotOwner` for the right reason.
    let ttl = s.ttl * 5;
    let a = s.manager(s.options().ttl(ttl).acquire_timeout(ttl)).await;
    let g = a.lock(&key).await.expect("lock");
    let thief = s.client().await;
    if !thief.capabilities().lease_expires {
        refuses_the_thief(s, &*thief, &key, g.token()).await;
        assert!(!g.is_lost(), "the holder keeps its lock");
        assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
        return;
    }
    assert_eq!(
        thief.release(&key, g.token()).await.expect("steal"),
        ReleaseOutcome::Released
    );
    let theirs = LockToken::generate().expect("token");
    assert!(matches!(
        thief.try_acquire(&key, &theirs, s.ttl * 10).await.expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    let reason = tokio::time::timeout(ttl * 3, g.lost()).await.expect("lost() must fire");
    assert_eq!(reason, LossReason::NotOwner, "a renewal must find the thief");
    assert!(g.is_lost());
    // The stale guard's release must not touch the thief's lock.
    assert_eq!(g.release().await.expect("release"), ReleaseOutcome::HeldByOther);
    assert_eq!(
        thief.release(&key, &theirs).await.expect("release"),
        ReleaseOutcome::Released
    );
}

/// When the backend stops answering, `lost()` fires by the local deadline,
/// which comes before the server-side TTL can run out.
pub async fn lost_fires_by_deadline_when_backend_hangs(s: &LockSuite) {
    let key = s.key("hang");
    let (faulty, control) = FaultyBackend::new(s.client().await);
    let a = LockManager::with_options(faulty, s.options()).expect("manager");
    let sent = Instant::now();
    let g = a.lock(&key).await.expect("lock");
    control.set(Fault::Hang);
    let deadline = g.deadline();
    assert!(
        deadline <= sent + s.ttl,
        "the local deadline must come before the server TTL"
    );
    let watcher = tokio::spawn(g.lost());
    // Exact, whatever the load: at the deadline the guard says it is lost,
    // and no renewal moved the deadline while the backend hung.
    tokio::time::sleep_until(deadline).await;
    assert!(g.is_lost(), "the guard must be lost at its deadline");
    assert_eq!(g.deadline(), deadline, "a hung renewal must not extend the deadline");
    // The signal itself is a timer: it may be late only by scheduling delay,
    // bounded here by a generous multiple of the TTL.
    let bound = s.ttl + s.slack;
    let reason = tokio::time::timeout(bound, watcher)
        .await
        .unwrap_or_else(|_| panic!("lost() did not fire within {bound:?} after the deadline"))
        .expect("watcher task");
    assert_eq!(reason, LossReason::DeadlinePassed);
    control.heal();
    drop(g);
}

/// `lost()` armed on a long lease fires at the earlier deadline that an
/// `extend` with a shorter TTL sets, not at the old one.
pub async fn lost_follows_an_earlier_deadline(s: &LockSuite) {
    let key = s.key("earlier-deadline");
    let a = s.manager(s.manual().ttl(s.ttl * 10)).await;
    let g = a.lock(&key).await.expect("lock");
    let lease = g.handle();
    let watcher = tokio::spawn(async move { (lease.lost().await, Instant::now()) });
    tokio::task::yield_now().await; // armed on the long deadline
    g.extend(s.ttl).await.expect("extend");
    let deadline = g.deadline();
    let (reason, fired) = tokio::time::timeout(s.ttl * 4, watcher)
        .await
        .expect("lost() must fire at the new deadline, not the old one")
        .expect("watcher");
    assert_eq!(reason, LossReason::DeadlinePassed);
    assert!(fired >= deadline, "lost() fired before the deadline");
    // The old deadline is 10 TTLs out: one TTL of scheduling lateness (as
    // the other loss cases allow) still tells the two apart.
    assert!(
        fired <= deadline + s.ttl + s.slack,
        "lost() fired {:?} after the deadline",
        fired.saturating_duration_since(deadline)
    );
    drop(g);
}

/// A release or drop ends the lease for every handle: lost, nothing left,
/// `lost()` resolves with `Released`; `with_lock` still returns its body's
/// output (its own release is not a loss).
pub async fn handles_see_the_lease_end(s: &LockSuite) {
    let key = s.key("lease-end");
    let a = s.manager(s.options()).await;
    for release in [true, false] {
        let g = a.lock(&key).await.expect("lock");
        let lease = g.handle();
        assert!(!lease.is_lost());
        if release {
            assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
        } else {
            drop(g);
        }
        assert!(lease.is_lost(), "release {release}: the handle still claims the lease");
        assert_eq!(lease.remaining(), Duration::ZERO);
        let reason = tokio::time::timeout(s.ttl, lease.lost())
            .await
            .expect("lost() fires when the lease ends");
        assert_eq!(reason, LossReason::Released);
    }
    let (out, lease) = a
        .with_lock(&key, |lease| async move { (7, lease) })
        .await
        .expect("with_lock");
    assert_eq!(out, 7);
    assert_eq!(lease.lost().await, LossReason::Released);
}

/// `with_lock` cancels the body when the lease is lost and says why.
pub async fn with_lock_cancels_body_on_loss(s: &LockSuite) {
    let key = s.key("with-lock-lost");
    // Long enough that the renewal, not the deadline, reports the loss.
    let ttl = s.ttl * 5;
    let a = s.manager(s.options().ttl(ttl).acquire_timeout(ttl)).await;
    let thief = s.client().await;
    if !thief.capabilities().lease_expires {
        // Nobody but the holder's session can end the lock: the body runs
        // to its end.
        let out = a
            .with_lock(&key, |lease| {
                let (thief, key) = (thief.clone(), key.clone());
                async move {
                    refuses_the_thief(s, &*thief, &key, lease.token()).await;
                    assert!(!lease.is_lost(), "the holder keeps its lock");
                    7
                }
            })
            .await
            .expect("with_lock");
        assert_eq!(out, 7);
        return;
    }
    let finished = Arc::new(AtomicBool::new(false));
    let flag = finished.clone();
    let (started, body_started) = tokio::sync::oneshot::channel();
    let run = a.with_lock(&key, |lease| async move {
        started.send(*lease.token()).expect("the test listens");
        tokio::time::sleep(ttl * 10).await;
        flag.store(true, Ordering::SeqCst);
    });
    let steal = async {
        let token = body_started.await.expect("the body started");
        assert_eq!(
            thief.release(&key, &token).await.expect("steal"),
            ReleaseOutcome::Released
        );
        let theirs = LockToken::generate().expect("token");
        assert!(matches!(
            thief.try_acquire(&key, &theirs, ttl * 10).await.expect("acquire"),
            AcquireOutcome::Acquired(_)
        ));
        theirs
    };
    let (result, theirs) = tokio::join!(run, steal);
    assert!(
        matches!(
            result,
            Err(Error::Lost {
                reason: LossReason::NotOwner,
                ..
            })
        ),
        "a renewal must find the thief, got {result:?}"
    );
    assert!(!finished.load(Ordering::SeqCst), "the body must be cancelled");
    assert_eq!(
        thief.release(&key, &theirs).await.expect("release"),
        ReleaseOutcome::Released,
        "the cancelled body's guard must not have released the thief's lock"
    );
}

/// `with_lock` returns the body's output and releases the lock.
pub async fn with_lock_returns_body_output(s: &LockSuite) {
    let key = s.key("with-lock-ok");
    let a = s.manager(s.options()).await;
    let out = a
        .with_lock(&key, |lease| async move {
            assert!(!lease.is_lost());
            41 + 1
        })
        .await
        .expect("with_lock");
    assert_eq!(out, 42);
    let b = s.manager(s.manual()).await;
    let g = b
        .try_lock(&key)
        .await
        .expect("try_lock")
        .expect("released after with_lock");
    drop(g);
}

/// For a backend whose lock lives with its session
/// ([`Capabilities::lease_expires`](lock_core::Capabilities::lease_expires)
/// false): `false`, after checking that `key`, whose guard's deadline
/// passed unrenewed, is still held (`other` cannot take it). `true` (the
/// caller checks expiry) for every other backend.
async fn lives_with_session(s: &LockSuite, other: &LockManager, key: &str) -> bool {
    if other.backend().capabilities().lease_expires {
        return true;
    }
    let _ = s;
    assert!(
        other.try_lock(key).await.expect("try_lock").is_none(),
        "a lock that lives with its session must not expire"
    );
    false
}

/// Another client presenting the holder's token can neither release nor
/// renew a lock that lives with its session, and cannot take the key.
async fn refuses_the_thief(s: &LockSuite, thief: &dyn lock_core::LockBackend, key: &str, holder: &LockToken) {
    assert_eq!(
        thief.release(key, holder).await.expect("steal"),
        ReleaseOutcome::HeldByOther,
        "only the holder's session can end its lock"
    );
    assert_eq!(
        thief.renew(key, holder, s.ttl).await.expect("renew"),
        RenewOutcome::HeldByOther
    );
    let theirs = LockToken::generate().expect("token");
    assert!(matches!(
        thief.try_acquire(key, &theirs, s.ttl).await.expect("acquire"),
        AcquireOutcome::Held { .. }
    ));
}
