//! Upgradeable read cases: one upgradeable holder at a time with plain
//! readers beside it, writers excluded while it reads, an upgrade that
//! waits for the other readers (refusing new ones) and then excludes
//! everyone, a downgrade back, and a lost or released upgradeable read that
//! can no longer be upgraded.

use std::sync::atomic::Ordering;

use lock_core::raw::RwLockBackend;

use lock_core::{AcquireOutcome, ReleaseOutcome};
use lock_core::{Error, LockToken, RwLockManager, RwMode};
use tokio::time::Instant;

use super::RwSuite;
use super::hanging::{Hanging, assert_lost_by_deadline};

/// An upgradeable read whose renewals stop reaching the backend is lost by
/// its local deadline, and its guard then refuses to upgrade
/// ([`Error::NotHeld`]), releasing what it held.
pub async fn lost_upgradeable_guard_refuses_to_upgrade(s: &RwSuite) {
    let name = s.key("up-hang");
    let (backend, hang) = Hanging::new(s.client().await);
    let m = RwLockManager::with_options(backend, s.options()).expect("manager");
    let sent = Instant::now();
    let g = m.upgradeable_read(&name).await.expect("upgradeable read");
    hang.store(true, Ordering::SeqCst);
    assert_lost_by_deadline(&g.handle(), sent, s.ttl, s.slack).await;
    hang.store(false, Ordering::SeqCst);
    assert!(
        matches!(g.upgrade().await, Err(Error::NotHeld { .. })),
        "a lost upgradeable read upgraded"
    );
}

/// One upgradeable holder at a time: a second is refused while plain
/// readers still join; a writer is refused; once it leaves, another
/// upgradeable reader gets in beside the readers inside.
pub async fn one_upgradeable_reader_at_a_time(s: &RwSuite) {
    let name = s.key("one-up");
    let a = s.manager(s.options()).await;
    let b = s.manager(s.options()).await;
    let up = a.upgradeable_read(&name).await.expect("upgradeable read");
    assert_eq!(up.mode(), RwMode::Upgradeable);
    assert!(
        b.try_lock(&name, RwMode::Upgradeable).await.expect("try").is_none(),
        "two upgradeable readers at once"
    );
    let reader = b
        .try_lock(&name, RwMode::Read)
        .await
        .expect("try")
        .expect("a plain reader beside the upgradeable one");
    assert!(
        b.try_lock(&name, RwMode::Write).await.expect("try").is_none(),
        "a writer beside the upgradeable reader"
    );
    assert_eq!(up.release().await.expect("release"), ReleaseOutcome::Released);
    let next = b
        .try_lock(&name, RwMode::Upgradeable)
        .await
        .expect("try")
        .expect("the next upgradeable reader, beside the plain one");
    next.release().await.expect("release");
    reader.release().await.expect("release");
}

/// A writer waits while the upgradeable holder reads (its retries refused
/// all along), and gets in once it leaves.
pub async fn writer_waits_while_the_upgrader_reads(s: &RwSuite) {
    let name = s.key("up-writer");
    let a = s.manager(s.options()).await;
    let writer = s.manager(s.options().acquire_timeout(s.ttl * 40)).await;
    let up = a.upgradeable_read(&name).await.expect("upgradeable read");
    let w = {
        let name = name.clone();
        tokio::spawn(async move { writer.write(&name).await })
    };
    for _ in 0..3 {
        tokio::time::sleep(s.ttl / 2).await;
        assert!(!w.is_finished(), "a writer got in while the upgradeable holder read");
    }
    assert!(!up.is_lost(), "the upgradeable holder keeps its read");
    up.release().await.expect("release");
    let g = w.await.expect("writer task").expect("the writer gets its turn");
    assert_eq!(g.mode(), RwMode::Write);
    g.release().await.expect("release");
}

