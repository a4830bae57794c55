//! Semaphore cases: the bound under contention (checked from recorded
//! intervals), expiry of dead holders, stale holders, size rules, loss at
//! the local deadline, and the scoped helper.

pub use super::reserved_cases::reserved_semaphore_names_are_refused;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lock_core::{Error, LockToken, SemaphoreManager};

use lock_core::raw::{PermitRequest, SemaphoreBackend};

use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use tokio::time::Instant;

use super::SemaphoreSuite;
use super::hanging::{Hanging, assert_lost_by_deadline};

/// 32 tasks over 4 clients contend for a semaphore of 3 (taking 1 or 2
/// permits each): at no instant do the recorded holding intervals (acquire
/// returned → release sent, cut at the local deadline) add up to more than 3.
pub async fn bound_never_exceeded(s: &SemaphoreSuite) {
    const SIZE: u32 = 3;
    const TASKS: u32 = 32;
    let name = s.key("bound");
    let mut managers = Vec::new();
    for _ in 0..4 {
        managers.push(s.manager(s.options().acquire_timeout(s.ttl * 80)).await);
    }
    let in_use = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let sem = managers[i as usize % managers.len()]
            .semaphore(&name, SIZE)
            .expect("semaphore");
        let in_use = in_use.clone();
        let hold = s.hold;
        tasks.push(tokio::spawn(async move {
            let permits = 1 + i % 2;
            let permit = sem.acquire(permits).await.expect("acquire");
            let start = Instant::now();
            let now_in_use = in_use.fetch_add(permits, Ordering::SeqCst) + permits;
            assert!(now_in_use <= SIZE, "{now_in_use} permits in use of {SIZE}");
            tokio::time::sleep(hold).await;
            in_use.fetch_sub(permits, Ordering::SeqCst);
            let end = Instant::now().min(permit.deadline());
            // On a loaded machine the renewer can fall behind (a liveness
            // matter, not this case's; the interval is cut at the local
            // deadline): a release
            // that finds the permit gone must come after its local deadline
            // (the server never ends a permit before it).
            let deadline = permit.deadline();
            let released = permit.release().await.expect("release");
            assert!(
                released == ReleaseOutcome::Released
                    || (released == ReleaseOutcome::Missing && Instant::now() >= deadline),
                "release answered {released:?} before the permit's deadline"
            );
            (start, end, permits)
        }));
    }
    let mut intervals = Vec::new();
    for t in tasks {
        intervals.push(t.await.expect("task"));
    }
    // Sweep: +permits at each start, −permits at each end (ends first on ties:
    // an interval is half-open).
    let mut events: Vec<(Instant, i64)> = intervals
        .iter()
        .flat_map(|&(a, b, k)| [(a, i64::from(k)), (b, -i64::from(k))])
        .collect();
    events.sort_by_key(|&(t, d)| (t, d));
    let mut level = 0i64;
    for (t, d) in events {
        level += d;
        assert!(level <= i64::from(SIZE), "{level} permits held at {t:?}");
    }
    assert_eq!(intervals.len(), TASKS as usize);
}

/// `try_acquire` answers `None` at once when not enough permits are free,
/// and takes what is free.
pub async fn try_acquire_never_waits(s: &SemaphoreSuite) {
    let name = s.key("try");
    let a = s.manager(s.options()).await.semaphore(&name, 2).expect("semaphore");
    let b = s.manager(s.options()).await.semaphore(&name, 2).expect("semaphore");
    let one = a.try_acquire(1).await.expect("try").expect("free");
    assert!(b.try_acquire(2).await.expect("try").is_none(), "only 1 of 2 is free");
    let two = b.try_acquire(1).await.expect("try").expect("one is free");
    assert!(a.try_acquire(1).await.expect("try").is_none(), "all taken");
    assert_eq!(one.release().await.expect("release"), ReleaseOutcome::Released);
    assert_eq!(two.release().await.expect("release"), ReleaseOutcome::Released);
}

/// A holder that dies (never releases, never renews) gives its permits back
/// when its lease expires, by the server's clock.
pub async fn expiry_returns_dead_holders_permits(s: &SemaphoreSuite) {
    let name = s.key("dead");
    let dead = s.client().await;
    let token = LockToken::generate().expect("token");
    // From before the grant: the server's TTL starts after this instant,
    // however long the grant itself took (a loaded machine).
    let sent = Instant::now();
    let granted = dead
        .acquire_permits(&name, &token, PermitRequest::new(2, 2), s.ttl)
        .await
        .expect("acquire");
    assert!(matches!(granted, AcquireOutcome::Acquired(_)));
    let sem = s.manager(s.options()).await.semaphore(&name, 2).expect("semaphore");
    assert!(
        sem.try_acquire(1).await.expect("try").is_none(),
        "the dead holder's lease runs"
    );
    let permit = sem.acquire(2).await.expect("permits come back at expiry");
    assert!(
        Instant::now() >= sent + s.ttl / 2,
        "permits came back long before the dead holder's TTL"
    );
    assert_eq!(permit.release().await.expect("release"), ReleaseOutcome::Released);
}

