//! Lock cases: mutual exclusion and ownership (who may take, release and
//! renew a key; fencing tokens; bad input).

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Error, LockManager, LockOptions, LockToken};

use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use tokio::time::Instant;

use crate::conformance::LockSuite;

/// One client holds the key; a second is refused until it is released.
pub async fn exclusive_acquire(s: &LockSuite) {
    let key = s.key("exclusive");
    let a = s.manager(s.options()).await;
    let b = s.manager(s.options()).await;
    let g = a
        .try_lock(&key)
        .await
        .expect("first try_lock")
        .expect("free key is acquired");
    assert!(
        b.try_lock(&key).await.expect("second try_lock").is_none(),
        "second client must be refused"
    );
    assert!(
        a.try_lock(&key).await.expect("same manager").is_none(),
        "no reentrancy: a second guard is refused"
    );
    assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
    let g2 = b
        .try_lock(&key)
        .await
        .expect("try_lock after release")
        .expect("acquired after release");
    assert_eq!(g2.release().await.expect("release"), ReleaseOutcome::Released);
}

/// `try_lock` on a held key returns `None` after one attempt.
pub async fn try_lock_never_waits(s: &LockSuite) {
    let key = s.key("try-lock");
    let a = s.manager(s.options()).await;
    let b = s.manager(s.options().acquire_timeout(s.ttl * 20)).await;
    let g = a.lock(&key).await.expect("lock");
    let started = Instant::now();
    assert!(b.try_lock(&key).await.expect("try_lock").is_none());
    assert!(
        started.elapsed() < s.ttl * 10,
        "try_lock must not wait for the acquire timeout"
    );
    drop(g);
}

