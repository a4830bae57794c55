//! Redlock safety rules (issue 11): quorums that give no exclusion are
//! refused, and a release leaves no key on any node, even with a renewal in
//! flight. Memory nodes, tokio's paused clock.

#![allow(clippy::expect_used, clippy::panic)] // test helpers

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{Capabilities, Error, LockBackend, LockToken, Result};

use lock_core::raw::async_trait;

use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_memory::MemoryBackend;
use lock_redlock::{Redlock, RedlockOptions};
use tokio::sync::{Notify, watch};

fn memory_nodes(n: usize) -> Vec<Arc<dyn LockBackend>> {
    (0..n)
        .map(|_| Arc::new(MemoryBackend::new()) as Arc<dyn LockBackend>)
        .collect()
}

#[test]
fn a_quorum_of_two_of_five_is_refused() {
    let err = Redlock::with_options(memory_nodes(5), RedlockOptions::default().quorum(2))
        .expect_err("quorum 2 of 5 lets two clients hold disjoint pairs");
    match err {
        Error::InvalidArgument(message) => assert!(message.contains("2M > N"), "{message}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    for (nodes, quorum) in [(4, 2), (6, 3), (2, 1), (3, 1)] {
        assert!(
            matches!(
                Redlock::with_options(memory_nodes(nodes), RedlockOptions::default().quorum(quorum)),
                Err(Error::InvalidArgument(_))
            ),
            "quorum {quorum} of {nodes} must be refused"
        );
    }
    for (nodes, quorum) in [(5, 3), (5, 5), (4, 3), (2, 2)] {
        let redlock = Redlock::with_options(memory_nodes(nodes), RedlockOptions::default().quorum(quorum))
            .unwrap_or_else(|e| panic!("quorum {quorum} of {nodes} is a majority: {e}"));
        assert_eq!(redlock.quorum(), quorum);
    }
}

#[test]
fn the_default_quorum_is_a_majority() {
    for nodes in 2..=9 {
        let redlock = Redlock::new(memory_nodes(nodes)).expect("valid redlock");
        let quorum = redlock.quorum();
        assert!(2 * quorum > nodes, "{quorum} of {nodes}");
        assert!(
            2 * (quorum - 1) <= nodes,
            "{quorum} of {nodes} is more than the smallest majority"
        );
    }
}

/// A node whose renewals apply at once but answer only when the gate opens:
/// a renewal "in flight" whose effect is already on the node.
struct SlowRenewReply {
    inner: MemoryBackend,
    applied: Arc<AtomicUsize>,
    applied_signal: Arc<Notify>,
    gate: watch::Receiver<bool>,
}

#[async_trait]
impl LockBackend for SlowRenewReply {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.inner.try_acquire(key, token, ttl).await
    }
    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.inner.release(key, token).await
    }
    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        let outcome = self.inner.renew(key, token, ttl).await;
        self.applied.fetch_add(1, Ordering::SeqCst);
        self.applied_signal.notify_waiters();
        let mut gate = self.gate.clone();
        let _ = gate.wait_for(|open| *open).await;
        outcome
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

#[tokio::test(start_paused = true)]
async fn a_release_during_a_renewal_leaves_no_key_on_any_node() {
    let ttl = Duration::from_secs(30);
    let memory: Vec<MemoryBackend> = (0..3).map(|_| MemoryBackend::new()).collect();
    let applied = Arc::new(AtomicUsize::new(0));
    let applied_signal = Arc::new(Notify::new());
    let (open, gate) = watch::channel(false);
    // Nodes 0 and 1 answer renewals late; node 2 answers at once.
    let nodes: Vec<Arc<dyn LockBackend>> = memory
        .iter()
        .enumerate()
        .map(|(i, m)| {
            if i < 2 {
                Arc::new(SlowRenewReply {
                    inner: m.clone(),
                    applied: applied.clone(),
                    applied_signal: applied_signal.clone(),
                    gate: gate.clone(),
                }) as Arc<dyn LockBackend>
            } else {
                Arc::new(m.clone()) as Arc<dyn LockBackend>
            }
        })
        .collect();
    let redlock = Redlock::new(nodes).expect("valid redlock");
    let token = LockToken::generate().expect("token");
    let key = "reseed-after-release";
    assert!(matches!(
        redlock.try_acquire(key, &token, ttl).await,
        Ok(AcquireOutcome::Acquired(_))
    ));
    // Node 2 loses the key (restarted without its data).
    assert_eq!(
        memory[2].release(key, &token).await.expect("release"),
        ReleaseOutcome::Released
    );

    // A renewal goes out; nodes 0 and 1 apply it, their answers are slow.
    let renewing = {
        let (redlock, key) = (redlock.clone(), key.to_owned());
        tokio::spawn(async move { redlock.renew(&key, &token, ttl).await })
    };
    while applied.load(Ordering::SeqCst) < 2 {
        let notified = applied_signal.notified();
        if applied.load(Ordering::SeqCst) >= 2 {
            break;
        }
        notified.await;
    }
    // The holder releases meanwhile.
    assert_eq!(
        redlock.release(key, &token).await.expect("release"),
        ReleaseOutcome::Released
    );
    for (i, m) in memory.iter().enumerate() {
        assert_eq!(
            m.lock_ttl(key),
            None,
            "node {i} still has the key right after the release"
        );
    }
    // Now the renewal's answers arrive: "renewed" by a quorum (as applied
    // before the release), "missing" from node 2.
    open.send_replace(true);
    let _ = renewing.await.expect("renew task");
    // Let every background task run (the paused clock only moves when all
    // tasks are idle).
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (i, m) in memory.iter().enumerate() {
        assert_eq!(
            m.lock_ttl(key),
            None,
            "node {i} holds the key after its release: a renewal in flight re-seeded it"
        );
    }
}