/// After its lease expired and another took the permits, a stale holder can
/// neither release nor renew, and its repeated release does not free a
/// permit twice (no capacity inflation).
pub async fn stale_holder_cannot_release_or_renew(s: &SemaphoreSuite) {
    let name = s.key("stale");
    let backend = s.client().await;
    let stale = LockToken::generate().expect("token");
    let req = PermitRequest::new(1, 1);
    backend
        .acquire_permits(&name, &stale, req, s.ttl)
        .await
        .expect("acquire");
    tokio::time::sleep(s.ttl * 2).await;
    let sem = s.manager(s.options()).await.semaphore(&name, 1).expect("semaphore");
    let holder = sem.try_acquire(1).await.expect("try").expect("stale lease expired");
    assert_eq!(
        backend.renew_permits(&name, &stale, s.ttl).await.expect("renew"),
        RenewOutcome::Missing
    );
    for _ in 0..2 {
        assert_eq!(
            backend.release_permits(&name, &stale).await.expect("release"),
            ReleaseOutcome::Missing
        );
    }
    assert!(
        sem.try_acquire(1).await.expect("try").is_none(),
        "a stale release must not free the current holder's permit"
    );
    assert!(!holder.is_lost());
    assert_eq!(holder.release().await.expect("release"), ReleaseOutcome::Released);
}

/// A clean-up release that reaches the server before its own acquire (the
/// acquire's reply was lost and the client switched connections) makes that
/// late acquire fail: no permit is taken that nobody owns.
pub async fn release_before_acquire_refuses_the_late_acquire(s: &SemaphoreSuite) {
    let name = s.key("overtaken");
    let backend = s.client().await;
    let token = LockToken::generate().expect("token");
    assert_eq!(
        backend.release_permits(&name, &token).await.expect("release"),
        ReleaseOutcome::Missing
    );
    let late = backend
        .acquire_permits(&name, &token, PermitRequest::new(1, 1), s.ttl)
        .await
        .expect("acquire");
    assert!(matches!(late, AcquireOutcome::Held { .. }), "{late:?}");
    let sem = s.manager(s.options()).await.semaphore(&name, 1).expect("semaphore");
    let p = sem.try_acquire(1).await.expect("try").expect("the permit is free");
    p.release().await.expect("release");
}

/// The size is fixed while any permit is held: another size is a typed
/// error, and once the semaphore is empty a new size is accepted.
pub async fn size_mismatch_is_an_error(s: &SemaphoreSuite) {
    let name = s.key("size");
    let m = s.manager(s.options()).await;
    let two = m.semaphore(&name, 2).expect("semaphore");
    let three = m.semaphore(&name, 3).expect("semaphore");
    let p = two.acquire(1).await.expect("acquire");
    match three.acquire(1).await {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("size"), "{msg}"),
        other => panic!("expected a size error, got {other:?}"),
    }
    assert!(matches!(three.try_acquire(1).await, Err(Error::InvalidArgument(_))));
    p.release().await.expect("release");
    let q = three.acquire(3).await.expect("an empty semaphore takes a new size");
    q.release().await.expect("release");
}

