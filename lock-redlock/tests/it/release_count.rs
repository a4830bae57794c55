//! A release sends one delete per node that may hold the key (issue 15:
//! server commands per pair). A node still answering the acquire when the
//! lock is released is released once, after its answer, and a write that
//! lands after the release still leaves no key behind. Memory nodes,
//! tokio's paused clock.

#![allow(clippy::expect_used, clippy::panic)] // test helpers

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{Capabilities, Error, LockBackend, LockToken, Result};

use lock_core::raw::async_trait;

use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_memory::MemoryBackend;
use lock_redlock::Redlock;
use tokio::sync::watch;

/// When a node applies an acquire relative to its gate.
#[derive(Clone, Copy, PartialEq)]
enum Acquire {
    /// Applies and answers at once.
    Fast,
    /// Applies at once, answers when the gate opens.
    LateReply,
    /// Applies and answers when the gate opens (the write itself is late).
    LateWrite,
}

struct Node {
    inner: MemoryBackend,
    acquire: Acquire,
    gate: watch::Receiver<bool>,
    releases: AtomicUsize,
    fail_release: bool,
}

impl Node {
    async fn gate(&self) {
        let mut gate = self.gate.clone();
        let _ = gate.wait_for(|open| *open).await;
    }
}

#[async_trait]
impl LockBackend for Node {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        match self.acquire {
            Acquire::Fast => self.inner.try_acquire(key, token, ttl).await,
            Acquire::LateReply => {
                let outcome = self.inner.try_acquire(key, token, ttl).await;
                self.gate().await;
                outcome
            }
            Acquire::LateWrite => {
                self.gate().await;
                self.inner.try_acquire(key, token, ttl).await
            }
        }
    }
    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        if self.fail_release {
            return Err(Error::backend("test", "connection reset"));
        }
        self.inner.release(key, token).await
    }
    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.inner.renew(key, token, ttl).await
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

struct Cluster {
    nodes: Vec<Arc<Node>>,
    redlock: Redlock,
    open: watch::Sender<bool>,
}

/// Five nodes: 0–2 answer at once (0 fails its releases when asked), 3–4 as `slow`.
fn cluster(slow: Acquire, node_0_fails_release: bool) -> Cluster {
    let (open, gate) = watch::channel(false);
    let nodes: Vec<Arc<Node>> = (0..5)
        .map(|i| {
            Arc::new(Node {
                inner: MemoryBackend::new(),
                acquire: if i < 3 { Acquire::Fast } else { slow },
                gate: gate.clone(),
                releases: AtomicUsize::new(0),
                fail_release: i == 0 && node_0_fails_release,
            })
        })
        .collect();
    let redlock = Redlock::new(nodes.iter().map(|n| n.clone() as Arc<dyn LockBackend>)).expect("redlock");
    Cluster { nodes, redlock, open }
}

impl Cluster {
    fn releases(&self) -> Vec<usize> {
        self.nodes.iter().map(|n| n.releases.load(Ordering::SeqCst)).collect()
    }

    fn keys_left(&self, key: &str) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].inner.lock_ttl(key).is_some())
            .collect()
    }

    /// Open the gate and let every background task finish (the paused clock
    /// only moves when every task is idle).
    async fn settle(&self) {
        self.open.send_replace(true);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

const TTL: Duration = Duration::from_secs(30);

async fn acquire(c: &Cluster, key: &str) -> LockToken {
    let token = LockToken::generate().expect("token");
    assert!(matches!(
        c.redlock.try_acquire(key, &token, TTL).await,
        Ok(AcquireOutcome::Acquired(_))
    ));
    token
}

#[tokio::test(start_paused = true)]
async fn a_node_still_answering_the_acquire_is_released_once() {
    let c = cluster(Acquire::LateReply, false);
    let key = "late-reply";
    let token = acquire(&c, key).await;
    assert_eq!(
        c.redlock.release(key, &token).await.expect("release"),
        ReleaseOutcome::Released
    );
    c.settle().await;
    assert_eq!(c.keys_left(key), Vec::<usize>::new(), "keys left behind");
    assert_eq!(
        c.releases(),
        vec![1, 1, 1, 1, 1],
        "release calls per node: one each, no repeat for nodes that answered the acquire late"
    );
}

#[tokio::test(start_paused = true)]
async fn a_write_landing_after_the_release_leaves_no_key() {
    let c = cluster(Acquire::LateWrite, false);
    let key = "late-write";
    let token = acquire(&c, key).await;
    assert_eq!(
        c.redlock.release(key, &token).await.expect("release"),
        ReleaseOutcome::Released
    );
    c.settle().await;
    assert_eq!(c.keys_left(key), Vec::<usize>::new(), "a late write stayed");
    assert!(c.releases().iter().all(|&n| n <= 1), "{:?}", c.releases());
}

#[tokio::test(start_paused = true)]
async fn a_release_falls_back_to_nodes_still_answering_the_acquire() {
    // Node 0 cannot release: the quorum of releases needs nodes 3 and 4,
    // whose acquire answers have not arrived yet.
    let c = cluster(Acquire::LateReply, true);
    let key = "fallback";
    let token = acquire(&c, key).await;
    assert_eq!(
        c.redlock.release(key, &token).await.expect("release"),
        ReleaseOutcome::Released
    );
    c.settle().await;
    assert_eq!(
        c.keys_left(key),
        vec![0],
        "only the node that failed its release keeps the key"
    );
}

#[tokio::test(start_paused = true)]
async fn sequential_pairs_send_one_release_per_node() {
    let c = cluster(Acquire::Fast, false);
    let key = "sequential";
    for _ in 0..10 {
        let token = acquire(&c, key).await;
        assert_eq!(
            c.redlock.release(key, &token).await.expect("release"),
            ReleaseOutcome::Released
        );
    }
    c.settle().await;
    assert_eq!(c.releases(), vec![10; 5]);
}