/// An upgrade waits for the plain reader inside, refusing new readers
/// meanwhile; then the write excludes everyone, with a fencing token above
/// the earlier writers'.
pub async fn upgrade_waits_for_readers_then_excludes_everyone(s: &RwSuite) {
    let name = s.key("upgrade");
    let a = s.manager(s.options().acquire_timeout(s.ttl * 40)).await;
    let b = s.manager(s.options()).await;
    let c = s.manager(s.options()).await;
    let earlier = b.write(&name).await.expect("write");
    let before = earlier.fencing_token().expect("a writer's fencing token");
    earlier.release().await.expect("release");
    let up = a.upgradeable_read(&name).await.expect("upgradeable read");
    let inside = b.read(&name).await.expect("a reader beside the upgradeable one");
    let upgrading = tokio::spawn(async move { up.upgrade().await });
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
    assert!(refused, "new readers were still admitted while an upgrade waited");
    assert!(!upgrading.is_finished(), "upgraded with a reader inside");
    assert!(!inside.is_lost(), "the reader inside keeps its lock");
    inside.release().await.expect("release");
    let w = upgrading.await.expect("upgrade task").expect("upgraded");
    assert_eq!(w.mode(), RwMode::Write);
    assert_eq!(w.name(), name);
    let fence = w.fencing_token().expect("the upgraded write's fencing token");
    assert!(fence > before, "{fence:?} after {before:?}");
    for mode in [RwMode::Read, RwMode::Upgradeable, RwMode::Write] {
        assert!(
            c.try_lock(&name, mode).await.expect("try").is_none(),
            "{mode:?} admitted beside the upgraded write"
        );
    }
    assert_eq!(w.release().await.expect("release"), ReleaseOutcome::Released);
    let free = c
        .try_lock(&name, RwMode::Write)
        .await
        .expect("try")
        .expect("free again");
    free.release().await.expect("release");
}

/// An upgrade goes before a writer that waits already (the upgradeable
/// holder is inside; the writer is not): no deadlock, and the writer gets
/// in after the upgraded write.
pub async fn upgrade_goes_before_a_waiting_writer(s: &RwSuite) {
    let name = s.key("up-first");
    let a = s.manager(s.options().acquire_timeout(s.ttl * 40)).await;
    let writer = s.manager(s.options().acquire_timeout(s.ttl * 40)).await;
    let c = s.manager(s.options()).await;
    let up = a.upgradeable_read(&name).await.expect("upgradeable read");
    let w = {
        let name = name.clone();
        tokio::spawn(async move { writer.write(&name).await })
    };
    // The writer waits: its intent refuses new readers (bounded wait).
    let mut waiting = false;
    for _ in 0..200 {
        match c.try_lock(&name, RwMode::Read).await.expect("try") {
            None => {
                waiting = true;
                break;
            }
            Some(r) => {
                r.release().await.expect("release");
                tokio::time::sleep(s.ttl / 20).await;
            }
        }
    }
    assert!(waiting, "the writer never waited");
    let upgraded = up.upgrade().await.expect("the upgrade goes first");
    assert!(!w.is_finished(), "the writer got in beside the upgraded write");
    upgraded.release().await.expect("release");
    let g = w.await.expect("writer task").expect("the writer gets its turn");
    g.release().await.expect("release");
}

/// A downgrade turns the write back into the upgradeable read at once:
/// plain readers join again, writers and other upgradeable readers stay
/// out, and it can be upgraded again. A plain read cannot be upgraded.
pub async fn downgrade_lets_readers_in_but_no_writer(s: &RwSuite) {
    let name = s.key("down");
    let a = s.manager(s.options()).await;
    let b = s.manager(s.options()).await;
    let up = a.upgradeable_read(&name).await.expect("upgradeable read");
    let w = up.upgrade().await.expect("no other reader: upgraded at once");
    let first = w.fencing_token().expect("a writer's fencing token");
    assert!(b.try_lock(&name, RwMode::Read).await.expect("try").is_none());
    let down = w.downgrade().await.expect("downgrade");
    assert_eq!(down.mode(), RwMode::Upgradeable);
    assert_eq!(
        down.fencing_token(),
        None,
        "an upgradeable read carries no fencing token"
    );
    let reader = b
        .try_lock(&name, RwMode::Read)
        .await
        .expect("try")
        .expect("readers join after the downgrade");
    for mode in [RwMode::Write, RwMode::Upgradeable] {
        assert!(
            b.try_lock(&name, mode).await.expect("try").is_none(),
            "{mode:?} admitted beside the downgraded hold"
        );
    }
    reader.release().await.expect("release");
    let again = down.upgrade().await.expect("upgraded again");
    let second = again.fencing_token().expect("a writer's fencing token");
    assert!(second > first, "{second:?} after {first:?}");
    assert_eq!(again.release().await.expect("release"), ReleaseOutcome::Released);
    let plain = b.read(&name).await.expect("read");
    assert!(
        matches!(plain.upgrade().await, Err(Error::InvalidArgument(_))),
        "a plain read was upgraded"
    );
}