/// Bad requests fail with `InvalidArgument`, on the manager and on the raw
/// backend alike.
pub async fn invalid_requests_are_rejected(s: &SemaphoreSuite) {
    let name = s.key("invalid");
    let m = s.manager(s.options()).await;
    assert!(matches!(m.semaphore(&name, 0), Err(Error::InvalidArgument(_))));
    assert!(matches!(m.semaphore("", 1), Err(Error::InvalidArgument(_))));
    let sem = m.semaphore(&name, 2).expect("semaphore");
    assert!(matches!(sem.acquire(0).await, Err(Error::InvalidArgument(_))));
    assert!(matches!(sem.try_acquire(3).await, Err(Error::InvalidArgument(_))));
    let raw = s.client().await;
    let token = LockToken::generate().expect("token");
    for req in [
        PermitRequest::new(0, 0),
        PermitRequest::new(2, 3),
        PermitRequest::new(2, 0),
    ] {
        assert!(matches!(
            raw.acquire_permits(&name, &token, req, s.ttl).await,
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        raw.acquire_permits(&name, &token, PermitRequest::new(1, 1), Duration::ZERO)
            .await,
        Err(Error::InvalidArgument(_))
    ));
}

/// Automatic renewal keeps the permits well past the TTL.
pub async fn auto_renew_keeps_permits(s: &SemaphoreSuite) {
    let name = s.key("renew");
    let sem = s.manager(s.options()).await.semaphore(&name, 1).expect("semaphore");
    let other = s.manager(s.options()).await.semaphore(&name, 1).expect("semaphore");
    let p = sem.acquire(1).await.expect("acquire");
    tokio::time::sleep(s.ttl * 3).await;
    assert!(!p.is_lost(), "renewed permits are not lost");
    assert!(other.try_acquire(1).await.expect("try").is_none(), "still held");
    assert_eq!(p.release().await.expect("release"), ReleaseOutcome::Released);
}

/// Dropping a permit returns it at once (not at its TTL): the next holder
/// gets it although the dropped lease was 100 TTLs long.
pub async fn drop_returns_permits(s: &SemaphoreSuite) {
    let name = s.key("drop");
    let long = s.manager(s.manual().ttl(s.ttl * 100)).await;
    let p = long
        .semaphore(&name, 1)
        .expect("semaphore")
        .acquire(1)
        .await
        .expect("acquire");
    drop(p);
    let next = s.manager(s.options().acquire_timeout(s.ttl * 20)).await;
    let q = next
        .semaphore(&name, 1)
        .expect("semaphore")
        .acquire(1)
        .await
        .expect("returned on drop");
    q.release().await.expect("release");
}

/// When the backend stops answering, `lost()` fires by the local deadline
/// (before the server's lease can run out).
pub async fn lost_fires_by_deadline_when_backend_hangs(s: &SemaphoreSuite) {
    let name = s.key("hang");
    let (backend, hang) = Hanging::new(s.client().await);
    let m = SemaphoreManager::with_options(backend, s.options()).expect("manager");
    let sent = Instant::now();
    let p = m
        .semaphore(&name, 2)
        .expect("semaphore")
        .acquire(1)
        .await
        .expect("acquire");
    hang.store(true, Ordering::SeqCst);
    assert_lost_by_deadline(&p.handle(), sent, s.ttl, s.slack).await;
    hang.store(false, Ordering::SeqCst);
    drop(p);
}

/// `with_permits` returns the body's output and gives the permits back.
pub async fn with_permits_returns_output(s: &SemaphoreSuite) {
    let name = s.key("with");
    let sem = s.manager(s.options()).await.semaphore(&name, 1).expect("semaphore");
    let out = sem
        .with_permits(1, |lease| async move { lease.name_len() })
        .await
        .expect("with_permits");
    assert_eq!(out, name.len());
    let again = sem.try_acquire(1).await.expect("try").expect("given back");
    again.release().await.expect("release");
}

trait NameLen {
    fn name_len(&self) -> usize;
}

impl NameLen for lock_core::LeaseHandle {
    fn name_len(&self) -> usize {
        self.key().len()
    }
}

/// Fencing tokens strictly increase per name, grant after grant, where the
/// backend issues them.
pub async fn fencing_tokens_increase(s: &SemaphoreSuite) {
    let name = s.key("fence");
    let m = s.manager(s.options()).await;
    // Every semaphore backend issues them, whatever its mutex's setting.
    let sem = m.semaphore(&name, 2).expect("semaphore");
    let mut last = None;
    for _ in 0..5 {
        let a = sem.acquire(1).await.expect("acquire");
        let b = sem.acquire(1).await.expect("acquire");
        let (fa, fb) = (a.fencing_token().expect("fence"), b.fencing_token().expect("fence"));
        assert!(fb > fa, "{fb:?} after {fa:?}");
        if let Some(l) = last {
            assert!(fa > l, "{fa:?} after {l:?}");
        }
        last = Some(fb);
        a.release().await.expect("release");
        b.release().await.expect("release");
    }
}

/// `x` and `{x}` are two semaphores: a backend that names a semaphore's keys
/// by wrapping an untagged name in braces must not give both the same keys
/// (they would share permits and size).
pub async fn names_with_and_without_a_hash_tag_are_separate(s: &SemaphoreSuite) {
    let plain = s.key("tagged");
    let tagged = format!("{{{plain}}}");
    let m = s.manager(s.options()).await;
    let one = m.semaphore(&plain, 1).expect("semaphore");
    let two = m.semaphore(&tagged, 2).expect("semaphore");
    let p = one.acquire(1).await.expect("acquire");
    let q = two
        .try_acquire(2)
        .await
        .expect("another name: no size mismatch")
        .expect("another name: all its permits are free");
    p.release().await.expect("release");
    q.release().await.expect("release");
}

/// Liveness: a waiter asking for every permit completes under single-permit
/// churn. Four single-permit holders on their own managers share a
/// semaphore of 3, each holding for twice the TTL and coming back at once,
/// so permits never all come free by themselves; a waiter for 3 permits on
/// another manager leaves a reservation that refuses newcomers until the
/// holders inside leave. It gets all three twice, each within its acquire
/// timeout (10 TTLs, a generous bound on one holder's hold plus a third of
/// the TTL).
pub async fn multi_permit_waiter_completes_under_single_permit_churn(s: &SemaphoreSuite) {
    use std::sync::atomic::AtomicBool;
    const SIZE: u32 = 3;
    let name = s.key("churn");
    let stop = Arc::new(AtomicBool::new(false));
    let mut churners = Vec::new();
    for i in 0..4u32 {
        let sem = s
            .manager(s.options().acquire_timeout(s.ttl * 40))
            .await
            .semaphore(&name, SIZE)
            .expect("semaphore");
        let stop = stop.clone();
        let hold = s.ttl * 2;
        let stagger = s.ttl / 2 * i;
        churners.push(tokio::spawn(async move {
            tokio::time::sleep(stagger).await;
            while !stop.load(Ordering::SeqCst) {
                if let Ok(p) = sem.acquire(1).await {
                    tokio::time::sleep(hold).await;
                    let _ = p.release().await;
                }
            }
        }));
    }
    tokio::time::sleep(s.ttl * 2).await;
    let big = s
        .manager(s.options().acquire_timeout(s.ttl * 10))
        .await
        .semaphore(&name, SIZE)
        .expect("semaphore");
    let mut got = 0;
    for _ in 0..2 {
        match big.acquire(SIZE).await {
            Ok(p) => {
                tokio::time::sleep(s.hold).await;
                let _ = p.release().await;
                got += 1;
            }
            Err(e) => eprintln!("the multi-permit waiter's acquire failed: {e}"),
        }
    }
    stop.store(true, Ordering::SeqCst);
    for c in churners {
        c.await.expect("churner task");
    }
    assert_eq!(got, 2, "the 3-permit waiter starved: {got} of 2 acquisitions");
}

/// Fairness across permit sizes: two 2-permit waiters, each on its own
/// manager, among single-permit churn (four holders of 1 permit of 3, each
/// holding twice the TTL and coming back at once). The one reservation per
/// name goes to one 2-permit waiter at a time (an equal request does not
/// take it over): each gets in three times, every wait within its acquire
/// timeout (20 TTLs: the bound is the other 2-permit waiter's turn, one
/// churner's hold and a third of the TTL, twice over).
pub async fn two_permit_waiters_complete_under_single_permit_churn(s: &SemaphoreSuite) {
    use std::sync::atomic::AtomicBool;
    const SIZE: u32 = 3;
    const ROUNDS: u32 = 3;
    let name = s.key("churn2");
    let stop = Arc::new(AtomicBool::new(false));
    let singles = Arc::new(AtomicU32::new(0));
    let mut churners = Vec::new();
    for i in 0..4u32 {
        let sem = s
            .manager(s.options().acquire_timeout(s.ttl * 40))
            .await
            .semaphore(&name, SIZE)
            .expect("semaphore");
        let (stop, singles) = (stop.clone(), singles.clone());
        let hold = s.ttl * 2;
        let stagger = s.ttl / 2 * i;
        churners.push(tokio::spawn(async move {
            tokio::time::sleep(stagger).await;
            while !stop.load(Ordering::SeqCst) {
                if let Ok(p) = sem.acquire(1).await {
                    singles.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(hold).await;
                    let _ = p.release().await;
                }
            }
        }));
    }
    tokio::time::sleep(s.ttl * 2).await;
    let mut doubles = Vec::new();
    for _ in 0..2 {
        let sem = s
            .manager(s.options().acquire_timeout(s.ttl * 20))
            .await
            .semaphore(&name, SIZE)
            .expect("semaphore");
        let hold = s.hold;
        doubles.push(tokio::spawn(async move {
            let mut got = 0;
            for _ in 0..ROUNDS {
                match sem.acquire(2).await {
                    Ok(p) => {
                        tokio::time::sleep(hold).await;
                        let _ = p.release().await;
                        got += 1;
                    }
                    Err(e) => eprintln!("a 2-permit waiter's acquire failed: {e}"),
                }
            }
            got
        }));
    }
    let mut got = Vec::new();
    for d in doubles {
        got.push(d.await.expect("2-permit task"));
    }
    stop.store(true, Ordering::SeqCst);
    for c in churners {
        c.await.expect("churner task");
    }
    assert!(singles.load(Ordering::SeqCst) > 0, "the single-permit churn never ran");
    assert_eq!(
        got,
        [ROUNDS, ROUNDS],
        "a 2-permit waiter starved under single-permit churn"
    );
}
