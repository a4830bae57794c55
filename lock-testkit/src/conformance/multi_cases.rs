//! Multi-key lock cases: no key held twice under contention (checked from
//! recorded intervals), all-or-nothing, exclusion of plain locks, expiry of
//! dead holders, stale holders, loss at the local deadline.

pub use super::reserved_cases::reserved_multi_keys_are_refused;

use std::sync::atomic::Ordering;

use lock_core::{Error, LockManager, LockToken, MultiLockManager};

use lock_core::raw::MultiLockBackend;

use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use tokio::time::Instant;

use super::MultiSuite;
use super::hanging::{Hanging, assert_lost_by_deadline};

/// 32 tasks over 4 clients each lock 2 or 3 of 6 shared keys: for every
/// key, the recorded holding intervals (lock returned → release sent, cut at
/// the local deadline) never overlap.
pub async fn no_key_held_twice(s: &MultiSuite) {
    const TASKS: usize = 32;
    let keys = s.keys("bound", 6);
    let mut managers = Vec::new();
    for _ in 0..4 {
        managers.push(s.manager(s.options().acquire_timeout(s.ttl * 80)).await);
    }
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let m = managers[i % managers.len()].clone();
        // Overlapping sets, written in varying orders.
        let mine: Vec<String> = (0..2 + i % 2)
            .map(|j| keys[(i * 5 + j * 2) % keys.len()].clone())
            .rev()
            .collect();
        let hold = s.hold;
        tasks.push(tokio::spawn(async move {
            let g = m.lock(&mine).await.expect("lock");
            let start = Instant::now();
            tokio::time::sleep(hold).await;
            let end = Instant::now().min(g.deadline());
            // On a loaded machine the renewer can fall behind (a liveness
            // matter, not this case's): the interval is cut at the local
            // deadline, and a release finding the lock gone must come after it.
            let held = g.keys().to_vec();
            let deadline = g.deadline();
            let released = g.release().await.expect("release");
            assert!(
                released == ReleaseOutcome::Released
                    || (released == ReleaseOutcome::Missing && Instant::now() >= deadline),
                "release answered {released:?} before the lock's deadline"
            );
            (held, start, end)
        }));
    }
    let mut per_key: std::collections::HashMap<String, Vec<(Instant, Instant)>> = Default::default();
    for t in tasks {
        let (held, start, end) = t.await.expect("task");
        for k in held {
            per_key.entry(k).or_default().push((start, end));
        }
    }
    for (key, mut spans) in per_key {
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[0].1 <= w[1].0, "{key} held twice: {:?} and {:?}", w[0], w[1]);
        }
    }
}

/// A set with one held key takes nothing: the free keys stay free.
pub async fn all_or_nothing(s: &MultiSuite) {
    let k = s.keys("all", 3);
    let a = s.manager(s.options()).await;
    let b = s.manager(s.options()).await;
    let held = a.lock(&[&k[1]]).await.expect("lock");
    assert!(b.try_lock(&k).await.expect("try").is_none(), "k1 is held");
    let free = b
        .try_lock(&[&k[0], &k[2]])
        .await
        .expect("try")
        .expect("k0 and k2 stayed free");
    free.release().await.expect("release");
    held.release().await.expect("release");
    let all = b.try_lock(&k).await.expect("try").expect("all free now");
    all.release().await.expect("release");
}

/// Multi-key locks and plain locks on the same keys exclude each other.
pub async fn excludes_plain_locks(s: &MultiSuite) {
    let k = s.keys("plain", 2);
    let client = s.client().await;
    let plain = LockManager::from_arc(client.clone(), s.options()).expect("manager");
    let multi = MultiLockManager::with_options(client, s.options()).expect("manager");
    let g = plain.lock(&k[0]).await.expect("lock");
    assert!(
        multi.try_lock(&k).await.expect("try").is_none(),
        "a plain lock holds k0"
    );
    g.release().await.expect("release");
    let both = multi.lock(&k).await.expect("lock");
    assert!(
        plain.try_lock(&k[1]).await.expect("try").is_none(),
        "the multi-key lock holds k1"
    );
    both.release().await.expect("release");
}

