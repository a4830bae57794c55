//! Leader-election cases: one leader at a time under contention (checked
//! from recorded intervals, terms increasing), reads, observers, expiry,
//! stale leaders, loss at the local deadline.

pub use super::reserved_cases::reserved_election_names_are_refused;

use std::sync::atomic::Ordering;

use futures::StreamExt;
use lock_core::raw::ElectionBackend;
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{ElectionManager, Error, LeaderInfo, LockToken};
use tokio::time::Instant;

use super::ElectionSuite;
use super::hanging::{Hanging, assert_lost_by_deadline};

/// 32 campaigners over 4 clients: the recorded leadership intervals (won →
/// resign sent, cut at the local deadline) never overlap, and terms increase
/// in the order of the intervals.
pub async fn one_leader_at_a_time(s: &ElectionSuite) {
    const TASKS: usize = 32;
    let name = s.key("one");
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
            let l = m
                .campaign(&name, format!("node-{i}").as_bytes())
                .await
                .expect("campaign");
            let start = Instant::now();
            tokio::time::sleep(hold).await;
            let end = Instant::now().min(l.deadline());
            // On a loaded machine the renewer can fall behind (a liveness
            // matter, not this case's): the interval is cut at the local
            // deadline, and a resignation finding the term gone must come after it.
            let term = l.term();
            let deadline = l.deadline();
            let resigned = l.resign().await.expect("resign");
            assert!(
                resigned == ReleaseOutcome::Released
                    || (resigned == ReleaseOutcome::Missing && Instant::now() >= deadline),
                "resign answered {resigned:?} before the leadership's deadline"
            );
            (start, end, term)
        }));
    }
    let mut spans = Vec::new();
    for t in tasks {
        spans.push(t.await.expect("task"));
    }
    spans.sort();
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0, "two leaders at once: {:?} and {:?}", w[0], w[1]);
        assert!(w[0].2 < w[1].2, "terms must increase: {} then {}", w[0].2, w[1].2);
    }
}

/// `leader` reads the identity and term of the current leader, and `None`
/// once it resigned.
pub async fn leader_reads_identity_and_term(s: &ElectionSuite) {
    let name = s.key("read");
    let a = s.manager(s.options()).await;
    let b = s.manager(s.options()).await;
    assert_eq!(b.leader(&name).await.expect("read"), None);
    let l = a.campaign(&name, b"node-a\x00\xff").await.expect("campaign");
    let info = b.leader(&name).await.expect("read").expect("a leader");
    assert_eq!(info.identity, b"node-a\x00\xff");
    assert_eq!(info.term, l.term());
    assert!(b.try_campaign(&name, b"node-b").await.expect("try").is_none());
    l.resign().await.expect("resign");
    assert_eq!(b.leader(&name).await.expect("read"), None);
}

/// Three observers each see leader A, then leader B after A resigns and B
/// wins. Its precondition is that A still leads when the observers first
/// read: A's lease lost meanwhile (renewals late on a loaded machine, with
/// the short suite TTLs) makes the attempt void, and it runs again on a
/// fresh name (bounded), never passing on a lost lease.
pub async fn every_observer_sees_the_change(s: &ElectionSuite) {
    for attempt in 0..3 {
        if observers_see_the_change(s, attempt).await {
            return;
        }
    }
    panic!("leader A lost its lease before the observers read it, three times in a row");
}

/// One attempt of [`every_observer_sees_the_change`]: false when A's lease
/// was lost before B took over (the attempt says nothing then).
async fn observers_see_the_change(s: &ElectionSuite, attempt: usize) -> bool {
    let name = s.key(&format!("observe-{attempt}"));
    let a = s.manager(s.options()).await;
    let b = s.manager(s.options()).await;
    let first = a.campaign(&name, b"a").await.expect("campaign");
    let mut observers = Vec::new();
    let (ready_tx, mut ready) = tokio::sync::mpsc::unbounded_channel::<()>();
    for _ in 0..3 {
        let ready_tx = ready_tx.clone();
        let m = s.manager(s.options()).await;
        let stream = m.observe(&name, s.ttl / 10);
        let within = s.ttl * 20;
        observers.push(tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            let mut seen: Vec<Option<Vec<u8>>> = Vec::new();
            let until_b = async {
                while let Some(item) = stream.next().await {
                    let id = item.expect("the backend is up").map(|l: LeaderInfo| l.identity);
                    let done = id.as_deref() == Some(b"b".as_slice());
                    seen.push(id);
                    if seen.len() == 1 {
                        let _ = ready_tx.send(());
                    }
                    if done {
                        break;
                    }
                }
            };
            tokio::time::timeout(within, until_b)
                .await
                .expect("observer saw leader b");
            seen
        }));
    }
    // Change the leader only once every observer has read the first one.
    for _ in 0..3 {
        tokio::time::timeout(s.ttl * 20, ready.recv())
            .await
            .expect("every observer reads the leader");
    }
    let lost_before = first.handle().is_lost();
    first.resign().await.expect("resign");
    let second = b.campaign(&name, b"b").await.expect("campaign");
    let mut seen_all = Vec::new();
    for o in observers {
        seen_all.push(o.await.expect("observer"));
    }
    second.resign().await.expect("resign");
    if lost_before && seen_all.iter().any(|seen| seen.first() != Some(&Some(b"a".to_vec()))) {
        return false;
    }
    for seen in seen_all {
        assert_eq!(seen.first(), Some(&Some(b"a".to_vec())), "{seen:?}");
        assert_eq!(seen.last(), Some(&Some(b"b".to_vec())), "{seen:?}");
    }
    true
}

