//! Lock cases: calls made outside a tokio runtime.

use std::time::Duration;

use lock_core::ReleaseOutcome;
use lock_core::{Error, LockManager, LockOptions};

use crate::conformance::LockSuite;

/// Runs `call` on a thread of its own with no tokio runtime (a plain
/// executor polls it), and returns its result; a panic fails the case.
fn outside_a_runtime<T: Send + 'static>(what: &str, call: impl std::future::Future<Output = T> + Send + 'static) -> T {
    match std::thread::spawn(move || futures::executor::block_on(call)).join() {
        Ok(out) => out,
        Err(_) => panic!("{what} outside a tokio runtime panicked instead of returning a typed error"),
    }
}

/// Every acquire made outside a tokio runtime is a typed error (never a
/// panic), with automatic renewal or without, on a free key and on a
/// busy one, and leaves no key held: the key is free at once afterwards.
pub async fn outside_a_runtime_is_a_typed_error_and_leaves_no_key(s: &LockSuite) {
    let key = s.key("outside-runtime");
    let long = s.ttl * 25;
    for options in [
        LockOptions::with_ttl(long),
        LockOptions::with_ttl(long).renewal(lock_core::Renewal::Manual),
    ] {
        let m = LockManager::from_arc(s.client().await, options.clone().acquire_timeout(s.ttl)).expect("manager");
        let (m2, k2) = (m.clone(), key.clone());
        let locked = outside_a_runtime("lock", async move { m2.lock(&k2).await.map(drop) });
        assert!(matches!(locked, Err(Error::InvalidArgument(_))), "lock: {locked:?}");
        let (m2, k2) = (m.clone(), key.clone());
        let tried = outside_a_runtime("try_lock", async move { m2.try_lock(&k2).await.map(|g| g.is_some()) });
        assert!(matches!(tried, Err(Error::InvalidArgument(_))), "try_lock: {tried:?}");
        // Nothing is left held: another client takes the key at once.
        let other = s.manager(LockOptions::with_ttl(long)).await;
        let g = other
            .try_lock(&key)
            .await
            .expect("try_lock")
            .expect("a call refused outside a runtime left the key held");
        // On a busy key: still a typed error, not a panic.
        let (m2, k2) = (m.clone(), key.clone());
        let busy = outside_a_runtime("lock on a busy key", async move { m2.lock(&k2).await.map(drop) });
        assert!(matches!(busy, Err(Error::InvalidArgument(_))), "busy lock: {busy:?}");
        assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
    }
    // A guard taken inside a runtime and released outside one: a typed
    // error or a release, never a panic; either way the key is free by the
    // TTL at the latest, and a guard dropped there does not panic.
    let m = s
        .manager(LockOptions::with_ttl(s.ttl).renewal(lock_core::Renewal::Manual))
        .await;
    let g = m.lock(&key).await.expect("lock");
    let released = outside_a_runtime("release", async move { g.release().await });
    assert!(
        matches!(released, Ok(ReleaseOutcome::Released) | Err(Error::InvalidArgument(_))),
        "release: {released:?}"
    );
    // Another key: a server's key released outside a runtime waits for its
    // TTL (whole seconds on some servers).
    let g = m.lock(&s.key("outside-runtime-extend")).await.expect("lock");
    let extended = outside_a_runtime("extend", async move {
        let r = g.extend(Duration::from_secs(1)).await;
        drop(g);
        r
    });
    assert!(
        matches!(extended, Ok(()) | Err(Error::InvalidArgument(_))),
        "extend: {extended:?}"
    );
}