/// A holder that dies gives its keys back when their TTL ends.
pub async fn expiry_returns_dead_holders_keys(s: &MultiSuite) {
    let k = s.keys("dead", 2);
    let refs: Vec<&str> = k.iter().map(String::as_str).collect();
    let dead = s.client().await;
    let token = LockToken::generate().expect("token");
    // From before the grant: the server's TTL starts after this instant,
    // however long the grant itself took (a WAIT under load).
    let sent = Instant::now();
    let r = dead.try_acquire_all(&refs, &token, s.ttl).await.expect("acquire");
    assert!(matches!(r, AcquireOutcome::Acquired(_)));
    let m = s.manager(s.options()).await;
    assert!(m.try_lock(&k).await.expect("try").is_none());
    let g = m.lock(&k).await.expect("keys come back at expiry");
    assert!(Instant::now() >= sent + s.ttl / 2, "keys came back long before the TTL");
    g.release().await.expect("release");
}

/// After its keys expired and another took them, a stale holder can neither
/// release nor renew them.
pub async fn stale_holder_cannot_release_or_renew(s: &MultiSuite) {
    let k = s.keys("stale", 2);
    let refs: Vec<&str> = k.iter().map(String::as_str).collect();
    let backend = s.client().await;
    let stale = LockToken::generate().expect("token");
    backend.try_acquire_all(&refs, &stale, s.ttl).await.expect("acquire");
    tokio::time::sleep(s.ttl * 2).await;
    let m = s.manager(s.options()).await;
    let g = m.try_lock(&k).await.expect("try").expect("expired");
    assert_eq!(
        backend.renew_all(&refs, &stale, s.ttl).await.expect("renew"),
        RenewOutcome::HeldByOther
    );
    assert_eq!(
        backend.release_all(&refs, &stale).await.expect("release"),
        ReleaseOutcome::HeldByOther
    );
    assert!(!g.is_lost());
    assert!(
        m.try_lock(&[&k[0]]).await.expect("try").is_none(),
        "still held by the new holder"
    );
    assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
}

/// When the backend stops answering, `lost()` fires at the local deadline.
pub async fn lost_fires_by_deadline_when_backend_hangs(s: &MultiSuite) {
    let k = s.keys("hang", 2);
    let (backend, hang) = Hanging::new(s.client().await);
    let m = MultiLockManager::with_options(backend, s.options()).expect("manager");
    let sent = Instant::now();
    let g = m.lock(&k).await.expect("lock");
    hang.store(true, Ordering::SeqCst);
    assert_lost_by_deadline(&g.handle(), sent, s.ttl, s.slack).await;
    hang.store(false, Ordering::SeqCst);
    drop(g);
}

/// Empty sets, empty keys and oversized sets are `InvalidArgument`.
pub async fn invalid_key_sets_are_rejected(s: &MultiSuite) {
    let m = s.manager(s.options()).await;
    let none: [&str; 0] = [];
    assert!(matches!(m.try_lock(&none).await, Err(Error::InvalidArgument(_))));
    assert!(matches!(m.try_lock(&["a", ""]).await, Err(Error::InvalidArgument(_))));
    let many = s.keys("many", lock_core::MultiLockManager::MAX_KEYS + 1);
    assert!(matches!(m.try_lock(&many).await, Err(Error::InvalidArgument(_))));
    let raw = s.client().await;
    let token = LockToken::generate().expect("token");
    assert!(matches!(
        raw.try_acquire_all(&[], &token, s.ttl).await,
        Err(Error::InvalidArgument(_))
    ));
}

/// `with_locks` returns the body's output and releases every key.
pub async fn with_locks_returns_output(s: &MultiSuite) {
    let k = s.keys("with", 2);
    let m = s.manager(s.options()).await;
    let out = m.with_locks(&k, |_lease| async { 7 }).await.expect("with_locks");
    assert_eq!(out, 7);
    let again = m.try_lock(&k).await.expect("try").expect("released");
    again.release().await.expect("release");
}

/// Every grant carries a fencing token above every earlier token of each of
/// its keys, from plain locks or other sets, whatever the mutex's fencing
/// setting: a stale set holder's writes can be refused per key.
pub async fn fencing_tokens_order_writes_per_key(s: &MultiSuite) {
    let keys = s.keys("fence", 3);
    let m = s.manager(s.options()).await;
    let first = m.lock(&keys[..2]).await.expect("lock");
    let t1 = first.fencing_token().expect("a multi-key fencing token");
    first.release().await.expect("release");
    let second = m.lock(&keys[1..]).await.expect("lock");
    let t2 = second.fencing_token().expect("a multi-key fencing token");
    assert!(t2 > t1, "{t2:?} after {t1:?} on the shared key");
    second.release().await.expect("release");
    let third = m.lock(&keys).await.expect("lock");
    let t3 = third.fencing_token().expect("a multi-key fencing token");
    assert!(t3 > t2, "{t3:?} after {t2:?}");
    third.release().await.expect("release");
}