/// A dead leader's lease ends by the server's clock; the next campaigner
/// wins with a higher term.
pub async fn expiry_hands_over(s: &ElectionSuite) {
    let name = s.key("dead");
    let raw = s.client().await;
    let token = LockToken::generate().expect("token");
    // From before the grant: the server's TTL starts after this instant,
    // however long the grant itself took (a WAIT under load).
    let sent = Instant::now();
    let won = raw.try_lead(&name, &token, b"dead", s.ttl).await.expect("lead");
    let AcquireOutcome::Acquired(lease) = won else {
        panic!("the first campaign wins");
    };
    let m = s.manager(s.options()).await;
    let l = m.campaign(&name, b"next").await.expect("the dead leader's lease ends");
    assert!(Instant::now() >= sent + s.ttl / 2, "took over long before the TTL");
    assert!(Some(l.term()) > lease.fencing_token.map(|t| t.0), "terms increase");
    l.resign().await.expect("resign");
}

/// A stale leader cannot resign or renew its successor's leadership.
pub async fn stale_leader_cannot_resign_or_renew(s: &ElectionSuite) {
    let name = s.key("stale");
    let raw = s.client().await;
    let stale = LockToken::generate().expect("token");
    raw.try_lead(&name, &stale, b"old", s.ttl).await.expect("lead");
    tokio::time::sleep(s.ttl * 2).await;
    let m = s.manager(s.options()).await;
    let l = m.try_campaign(&name, b"new").await.expect("try").expect("expired");
    assert_eq!(
        raw.renew_lead(&name, &stale, s.ttl).await.expect("renew"),
        RenewOutcome::HeldByOther
    );
    assert_eq!(
        raw.resign(&name, &stale).await.expect("resign"),
        ReleaseOutcome::HeldByOther
    );
    let info = m.leader(&name).await.expect("read").expect("a leader");
    assert_eq!(info.identity, b"new");
    assert_eq!(l.resign().await.expect("resign"), ReleaseOutcome::Released);
}

/// When the backend stops answering, `lost()` fires at the local deadline.
pub async fn lost_fires_by_deadline_when_backend_hangs(s: &ElectionSuite) {
    let name = s.key("hang");
    let (backend, hang) = Hanging::new(s.client().await);
    let m = ElectionManager::with_options(backend, s.options()).expect("manager");
    let sent = Instant::now();
    let l = m.campaign(&name, b"a").await.expect("campaign");
    hang.store(true, Ordering::SeqCst);
    assert_lost_by_deadline(&l.handle(), sent, s.ttl, s.slack).await;
    hang.store(false, Ordering::SeqCst);
    drop(l);
}

/// Empty or oversized identities and empty names are `InvalidArgument`.
pub async fn invalid_campaigns_are_rejected(s: &ElectionSuite) {
    let name = s.key("invalid");
    let m = s.manager(s.options()).await;
    assert!(matches!(
        m.try_campaign(&name, b"").await,
        Err(Error::InvalidArgument(_))
    ));
    let big = vec![b'x'; lock_core::ElectionManager::MAX_IDENTITY + 1];
    assert!(matches!(
        m.try_campaign(&name, &big).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(m.try_campaign("", b"a").await, Err(Error::InvalidArgument(_))));
    let raw = s.client().await;
    let token = LockToken::generate().expect("token");
    assert!(matches!(
        raw.try_lead(&name, &token, b"", s.ttl).await,
        Err(Error::InvalidArgument(_))
    ));
}

/// `x` and `{x}` are two elections, each with its own leader.
pub async fn names_with_and_without_a_hash_tag_are_separate(s: &ElectionSuite) {
    let plain = s.key("tagged");
    let tagged = format!("{{{plain}}}");
    let m = s.manager(s.options()).await;
    let a = m.campaign(&plain, b"a").await.expect("campaign");
    let b = m
        .try_campaign(&tagged, b"b")
        .await
        .expect("try")
        .expect("another name has no leader");
    assert_eq!(
        m.leader(&plain).await.expect("read").map(|l| l.identity),
        Some(b"a".to_vec())
    );
    assert_eq!(
        m.leader(&tagged).await.expect("read").map(|l| l.identity),
        Some(b"b".to_vec())
    );
    a.resign().await.expect("resign");
    b.resign().await.expect("resign");
}
