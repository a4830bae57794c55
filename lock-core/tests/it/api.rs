//! The `x` / `x_opts` pairs and other API additions, on the memory backend in
//! paused time.

#![allow(clippy::expect_used)] // test helpers

use std::time::Duration;

use lock_core::{Backoff, Error, LockManager, LockOptions, UpdateOptions, VersionedStore, VersionedStoreExt};
use lock_memory::MemoryBackend;

#[tokio::test(start_paused = true)]
async fn update_opts_writes_or_declines_without_writing() {
    let store = MemoryBackend::new();
    let opts = UpdateOptions::default();
    let add_seat = |old: Option<&[u8]>| {
        let seats = old.map_or(0, <[u8]>::len);
        (seats < 2).then(|| [old.unwrap_or_default(), b"x"].concat())
    };
    let first = store.update_opts("seats", &opts, add_seat).await.expect("first");
    assert_eq!(first.expect("written").value, b"x");
    let second = store.update_opts("seats", &opts, add_seat).await.expect("second");
    let second = second.expect("written");
    assert_eq!(
        store.update_opts("seats", &opts, add_seat).await.expect("third"),
        None,
        "full: declined"
    );
    assert_eq!(
        store.get("seats").await.expect("get").expect("present").version,
        second.version,
        "a declined update writes nothing"
    );
    assert_eq!(
        store
            .update_opts("absent", &opts, |_| None)
            .await
            .expect("declined create"),
        None
    );
    assert_eq!(store.get("absent").await.expect("get"), None);
    assert!(matches!(
        store.update_opts("", &opts, |_| None).await,
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn update_takes_default_options_and_its_closure_can_decline() {
    let store = MemoryBackend::new();
    let incr = |old: Option<&[u8]>| {
        let n: u64 = old.and_then(|b| std::str::from_utf8(b).ok()?.parse().ok()).unwrap_or(0);
        Some((n + 1).to_string().into_bytes())
    };
    let first = store.update("n", incr).await.expect("create").expect("written");
    assert_eq!(first.value, b"1");
    let second = store.update("n", incr).await.expect("write").expect("written");
    assert_eq!(second.value, b"2");
    assert_eq!(store.update("n", |_| None).await.expect("declined"), None);
    assert_eq!(
        store.get("n").await.expect("get").expect("present"),
        second,
        "a declined update writes nothing"
    );
    assert!(matches!(store.update("", incr).await, Err(Error::InvalidArgument(_))));
}

#[tokio::test(start_paused = true)]
async fn opts_variants_take_per_call_options_and_validate_them() {
    let backend = MemoryBackend::new();
    let locks = LockManager::new(backend).expect("manager");
    let quick = LockOptions::with_ttl(Duration::from_secs(5)).acquire_timeout(Duration::from_millis(50));
    let held = locks.lock_opts("k", &quick).await.expect("lock_opts");
    let started = tokio::time::Instant::now();
    assert!(matches!(locks.lock_opts("k", &quick).await, Err(Error::Timeout { .. })));
    assert_eq!(started.elapsed(), Duration::from_millis(50), "per-call acquire timeout");
    assert!(locks.try_lock_opts("k", &quick).await.expect("try").is_none());
    let bad = LockOptions::with_ttl(Duration::ZERO);
    assert!(matches!(
        locks.lock_opts("x", &bad).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        locks.try_lock_opts("x", &bad).await,
        Err(Error::InvalidArgument(_))
    ));
    let out = locks
        .with_lock_opts("w", &quick, |_| async { 7 })
        .await
        .expect("with_lock_opts");
    assert_eq!(out, 7);
    drop(held);
}

#[derive(Debug, PartialEq)]
enum AppError {
    Lock(String),
    Body,
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError::Lock(e.to_string())
    }
}

#[tokio::test(start_paused = true)]
async fn try_with_lock_returns_body_and_lock_errors_as_one_type() {
    let locks = LockManager::new(MemoryBackend::new()).expect("manager");
    let ok: Result<u32, AppError> = locks.try_with_lock("k", |_| async { Ok(1) }).await;
    assert_eq!(ok, Ok(1));
    let body: Result<u32, AppError> = locks.try_with_lock("k", |_| async { Err(AppError::Body) }).await;
    assert_eq!(body, Err(AppError::Body));
    assert!(
        locks.try_lock("k").await.expect("try").is_some(),
        "released after a failing body"
    );
    let lock: Result<u32, AppError> = locks.try_with_lock("", |_| async { Ok(1) }).await;
    assert!(matches!(lock, Err(AppError::Lock(_))));
}

#[tokio::test(start_paused = true)]
async fn try_with_lock_opts_takes_per_call_options() {
    let locks = LockManager::new(MemoryBackend::new()).expect("manager");
    let quick = LockOptions::with_ttl(Duration::from_secs(5)).acquire_timeout(Duration::from_millis(50));
    let held = locks.lock("k").await.expect("lock");
    let started = tokio::time::Instant::now();
    let waited: Result<u32, AppError> = locks.try_with_lock_opts("k", &quick, |_| async { Ok(1) }).await;
    assert!(matches!(waited, Err(AppError::Lock(_))), "{waited:?}");
    assert_eq!(started.elapsed(), Duration::from_millis(50), "per-call acquire timeout");
    drop(held);
    let bad = LockOptions::with_ttl(Duration::ZERO);
    let refused: Result<u32, AppError> = locks.try_with_lock_opts("x", &bad, |_| async { Ok(1) }).await;
    assert!(matches!(refused, Err(AppError::Lock(_))), "{refused:?}");
    let ok: Result<u32, AppError> = locks.try_with_lock_opts("x", &quick, |_| async { Ok(2) }).await;
    assert_eq!(ok, Ok(2));
}

/// Every kind's `x_opts` twin uses its per-call options: invalid ones are
/// refused, and a waiting twin gives up at the per-call acquire timeout.
#[tokio::test(start_paused = true)]
async fn every_kind_opts_twin_takes_per_call_options() {
    use lock_core::{ElectionManager, MultiLockManager, RwLockManager, RwMode, SemaphoreManager};

    let backend = MemoryBackend::new();
    let bad = LockOptions::with_ttl(Duration::ZERO);
    let quick = LockOptions::with_ttl(Duration::from_secs(5)).acquire_timeout(Duration::from_millis(50));
    let invalid = |r: lock_core::Result<()>| matches!(r, Err(Error::InvalidArgument(_)));
    let timed_out = |r: lock_core::Result<()>| matches!(r, Err(Error::Timeout { .. }));

    let rw = RwLockManager::new(backend.clone()).expect("rw");
    let w = rw.lock("r", RwMode::Write).await.expect("lock");
    assert_eq!(w.mode(), RwMode::Write);
    assert!(
        rw.try_lock_opts("r", RwMode::Read, &quick)
            .await
            .expect("try")
            .is_none()
    );
    assert!(invalid(rw.try_lock_opts("r", RwMode::Read, &bad).await.map(drop)));
    assert!(invalid(rw.with_rw_opts("r", RwMode::Read, &bad, |_| async {}).await));
    let started = tokio::time::Instant::now();
    assert!(timed_out(
        rw.with_rw_opts("r", RwMode::Read, &quick, |_| async {}).await
    ));
    assert_eq!(started.elapsed(), Duration::from_millis(50));
    w.release().await.expect("release");
    assert_eq!(
        rw.with_rw_opts("r", RwMode::Read, &quick, |_| async { 3 })
            .await
            .expect("read"),
        3
    );

    let multi = MultiLockManager::new(backend.clone()).expect("multi");
    let held = multi.lock(&["a", "b"]).await.expect("lock");
    assert!(multi.try_lock_opts(&["b", "c"], &quick).await.expect("try").is_none());
    assert!(invalid(multi.try_lock_opts(&["c"], &bad).await.map(drop)));
    assert!(invalid(multi.with_locks_opts(&["c"], &bad, |_| async {}).await));
    let started = tokio::time::Instant::now();
    assert!(timed_out(multi.with_locks_opts(&["b"], &quick, |_| async {}).await));
    assert_eq!(started.elapsed(), Duration::from_millis(50));
    drop(held);

    let semaphores = SemaphoreManager::new(backend.clone()).expect("semaphores");
    let sem = semaphores.semaphore("s", 1).expect("semaphore");
    let permit = sem.acquire(1).await.expect("acquire");
    assert!(sem.try_acquire_opts(1, &quick).await.expect("try").is_none());
    assert!(invalid(sem.try_acquire_opts(1, &bad).await.map(drop)));
    assert!(invalid(sem.with_permits_opts(1, &bad, |_| async {}).await));
    let started = tokio::time::Instant::now();
    assert!(timed_out(sem.with_permits_opts(1, &quick, |_| async {}).await));
    assert_eq!(started.elapsed(), Duration::from_millis(50));
    drop(permit);

    let election = ElectionManager::new(backend).expect("election");
    let lead = election.campaign("e", b"a").await.expect("campaign");
    assert!(
        election
            .try_campaign_opts("e", b"b", &quick)
            .await
            .expect("try")
            .is_none()
    );
    assert!(invalid(election.try_campaign_opts("e", b"b", &bad).await.map(drop)));
    assert!(invalid(
        election.with_leadership_opts("e", b"b", &bad, |_| async {}).await
    ));
    let started = tokio::time::Instant::now();
    assert!(timed_out(
        election.with_leadership_opts("e", b"b", &quick, |_| async {}).await
    ));
    assert_eq!(started.elapsed(), Duration::from_millis(50));
    drop(lead);
}

#[test]
fn backoff_builder_matches_the_literal_form() {
    let built = Backoff::new(Duration::from_millis(5), Duration::from_millis(200));
    assert_eq!(built, Backoff::default());
    let fixed = Backoff::new(Duration::from_secs(5), Duration::from_secs(5))
        .factor(1.0)
        .min(Duration::from_secs(4));
    assert_eq!(fixed.ceiling(10), Duration::from_secs(5));
    assert!(fixed.delay(3) >= Duration::from_secs(4));
}

#[test]
fn raw_module_serves_backend_authors_and_old_paths_still_work() {
    use lock_core::raw;
    assert_eq!(raw::ttl_millis(Duration::from_micros(1500)), 2);
    assert!(raw::validate_key("").is_err());
    assert!(raw::validate_ttl(Duration::from_secs(1)).is_ok());
    assert_eq!(
        raw::clock_drift(Duration::from_secs(10), 0.01),
        lock_core::raw::clock_drift(Duration::from_secs(10), 0.01)
    );
    let _same_type: fn(&str) -> lock_core::Result<()> = lock_core::raw::validate_key;
    let _batch: Option<raw::RenewBatch> = None::<lock_core::raw::RenewBatch>;
}
