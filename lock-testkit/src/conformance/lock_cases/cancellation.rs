//! Lock cases: dropped futures and unknown outcomes leave no lock behind.

use std::time::Duration;

use lock_core::{LockManager, LockOptions, LockToken};

use lock_core::{ReleaseOutcome, RenewOutcome};
use tokio::time::Instant;

use crate::conformance::LockSuite;
use crate::faulty::{Fault, FaultyBackend};

/// Dropping a guard releases the lock well before its TTL.
pub async fn drop_releases_promptly(s: &LockSuite) {
    let key = s.key("drop");
    let long = s.ttl * 25;
    let a = s.manager(LockOptions::with_ttl(long)).await;
    let b = s.manager(LockOptions::with_ttl(long).acquire_timeout(long / 5)).await;
    let g = a.lock(&key).await.expect("lock");
    drop(g);
    // The acquire timeout (a fifth of the TTL) is the bound: without the
    // drop's release, this waits for the TTL and times out.
    let g2 = b.lock(&key).await.expect("dropped guard must release promptly");
    assert_eq!(g2.release().await.expect("release"), ReleaseOutcome::Released);
}

/// An acquire whose outcome is unknown (the reply was lost) must not leave
/// a lock behind: the manager releases the token it tried.
pub async fn unknown_outcome_acquire_is_cleaned_up(s: &LockSuite) {
    let key = s.key("unknown-outcome");
    let long = s.ttl * 25;
    let (faulty, control) = FaultyBackend::new(s.client().await);
    let a = LockManager::with_options(faulty, LockOptions::with_ttl(long)).expect("manager");
    control.set(Fault::ApplyThenLose);
    let err = a.try_lock(&key).await.expect_err("lost reply");
    assert!(err.is_outcome_unknown(), "got {err:?}");
    let b = s.manager(LockOptions::with_ttl(long).acquire_timeout(long / 5)).await;
    let g = b
        .lock(&key)
        .await
        .expect("the unknown-outcome grant must have been released");
    control.heal();
    assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
}

/// An acquire dropped after the backend applied it (the reply never came)
/// leaves no lock behind: the cancelled call's token is released.
pub async fn dropped_acquire_leaves_no_lock(s: &LockSuite) {
    let key = s.key("dropped-acquire");
    let long = s.ttl * 25;
    let (faulty, control) = FaultyBackend::new(s.client().await);
    let a = LockManager::with_options(faulty, LockOptions::with_ttl(long)).expect("manager");
    let observer = s.client().await;
    let probe = LockToken::generate().expect("token");
    control.set(Fault::ApplyThenHang);
    // Cancel the acquire once the server has the key (an owner-checked
    // renew with a foreign token never creates it).
    let give_up = Instant::now() + long;
    tokio::select! {
        r = a.lock(&key) => panic!("a hung acquire returned {:?}", r.map(|g| *g.token())),
        () = async {
            while observer.renew(&key, &probe, s.ttl).await.expect("probe") != RenewOutcome::HeldByOther {
                assert!(Instant::now() < give_up, "the acquire never reached the backend");
                tokio::time::sleep(s.ttl / 20).await;
            }
        } => {}
    }
    control.heal();
    let b = s.manager(LockOptions::with_ttl(long).acquire_timeout(long / 5)).await;
    let g = b
        .lock(&key)
        .await
        .expect("the dropped acquire's token must have been released");
    assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
}

/// A `release()` future dropped before its call reached the backend still
/// releases: the guard hands the release to the runtime.
pub async fn dropped_release_future_still_releases(s: &LockSuite) {
    let key = s.key("dropped-release");
    let long = s.ttl * 25;
    let (faulty, control) = FaultyBackend::new(s.client().await);
    let a = LockManager::with_options(faulty, LockOptions::with_ttl(long)).expect("manager");
    let g = a.lock(&key).await.expect("lock");
    control.set_latency(s.ttl);
    let cancelled = tokio::time::timeout(s.ttl / 10, g.release()).await;
    assert!(cancelled.is_err(), "the release was still waiting out the latency");
    control.set_latency(Duration::ZERO);
    let b = s.manager(LockOptions::with_ttl(long).acquire_timeout(long / 5)).await;
    let g2 = b
        .lock(&key)
        .await
        .expect("the dropped release must still release the key");
    assert_eq!(g2.release().await.expect("release"), ReleaseOutcome::Released);
}
