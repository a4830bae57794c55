//! Read-write lock cases: one writer or many readers under contention
//! (checked from recorded intervals), the writer-preferring policy, expiry of
//! dead holders, stale holders, loss at the local deadline.

pub use super::reserved_cases::reserved_rw_names_are_refused;

use std::sync::atomic::Ordering;

use lock_core::{LockToken, RwLockManager, RwMode};

use lock_core::raw::RwLockBackend;

use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use tokio::time::Instant;

use super::RwSuite;
use super::hanging::{Hanging, assert_lost_by_deadline};

/// 32 tasks over 4 clients, one in four a writer: no writer's recorded
/// interval (lock returned → release sent, cut at the local deadline)
/// overlaps any other holder's.
pub async fn one_writer_or_many_readers(s: &RwSuite) {
    const TASKS: usize = 32;
    let name = s.key("bound");
    let mut managers = Vec::new();
    for _ in 0..4 {
        managers.push(s.manager(s.options().acquire_timeout(s.ttl * 80)).await);
    }
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let m = managers[i % managers.len()].clone();
        let name = name.clone();
        let mode = if i % 4 == 0 { RwMode::Write } else { RwMode::Read };
        let hold = s.hold;
        tasks.push(tokio::spawn(async move {
            let g = m.lock_opts(&name, mode, m.options()).await.expect("lock");
            let start = Instant::now();
            tokio::time::sleep(hold).await;
            let end = Instant::now().min(g.deadline());
            // On a loaded machine the renewer can fall behind (a liveness
            // matter, not this case's): the interval is cut at the local
            // deadline, and a release finding the lock gone must come after it.
            let deadline = g.deadline();
            let released = g.release().await.expect("release");
            assert!(
                released == ReleaseOutcome::Released
                    || (released == ReleaseOutcome::Missing && Instant::now() >= deadline),
                "release answered {released:?} before the lock's deadline"
            );
            (mode, start, end)
        }));
    }
    let mut spans = Vec::new();
    for t in tasks {
        spans.push(t.await.expect("task"));
    }
    for (i, &(mode, a0, a1)) in spans.iter().enumerate() {
        if mode != RwMode::Write {
            continue;
        }
        for (j, &(_, b0, b1)) in spans.iter().enumerate() {
            if i != j {
                assert!(a1 <= b0 || b1 <= a0, "a writer overlapped another holder");
            }
        }
    }
}

/// Two readers hold at once.
pub async fn readers_share(s: &RwSuite) {
    let name = s.key("share");
    let a = s.manager(s.options()).await;
    let b = s.manager(s.options()).await;
    let r1 = a.read(&name).await.expect("read");
    let r2 = b
        .try_lock(&name, RwMode::Read)
        .await
        .expect("try")
        .expect("readers share");
    assert!(
        b.try_lock(&name, RwMode::Write).await.expect("try").is_none(),
        "readers hold"
    );
    r1.release().await.expect("release");
    r2.release().await.expect("release");
}

/// A writer excludes readers and other writers.
pub async fn writer_excludes_everyone(s: &RwSuite) {
    let name = s.key("excl");
    let a = s.manager(s.options()).await;
    let b = s.manager(s.options()).await;
    let w = a.write(&name).await.expect("write");
    assert!(b.try_lock(&name, RwMode::Read).await.expect("try").is_none());
    assert!(b.try_lock(&name, RwMode::Write).await.expect("try").is_none());
    w.release().await.expect("release");
    let r = b.try_lock(&name, RwMode::Read).await.expect("try").expect("free again");
    r.release().await.expect("release");
}

/// Writer preference: once a writer waits, new readers are refused (while
/// the reader inside keeps its lock), and the writer gets the lock when
/// that reader leaves.
pub async fn waiting_writer_holds_new_readers_back(s: &RwSuite) {
    let name = s.key("prefer");
    let a = s.manager(s.options()).await;
    let writer = s.manager(s.options().acquire_timeout(s.ttl * 40)).await;
    let c = s.manager(s.options()).await;
    let inside = a.read(&name).await.expect("read");
    let w = {
        let name = name.clone();
        tokio::spawn(async move { writer.write(&name).await.expect("the writer gets its turn") })
    };
    let mut refused = false;
    for _ in 0..200 {
        match c.try_lock(&name, RwMode::Read).await.expect("try") {
            None => {
                refused = true;
                break;
            }
            Some(r) => {
                r.release().await.expect("release");
                tokio::time::sleep(s.ttl / 20).await;
            }
        }
    }
    assert!(refused, "new readers were still admitted while a writer waited");
    assert!(!inside.is_lost(), "the reader inside keeps its lock");
    inside.release().await.expect("release");
    let g = w.await.expect("writer task");
    assert_eq!(g.mode(), RwMode::Write);
    g.release().await.expect("release");
}

/// A dead reader's lease ends by the server's clock; then a writer gets in.
pub async fn expiry_returns_dead_holders_lock(s: &RwSuite) {
    let name = s.key("dead");
    let raw = s.client().await;
    let token = LockToken::generate().expect("token");
    // From before the grant: the server's TTL starts after this instant,
    // however long the grant itself took (a WAIT under load).
    let sent = Instant::now();
    let r = raw
        .try_acquire_rw(&name, RwMode::Read, false, &token, s.ttl)
        .await
        .expect("acquire");
    assert!(matches!(r, AcquireOutcome::Acquired(_)));
    let m = s.manager(s.options()).await;
    let w = m.write(&name).await.expect("the dead reader's lease ends");
    assert!(
        Instant::now() >= sent + s.ttl / 2,
        "the writer got in long before the TTL"
    );
    w.release().await.expect("release");
}