/// An upgradeable read whose lease expired, or that was released, can be
/// neither upgraded nor downgraded (nothing written: another upgradeable
/// reader gets in), and a token that never wrote cannot downgrade.
pub async fn lost_upgradeable_read_cannot_upgrade(s: &RwSuite) {
    let name = s.key("up-lost");
    let raw = s.client().await;
    let token = LockToken::generate().expect("token");
    let r = raw
        .try_acquire_rw(&name, RwMode::Upgradeable, false, &token, s.ttl)
        .await
        .expect("acquire");
    assert!(matches!(r, AcquireOutcome::Acquired(_)));
    let other = LockToken::generate().expect("token");
    let r = raw
        .try_acquire_rw(&name, RwMode::Upgradeable, false, &other, s.ttl)
        .await
        .expect("acquire");
    assert!(matches!(r, AcquireOutcome::Held { .. }), "two upgradeable readers");
    assert!(
        matches!(
            raw.downgrade_rw(&name, &token, s.ttl).await,
            Ok(AcquireOutcome::Acquired(_))
        ),
        "a downgrade re-sent by the upgradeable holder refreshes it"
    );
    assert!(
        matches!(raw.downgrade_rw(&name, &other, s.ttl).await, Err(Error::NotHeld { .. })),
        "a token that holds nothing downgraded"
    );
    let expires = Instant::now() + s.ttl;
    while Instant::now() < expires + s.ttl {
        tokio::time::sleep(s.ttl / 2).await;
    }
    assert!(
        matches!(raw.upgrade_rw(&name, &token, s.ttl).await, Err(Error::NotHeld { .. })),
        "an expired upgradeable read upgraded"
    );
    let m = s.manager(s.options()).await;
    let next = m
        .try_lock(&name, RwMode::Upgradeable)
        .await
        .expect("try")
        .expect("the expired one left");
    assert_eq!(next.release().await.expect("release"), ReleaseOutcome::Released);
    let released = LockToken::generate().expect("token");
    raw.try_acquire_rw(&name, RwMode::Upgradeable, false, &released, s.ttl)
        .await
        .expect("acquire");
    assert_eq!(
        raw.release_rw(&name, &released).await.expect("release"),
        ReleaseOutcome::Released
    );
    assert!(
        matches!(
            raw.upgrade_rw(&name, &released, s.ttl).await,
            Err(Error::NotHeld { .. })
        ),
        "a released upgradeable read upgraded"
    );
    let w = m
        .try_lock(&name, RwMode::Write)
        .await
        .expect("try")
        .expect("nothing left behind");
    w.release().await.expect("release");
}

/// 16 tasks over 4 clients: writers, upgradeable readers that upgrade,
/// upgradeable readers that do not, plain readers. No two upgradeable holds
/// overlap (read through write, for one that upgraded), and no write
/// overlaps any other hold (intervals cut at the local deadline).
pub async fn upgraders_and_writers_never_overlap(s: &RwSuite) {
    const TASKS: usize = 16;
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    enum Span {
        Read,
        Write,
        Upgradeable,
    }
    let name = s.key("up-bound");
    let mut managers = Vec::new();
    for _ in 0..4 {
        managers.push(s.manager(s.options().acquire_timeout(s.ttl * 80)).await);
    }
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let m = managers[i % managers.len()].clone();
        let name = name.clone();
        let hold = s.hold;
        tasks.push(tokio::spawn(async move {
            let mut spans = Vec::new();
            let mode = match i % 4 {
                0 => RwMode::Write,
                1 | 2 => RwMode::Upgradeable,
                _ => RwMode::Read,
            };
            let g = m.lock(&name, mode).await.expect("lock");
            let start = Instant::now();
            tokio::time::sleep(hold).await;
            let end = Instant::now().min(g.deadline());
            let g = if i % 4 == 1 {
                // Held through the upgrade's wait: the read's lease ends
                // (its deadline drops to that moment) when the write takes
                // its token over, or at its deadline if lost first.
                let read = g.handle();
                let w = g.upgrade().await.expect("upgrade");
                spans.push((Span::Upgradeable, start, read.deadline()));
                let start = Instant::now();
                tokio::time::sleep(hold).await;
                let end = Instant::now().min(w.deadline());
                spans.push((Span::Write, start, end));
                spans.push((Span::Upgradeable, start, end));
                w
            } else {
                let span = match mode {
                    RwMode::Write => Span::Write,
                    RwMode::Upgradeable => Span::Upgradeable,
                    RwMode::Read => Span::Read,
                };
                spans.push((span, start, end));
                g
            };
            let _ = g.release().await;
            (i, spans)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        let (i, spans) = t.await.expect("task");
        all.extend(spans.into_iter().map(|(kind, a, b)| (i, kind, a, b)));
    }
    for &(i, kind, a0, a1) in &all {
        for &(j, other, b0, b1) in &all {
            if i == j {
                continue;
            }
            let overlap = !(a1 <= b0 || b1 <= a0);
            assert!(!(overlap && kind == Span::Write), "a write overlapped a {other:?} hold");
            assert!(
                !(overlap && kind == Span::Upgradeable && other == Span::Upgradeable),
                "two upgradeable holds overlapped"
            );
        }
    }
}