/// Release and renew with a foreign token are refused and leave the key
/// untouched; after release both report the key missing.
pub async fn non_owner_is_refused(s: &LockSuite) {
    let key = s.key("non-owner");
    let backend = s.client().await;
    let other = s.client().await;
    let mine = LockToken::generate().expect("token");
    let theirs = LockToken::generate().expect("token");
    let ttl = s.ttl * 4;
    assert!(matches!(
        backend.try_acquire(&key, &mine, ttl).await.expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    assert!(matches!(
        other.try_acquire(&key, &theirs, ttl).await.expect("acquire"),
        AcquireOutcome::Held { .. }
    ));
    assert_eq!(
        other.release(&key, &theirs).await.expect("release"),
        ReleaseOutcome::HeldByOther
    );
    assert_eq!(
        other.renew(&key, &theirs, ttl).await.expect("renew"),
        RenewOutcome::HeldByOther
    );
    assert_eq!(
        backend.renew(&key, &mine, ttl).await.expect("owner renew"),
        RenewOutcome::Renewed
    );
    assert_eq!(
        backend.release(&key, &mine).await.expect("owner release"),
        ReleaseOutcome::Released
    );
    // The README promises every backend tells "missing" apart.
    assert!(
        backend.capabilities().distinguishes_missing,
        "every backend must tell a missing key apart"
    );
    let again = backend.release(&key, &mine).await.expect("second release");
    let renew = backend.renew(&key, &mine, ttl).await.expect("renew after release");
    assert_eq!(again, ReleaseOutcome::Missing);
    assert_eq!(renew, RenewOutcome::Missing, "renew must not recreate a released key");
    // The key is really free: a renew did not resurrect it.
    assert!(matches!(
        other.try_acquire(&key, &theirs, ttl).await.expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    assert_eq!(
        other.release(&key, &theirs).await.expect("release"),
        ReleaseOutcome::Released
    );
}

/// `lock()` gives up with `Timeout` while another client holds the key.
pub async fn lock_times_out_while_held(s: &LockSuite) {
    let key = s.key("timeout");
    let a = s.manager(s.options()).await;
    let b = s.manager(s.options().acquire_timeout(s.ttl)).await;
    let g = a.lock(&key).await.expect("lock");
    let err = b.lock(&key).await.expect_err("must time out");
    assert!(matches!(err, Error::Timeout { .. }), "got {err:?}");
    assert!(!g.is_lost());
    assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
}

/// N tasks × M read-yield-write increments of an unprotected counter, each
/// under the lock, end at exactly N × M.
pub async fn counter_is_exact_under_lock(s: &LockSuite) {
    let key = s.key("counter");
    let (tasks, increments) = s.counter;
    let counter = Arc::new(std::sync::Mutex::new(0usize));
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let manager = s.manager(s.options().acquire_timeout(s.ttl * 100)).await;
        let counter = counter.clone();
        let key = key.clone();
        handles.push(tokio::spawn(async move {
            for _ in 0..increments {
                let g = manager.lock(&key).await.expect("lock");
                let seen = *counter.lock().expect("counter");
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(1)).await;
                *counter.lock().expect("counter") = seen + 1;
                assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
            }
        }));
    }
    for h in handles {
        h.await.expect("task");
    }
    assert_eq!(
        *counter.lock().expect("counter"),
        tasks * increments,
        "lost updates under the lock"
    );
}

/// Fencing tokens strictly increase across successive holders, where the
/// backend has them; otherwise none are claimed.
pub async fn fencing_tokens_increase(s: &LockSuite) {
    let key = s.key("fencing");
    let a = s.manager(s.manual()).await;
    let b = s.manager(s.manual()).await;
    let fencing = a.backend().capabilities().fencing_tokens;
    let mut last = None;
    for round in 0..6 {
        let m = if round % 2 == 0 { &a } else { &b };
        let g = m.lock(&key).await.expect("lock");
        let token = g.fencing_token();
        if fencing {
            let token = token.expect("a fencing backend must issue a token");
            if let Some(prev) = last {
                assert!(token > prev, "fencing token {token} not above {prev}");
            }
            last = Some(token);
        } else {
            assert!(token.is_none(), "backend claims no fencing but issued {token:?}");
        }
        if round == 4 {
            drop(g); // the next round's lock() waits for the drop's release
        } else if round == 5 {
            // Expiry instead of release: the next grant still increases.
            // (A lock that lives with its session never expires: dropped.)
            tokio::time::sleep(s.ttl * 2).await;
            let g = if a.backend().capabilities().lease_expires {
                Some(g)
            } else {
                drop(g);
                None
            };
            let g2 = a.lock(&key).await.expect("lock after expiry");
            if fencing {
                let prev = last.expect("five tokens before");
                let t = g2.fencing_token().expect("a fencing backend must issue a token");
                assert!(t > prev, "fencing token {t} after expiry not above {prev}");
            } else {
                assert!(g2.fencing_token().is_none());
            }
            drop(g);
            drop(g2);
        } else {
            g.release().await.expect("release");
        }
    }
}

/// Bad input is `InvalidArgument`, never a panic or a server round trip.
pub async fn invalid_arguments_are_rejected(s: &LockSuite) {
    let backend = s.client().await;
    let token = LockToken::generate().expect("token");
    let key = s.key("invalid");
    let invalid = |r: Result<(), Error>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(
        invalid(backend.try_acquire("", &token, s.ttl).await.map(drop)),
        "empty key"
    );
    assert!(
        invalid(backend.try_acquire(&key, &token, Duration::ZERO).await.map(drop)),
        "zero ttl"
    );
    assert!(
        invalid(
            backend
                .try_acquire(&key, &token, LockOptions::MAX_TTL * 2)
                .await
                .map(drop)
        ),
        "absurd ttl"
    );
    assert!(
        invalid(backend.renew(&key, &token, Duration::ZERO).await.map(drop)),
        "zero renew ttl"
    );
    assert!(
        invalid(backend.release("", &token).await.map(drop)),
        "empty key release"
    );
    let m = s.manager(s.options()).await;
    assert!(invalid(m.lock("").await.map(drop)), "empty key lock");
    assert!(invalid(m.try_lock("").await.map(drop)), "empty key try_lock");
    for bad in [
        LockOptions::default().ttl(Duration::ZERO),
        LockOptions::default().ttl(Duration::from_secs(u64::MAX)),
        LockOptions::default().renewal(lock_core::Renewal::Auto {
            interval: Duration::from_secs(60),
        }),
    ] {
        assert!(invalid(LockManager::from_arc(s.client().await, bad).map(drop)));
    }
    // Nothing was created by the rejected calls.
    let g = m.try_lock(&key).await.expect("try_lock").expect("key untouched");
    drop(g);
}