/// A stale writer can neither renew nor release after another took over.
pub async fn stale_holder_cannot_release_or_renew(s: &RwSuite) {
    let name = s.key("stale");
    let raw = s.client().await;
    let stale = LockToken::generate().expect("token");
    raw.try_acquire_rw(&name, RwMode::Write, false, &stale, s.ttl)
        .await
        .expect("acquire");
    tokio::time::sleep(s.ttl * 2).await;
    let m = s.manager(s.options()).await;
    let g = m.try_lock(&name, RwMode::Write).await.expect("try").expect("expired");
    assert_eq!(
        raw.renew_rw(&name, &stale, s.ttl).await.expect("renew"),
        RenewOutcome::Missing
    );
    assert_eq!(
        raw.release_rw(&name, &stale).await.expect("release"),
        ReleaseOutcome::Missing
    );
    assert!(
        m.try_lock(&name, RwMode::Read).await.expect("try").is_none(),
        "still written"
    );
    assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
}

/// When the backend stops answering, `lost()` fires at the local deadline.
pub async fn lost_fires_by_deadline_when_backend_hangs(s: &RwSuite) {
    let name = s.key("hang");
    let (backend, hang) = Hanging::new(s.client().await);
    let m = RwLockManager::with_options(backend, s.options()).expect("manager");
    let sent = Instant::now();
    let g = m.read(&name).await.expect("read");
    hang.store(true, Ordering::SeqCst);
    assert_lost_by_deadline(&g.handle(), sent, s.ttl, s.slack).await;
    hang.store(false, Ordering::SeqCst);
    drop(g);
}

/// `with_rw` returns the body's output and releases.
pub async fn with_rw_returns_output(s: &RwSuite) {
    let name = s.key("with");
    let m = s.manager(s.options()).await;
    let out = m
        .with_rw(&name, RwMode::Write, |_lease| async { 5 })
        .await
        .expect("with_rw");
    assert_eq!(out, 5);
    let again = m.try_lock(&name, RwMode::Write).await.expect("try").expect("released");
    again.release().await.expect("release");
}

/// `x` and `{x}` are two read-write locks: a writer of one does not hold
/// the other back.
pub async fn names_with_and_without_a_hash_tag_are_separate(s: &RwSuite) {
    let plain = s.key("tagged");
    let tagged = format!("{{{plain}}}");
    let m = s.manager(s.options()).await;
    let w = m.write(&plain).await.expect("write");
    let v = m
        .try_lock(&tagged, RwMode::Write)
        .await
        .expect("try")
        .expect("another name is free");
    w.release().await.expect("release");
    v.release().await.expect("release");
}

/// Liveness: writers complete under a continuous stream of readers from
/// several managers (each over its own client, like separate processes).
/// Each reader holds for twice the TTL (renewed) and comes back at once, so
/// some reader holds at every instant; two writers on two other managers
/// each write three times. A waiting writer keeps its intent alive for its
/// whole wait, so new readers are refused and the writer gets in once the
/// readers inside leave: every `write()` returns within its acquire timeout
/// (10 TTLs, a generous bound on the documented wait of one reader hold
/// plus a third of the TTL).
pub async fn writers_complete_under_a_stream_of_readers(s: &RwSuite) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU32};
    const READERS: usize = 4;
    const WRITES: u32 = 3;
    let name = s.key("stream");
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU32::new(0));
    let mut readers = Vec::new();
    for i in 0..READERS {
        let m = s.manager(s.options().acquire_timeout(s.ttl * 40)).await;
        let (name, stop, reads) = (name.clone(), stop.clone(), reads.clone());
        let hold = s.ttl * 2;
        let stagger = s.ttl / 2 * u32::try_from(i).unwrap_or(0);
        readers.push(tokio::spawn(async move {
            tokio::time::sleep(stagger).await;
            while !stop.load(Ordering::SeqCst) {
                if let Ok(g) = m.read(&name).await {
                    reads.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(hold).await;
                    let _ = g.release().await;
                }
            }
        }));
    }
    // Let the readers fill the lock first.
    tokio::time::sleep(s.ttl * 2).await;
    let mut writers = Vec::new();
    for _ in 0..2 {
        let m = s.manager(s.options().acquire_timeout(s.ttl * 10)).await;
        let name = name.clone();
        let hold = s.hold;
        writers.push(tokio::spawn(async move {
            let mut done = 0;
            for _ in 0..WRITES {
                match m.write(&name).await {
                    Ok(g) => {
                        tokio::time::sleep(hold).await;
                        let _ = g.release().await;
                        done += 1;
                    }
                    Err(e) => eprintln!("a writer's write() failed: {e}"),
                }
            }
            done
        }));
    }
    let mut writes = 0;
    for w in writers {
        writes += w.await.expect("writer task");
    }
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        r.await.expect("reader task");
    }
    assert!(reads.load(Ordering::SeqCst) > 0, "the readers never read");
    assert_eq!(
        writes,
        2 * WRITES,
        "writers starved by the readers: {writes} of {} writes",
        2 * WRITES
    );
}

/// Every writer grant carries a fencing token, strictly increasing per
/// name whatever the mutex's fencing setting; readers carry none.
pub async fn writer_fencing_tokens_increase(s: &RwSuite) {
    let name = s.key("fence");
    let a = s.manager(s.options()).await;
    let b = s.manager(s.options()).await;
    let mut last = None;
    for m in [&a, &b, &a] {
        let w = m.write(&name).await.expect("write");
        let token = w.fencing_token().expect("a writer's fencing token");
        assert!(last.is_none_or(|l| token > l), "{token:?} after {last:?}");
        last = Some(token);
        w.release().await.expect("release");
    }
    let r = a.read(&name).await.expect("read");
    assert_eq!(r.fencing_token(), None, "readers carry no token");
    r.release().await.expect("release");
}
