//! Redlock for verrou: one [`LockBackend`] over N independent inner backends
//! (`Arc<dyn LockBackend>`: Lua-on-Redis, Tair and memory nodes can be mixed),
//! holding a lock while a quorum `M` of them (a majority: `2M > N`,
//! default `N / 2 + 1`) hold it for the same token.
//!
//! ```
//! # async fn demo() -> lock_core::Result<()> {
//! use std::sync::Arc;
//! use lock_core::{LockBackend, LockManager};
//! use lock_memory::MemoryBackend;
//! use lock_redlock::Redlock;
//!
//! let nodes: Vec<Arc<dyn LockBackend>> = (0..3).map(|_| Arc::new(MemoryBackend::new()) as _).collect();
//! let locks = LockManager::new(Redlock::new(nodes)?);
//! let guard = locks.lock("invoice:42").await?;
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # The algorithm
//!
//! - **Acquire** sends the same token to every node in parallel, each call
//!   bounded by a per-node timeout (`ttl × 0.05`, clamped to 10 ms ..= 1 s;
//!   see [`RedlockOptions`]). It returns as soon as the quorum is decided:
//!   `M` grants, or enough refusals and failures that `M` grants are
//!   impossible. A grant counts only if the remaining validity — TTL minus
//!   the time since the first request was sent minus the drift allowance
//!   (`ttl × 0.01 + 2 ms`), on tokio's monotonic clock — is positive; the
//!   lease carries `validity = ttl − drift` measured from that first send
//!   ([`Lease::validity`]), which the manager combines with its own bound.
//!   On failure the nodes that granted are released before returning; nodes
//!   that may have written (timed out, lost reply) and nodes still in flight
//!   are released in the background, the latter when they answer (waiting
//!   for nodes that may be down would double the time to fail). So a client
//!   never blocks on its own partial grants, and the manager's retries (a
//!   fresh token each) and backoff apply unchanged. Nodes still in flight
//!   after a success keep their grant, unless the lock was released
//!   meanwhile, in which case the late grant is deleted.
//! - **Errors** tell contention from failure: [`AcquireOutcome::Held`] when
//!   the refusals alone rule out a quorum (another client holds it; the hint
//!   is the time until enough holders' TTLs run out), and
//!   [`Error::QuorumUnreachable`] with one line per node (granted, held by
//!   another, missing, timed out, failed) when failing nodes were the cause.
//!   A failed round waits for nodes still in flight only while their
//!   answers decide between the two. A quorum reached after the validity
//!   ran out is an [`Error::Backend`] error; the grants are given back
//!   first.
//! - **Renew** resets the TTL on every node and succeeds when `M` renewed
//!   within the validity. With [`RedlockOptions::reseed_on_renew`] (on by
//!   default) nodes that answered "missing" — typically restarted without
//!   persistence — get the key again with the same token (`SET NX` through
//!   their `try_acquire`), in the background, after the renewal reached the
//!   quorum on its own. Re-seeded nodes never count toward that renewal's
//!   quorum, and a renewal below the quorum never re-seeds anything.
//! - **Release** deletes on the nodes that granted, may have written or
//!   were still in flight when the acquire returned (every node for a lock
//!   this `Redlock` did not acquire); it answers
//!   [`ReleaseOutcome::Released`] only when `M` nodes released (the lock was
//!   verifiably held as a quorum lock up to the release), `HeldByOther` /
//!   `Missing` when the answers rule that out, and
//!   [`Error::QuorumUnreachable`] when failing nodes leave it open.
//!   [`Redlock::release_report`] waits for every node and returns the
//!   per-node detail.
//! - **Waiting** wakes once `M` nodes with release notifications signalled
//!   a release (or all of them, when fewer than `M` have notifications),
//!   bounded by the manager's delay: a holder releases all its nodes at once,
//!   and retrying on the first signal would race its other deletes. For a
//!   second after a split vote on the key (some grants, no quorum, too few
//!   refusals for anyone else to hold one) it ignores the signals and sleeps
//!   a random `½..1 ×` the manager's delay: the signals then mostly come
//!   from contenders giving their partial grants back, and waking on them
//!   retries in step and splits again.
//!
//! # What it guarantees, and what it does not
//!
//! With a majority quorum (`2M > N`: any other quorum is refused when the
//! `Redlock` is built, since two clients could each win a disjoint set of
//! nodes), mutual exclusion holds while each holder stays inside its local
//! validity window, node clocks drift by less than the allowance, and fewer than
//! `H + M − N` of the `H` nodes holding the key lose it before the holder's
//! next renewal. With every node holding it (`H = N`) that is any minority
//! below `M`: one node of 3, two of 5. A lock granted by the bare quorum
//! (`H = M`, the other nodes were down) tolerates fewer than `2M − N`
//! losses: none with 3 nodes.
//! A node that restarts **without its data** loses its keys: with 3 nodes
//! holding a lock, another client can then get that node, but no quorum —
//! unless a second node also loses the key before the holder's next renewal
//! re-seeds the first (then the holder learns of the loss at that renewal,
//! too late). Delay restarts of non-persistent nodes by the maximum TTL
//! (antirez), keep re-seeding on, or persist with `appendfsync always`.
//!
//! **No fencing tokens** ([`Capabilities::fencing_tokens`] is false, every
//! lease's fencing token is `None`). The random token is not monotonic
//! (Kleppmann), and the maximum over the quorum's per-node counters is not
//! either: node A at 10 and B, C at 1 grant {A, B} → 11, then {B, C} → 2.
//! For correctness-critical resources, compare-and-set on the resource with
//! the lock token (antirez's answer), or use a single store with fencing.
//!
//! Node clocks govern the server-side TTLs (Valkey #2651: expiry follows the
//! wall clock); a clock jump on a node is a lost key on that node.
//!
//! # When it is worth its cost
//!
//! Redlock keeps a lock through the loss of a minority of independent
//! instances without relying on replication, at the price of `N` servers and
//! `N` parallel calls per operation (latency of the `M`-th fastest node). One
//! instance with replica acknowledgement (`WAIT`; `ReplicaAck` on the Lua and
//! Tair backends) or Tair's semi-synchronous replication narrows the common
//! failure — a failover losing a just-granted lock — far more cheaply (both
//! give up after their timeout; semi-synchronous replication then silently
//! degrades to asynchronous). Pick
//! Redlock when the instances are independent anyway and replica
//! acknowledgement is not available; either way it is an efficiency lock in
//! Kleppmann's sense, so protect correctness-critical writes with
//! compare-and-set on the resource.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use lock_core::options::{validate_key, validate_ttl};
use lock_core::{
    AcquireOutcome, Capabilities, Error, Lease, LockBackend, LockToken, NodeReports, ReleaseOutcome, RenewOutcome,
    Result,
};
use tokio::time::Instant;

mod election;
mod holdings;
mod inflight;
mod lazy;
mod multi;
mod options;
mod round;
mod rw;
mod semaphore;
mod splits;

pub use lazy::{LAZY_RETRY_MAX, LAZY_RETRY_MIN, LazyNode};
pub use options::{
    DEFAULT_DRIFT_FACTOR, DEFAULT_MAX_NODE_TIMEOUT, DEFAULT_MIN_NODE_TIMEOUT, DEFAULT_NODE_TIMEOUT_FACTOR,
    RedlockOptions,
};

use holdings::Holdings;
use inflight::Inflight;
use round::{NodeCall, Reply, Round, Vote, node_call};
use splits::SplitVotes;

/// The backend name used in errors and logs.
const NAME: &str = "redlock";

/// A quorum lock over N independent backends. Cheap to clone; clones share
/// the nodes. Build one per client (one per [`lock_core::LockManager`]).
#[derive(Clone)]
pub struct Redlock {
    inner: Arc<Inner>,
}

struct Inner {
    nodes: Vec<Arc<dyn LockBackend>>,
    names: Vec<String>,
    quorum: usize,
    options: RedlockOptions,
    capabilities: Capabilities,
    /// Nodes whose `wait_for_release` wakes on release.
    notifying: Vec<usize>,
    inflight: Inflight,
    /// Nodes each held lock may hold its key on.
    holdings: Holdings,
    /// Keys that recently had a split vote.
    splits: SplitVotes,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.inner.names)
            .field("quorum", &self.inner.quorum)
            .field("options", &self.inner.options)
            .finish()
    }
}

/// Per-node result of [`Redlock::release_report`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReleaseReport {
    /// Nodes that deleted the key for this token.
    pub released: usize,
    /// The quorum.
    pub required: usize,
    /// One line per node, in node order ("granted" means released there).
    pub nodes: NodeReports,
}

/// What happens to node calls that outlive the call that started them.
#[derive(Debug, Clone, Copy)]
enum FollowUp {
    /// The acquire failed or was dropped: delete whatever a node wrote.
    Abandoned,
    /// The acquire succeeded: keep late grants unless released meanwhile.
    Granted,
    /// A renewal reached the quorum: re-seed nodes that lost the key,
    /// unless released meanwhile.
    Renewed { ttl: Duration },
    /// Nothing to do but let the calls finish (releases).
    Drain,
}

impl Redlock {
    /// A Redlock over `nodes` with the default options (quorum `N / 2 + 1`).
    /// Nodes are named `node<i> (<backend name>)` in errors.
    ///
    /// Errors: [`Error::InvalidArgument`] for fewer than 2 nodes.
    pub fn new(nodes: impl IntoIterator<Item = Arc<dyn LockBackend>>) -> Result<Self> {
        Self::with_options(nodes, RedlockOptions::default())
    }

    /// A Redlock over `nodes` with `options` (validated).
    ///
    /// Errors: [`Error::InvalidArgument`] for fewer than 2 nodes, a quorum
    /// that is not a majority (`2M > N`, `M ≤ N`), or invalid timeouts or
    /// drift.
    pub fn with_options(
        nodes: impl IntoIterator<Item = Arc<dyn LockBackend>>,
        options: RedlockOptions,
    ) -> Result<Self> {
        let named = nodes
            .into_iter()
            .enumerate()
            .map(|(i, node)| (format!("node{i} ({})", node.capabilities().name), node));
        Self::with_named_nodes(named, options)
    }

    /// A Redlock over named nodes (names appear in
    /// [`Error::QuorumUnreachable`] and the logs).
    ///
    /// Errors: as [`Redlock::with_options`].
    pub fn with_named_nodes(
        nodes: impl IntoIterator<Item = (String, Arc<dyn LockBackend>)>,
        options: RedlockOptions,
    ) -> Result<Self> {
        let (names, nodes): (Vec<String>, Vec<Arc<dyn LockBackend>>) = nodes.into_iter().unzip();
        let quorum = options.validate(nodes.len())?;
        let node_caps: Vec<Capabilities> = nodes.iter().map(|n| n.capabilities()).collect();
        let mut capabilities = Capabilities::new(NAME);
        capabilities.release_notifications = node_caps.iter().any(|c| c.release_notifications);
        capabilities.distinguishes_missing = node_caps.iter().all(|c| c.distinguishes_missing);
        capabilities.max_ttl = node_caps.iter().map(|c| c.max_ttl).min().unwrap_or(lock_core::MAX_TTL);
        capabilities.min_ttl = node_caps.iter().map(|c| c.min_ttl).max().unwrap_or(lock_core::MIN_TTL);
        let notifying = node_caps
            .iter()
            .enumerate()
            .filter(|(_, c)| c.release_notifications)
            .map(|(i, _)| i)
            .collect();
        Ok(Redlock {
            inner: Arc::new(Inner {
                nodes,
                names,
                quorum,
                options,
                capabilities,
                notifying,
                inflight: Inflight::default(),
                holdings: Holdings::default(),
                splits: SplitVotes::default(),
            }),
        })
    }

    /// The quorum `M`.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// The node names, in node order (`N` of them).
    pub fn node_names(&self) -> &[String] {
        &self.inner.names
    }

    /// The options in force.
    pub fn options(&self) -> &RedlockOptions {
        &self.inner.options
    }

    /// Release `key` for `token` on every node and wait for every answer
    /// (each bounded by the per-node timeout): how many released, and what
    /// each node said. Same effect as [`LockBackend::release`], which
    /// returns as soon as the outcome is decided.
    ///
    /// # Errors
    ///
    /// [`lock_core::Error::InvalidArgument`] for a bad key; otherwise the
    /// per-node outcomes are in the report.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the per-node calls not yet answered: those
    /// nodes may or may not have released (owner-checked, so a repeat is
    /// harmless; the TTL frees them at the latest).
    pub async fn release_report(&self, key: &str, token: &LockToken) -> Result<ReleaseReport> {
        validate_key(key)?;
        let inner = &self.inner;
        inner.mark_released(key, token);
        inner.holdings.take(key, token);
        let mut round = inner.release_round(key, token);
        round.until_all_replied().await;
        Ok(ReleaseReport {
            released: round.yes(),
            required: inner.quorum,
            nodes: round.report(&inner.names),
        })
    }
}

impl Inner {
    fn check(&self, key: &str, ttl: Duration) -> Result<()> {
        validate_key(key)?;
        validate_ttl(ttl)?;
        if ttl > self.capabilities.max_ttl {
            return Err(Error::invalid(format!(
                "ttl {ttl:?} is above {:?}, the lowest maximum TTL among the nodes",
                self.capabilities.max_ttl
            )));
        }
        self.inflight.note_ttl(ttl);
        Ok(())
    }

    /// Remember the release long enough for every renewal or acquire sent
    /// before it to answer, and for a re-seed it triggers to complete.
    fn mark_released(&self, key: &str, token: &LockToken) {
        self.inflight
            .mark_released(key, token, self.options.max_node_timeout.saturating_mul(2));
    }

    /// `ttl − drift`: how long a grant stays usable from the first send.
    fn validity(&self, ttl: Duration) -> Duration {
        ttl.saturating_sub(self.options.drift(ttl))
    }

    /// Waiting for a node longer than the validity is pointless.
    fn node_timeout(&self, ttl: Duration) -> Duration {
        self.options.node_timeout_for(ttl).min(self.validity(ttl))
    }

    fn acquire_round(&self, key: &str, token: &LockToken, ttl: Duration) -> Round {
        let timeout = self.node_timeout(ttl);
        let calls = self.nodes.iter().enumerate().map(|(i, node)| {
            let (node, key, token) = (node.clone(), key.to_owned(), *token);
            node_call(
                i,
                timeout,
                async move { node.try_acquire(&key, &token, ttl).await },
                classify_acquire,
            )
        });
        Round::start(self.quorum, calls.collect())
    }

    fn renew_round(&self, key: &str, token: &LockToken, ttl: Duration) -> Round {
        let timeout = self.node_timeout(ttl);
        let calls = self.nodes.iter().enumerate().map(|(i, node)| {
            let (node, key, token) = (node.clone(), key.to_owned(), *token);
            node_call(
                i,
                timeout,
                async move { node.renew(&key, &token, ttl).await },
                classify_renew,
            )
        });
        Round::start(self.quorum, calls.collect())
    }

    fn release_round(&self, key: &str, token: &LockToken) -> Round {
        let calls = (0..self.nodes.len()).map(|i| self.release_call(i, key, token, self.options.max_node_timeout));
        Round::start(self.quorum, calls.collect())
    }

    /// A release round on the nodes that may hold the key (`holders`: they
    /// granted, may have written, or were in flight; every node when
    /// unknown). Nodes that refused never had this token: they count as
    /// `Missing` without a call.
    fn release_round_on(&self, key: &str, token: &LockToken, holders: Option<&[usize]>) -> Round {
        let mut replies = Vec::with_capacity(self.nodes.len());
        let mut calls = Vec::with_capacity(self.nodes.len());
        for i in 0..self.nodes.len() {
            if holders.is_some_and(|h| !h.contains(&i)) {
                replies.push(Some(Vote::Missing.into()));
            } else {
                replies.push(None);
                calls.push(self.release_call(i, key, token, self.options.max_node_timeout));
            }
        }
        Round::start_with(self.quorum, replies, calls)
    }

    fn release_call(&self, i: usize, key: &str, token: &LockToken, timeout: Duration) -> NodeCall {
        let node = self.nodes.get(i).cloned();
        let (key, token) = (key.to_owned(), *token);
        node_call(
            i,
            timeout,
            async move {
                match node {
                    Some(node) => node.release(&key, &token).await,
                    None => Err(Error::backend(NAME, "no such node")),
                }
            },
            classify_release,
        )
    }

    /// Release on one node; logs what went wrong (the TTL is the safety net).
    async fn release_node(&self, i: usize, key: &str, token: &LockToken, timeout: Duration) -> Vote {
        let (_, reply) = self.release_call(i, key, token, timeout).await;
        if reply.vote.is_failure() {
            tracing::debug!(
                key,
                node = self.name(i),
                vote = ?reply.vote,
                "redlock clean-up release failed; the TTL will free the key on that node"
            );
        }
        reply.vote
    }

    /// Release on several nodes at once; true when every node answered.
    async fn release_nodes(&self, nodes: &[usize], key: &str, token: &LockToken, timeout: Duration) -> bool {
        let votes = futures::future::join_all(nodes.iter().map(|&i| self.release_node(i, key, token, timeout))).await;
        votes.iter().all(|v| !v.is_failure())
    }

    /// Set the key again on a node that lost it (same token).
    async fn reseed_node(&self, i: usize, key: &str, token: &LockToken, ttl: Duration) -> Vote {
        let Some(node) = self.nodes.get(i).cloned() else {
            return Vote::unexpected("node index");
        };
        let (key, token) = (key.to_owned(), *token);
        let call = node_call(
            i,
            self.node_timeout(ttl),
            async move { node.try_acquire(&key, &token, ttl).await },
            classify_acquire,
        );
        let (_, reply) = call.await;
        tracing::debug!(node = self.name(i), vote = ?reply.vote, "redlock re-seeded a node that lost the key");
        reply.vote
    }

    fn name(&self, i: usize) -> &str {
        self.names.get(i).map_or("?", String::as_str)
    }

    /// Error for a round that did not reach the quorum because nodes failed.
    fn unreachable(&self, round: &Round) -> Error {
        Error::QuorumUnreachable {
            granted: round.yes(),
            required: round.quorum(),
            nodes: round.report(&self.names),
        }
    }

    /// When enough holders' TTLs will have run out for a quorum to be
    /// possible again: the `k`-th smallest hint, `k = refusals − (N − M)`.
    fn retry_hint(&self, round: &Round) -> Option<Duration> {
        let mut hints = round.held_hints()?;
        let must_expire = hints.len().checked_sub(self.nodes.len() - self.quorum)?;
        hints.sort_unstable();
        hints.get(must_expire.checked_sub(1)?).copied()
    }
}

/// Hand node calls that outlive their round (and answered nodes that need
/// action) to a background task. No runtime: nothing to do, the TTLs clean up.
fn spawn_follow_up(
    inner: &Arc<Inner>,
    key: &str,
    token: LockToken,
    answered: Vec<(usize, Vote)>,
    pending: FuturesUnordered<NodeCall>,
    kind: FollowUp,
) {
    if answered.is_empty() && pending.is_empty() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let inner = inner.clone();
    let key = key.to_owned();
    runtime.spawn(async move {
        let mut work: FuturesUnordered<BoxFuture<'static, ()>> = FuturesUnordered::new();
        for (i, vote) in answered {
            work.push(Box::pin(settle(inner.clone(), key.clone(), token, i, vote, kind)));
        }
        for call in pending {
            let (inner, key) = (inner.clone(), key.clone());
            work.push(Box::pin(async move {
                let (i, reply) = call.await;
                settle(inner, key, token, i, reply.vote, kind).await;
            }));
        }
        while work.next().await.is_some() {}
    });
}

/// Act on one node's late answer.
async fn settle(inner: Arc<Inner>, key: String, token: LockToken, i: usize, vote: Vote, kind: FollowUp) {
    let timeout = inner.options.max_node_timeout;
    match kind {
        FollowUp::Abandoned => {
            if vote.may_have_written() {
                inner.release_node(i, &key, &token, timeout).await;
            }
        }
        FollowUp::Granted => {
            // Settled into the record: the release will delete there. Else
            // the release came first and left this node to us; it is marked
            // released before it takes the record, so the check below sees it.
            let recorded = inner
                .holdings
                .settle_in_flight(&key, &token, i, vote.may_have_written());
            if vote.may_have_written() && !recorded && inner.inflight.is_released(&key, &token) {
                inner.release_node(i, &key, &token, timeout).await;
            }
        }
        FollowUp::Renewed { ttl } => {
            if vote != Vote::Missing || !inner.options.reseed_on_renew || inner.inflight.is_released(&key, &token) {
                return;
            }
            // Checked after the write's reply: see the `inflight` module.
            if inner.reseed_node(i, &key, &token, ttl).await.may_have_written() {
                inner.holdings.add_node(&key, &token, i);
                if inner.inflight.is_released(&key, &token) {
                    inner.release_node(i, &key, &token, timeout).await;
                }
            }
        }
        FollowUp::Drain => {}
    }
}

fn classify_acquire(result: Result<AcquireOutcome>) -> Reply {
    match result {
        Ok(AcquireOutcome::Acquired(_)) => Vote::Yes.into(),
        Ok(AcquireOutcome::Held { retry_after }) => Reply {
            vote: Vote::HeldByOther,
            retry_after,
        },
        Ok(_) => Vote::unexpected("acquire").into(),
        Err(e) => Vote::from_error(&e).into(),
    }
}

fn classify_renew(result: Result<RenewOutcome>) -> Reply {
    match result {
        Ok(RenewOutcome::Renewed) => Vote::Yes.into(),
        Ok(RenewOutcome::HeldByOther) => Vote::HeldByOther.into(),
        Ok(RenewOutcome::Missing) => Vote::Missing.into(),
        Ok(_) => Vote::unexpected("renew").into(),
        Err(e) => Vote::from_error(&e).into(),
    }
}

fn classify_release(result: Result<ReleaseOutcome>) -> Reply {
    match result {
        Ok(ReleaseOutcome::Released) => Vote::Yes.into(),
        Ok(ReleaseOutcome::HeldByOther) => Vote::HeldByOther.into(),
        Ok(ReleaseOutcome::Missing) => Vote::Missing.into(),
        Ok(_) => Vote::unexpected("release").into(),
        Err(e) => Vote::from_error(&e).into(),
    }
}

/// An acquire round in progress. If the acquire future is dropped before
/// the round is decided (cancelled, or timed out by the caller), whatever
/// the nodes wrote is released in the background.
struct Attempt {
    inner: Arc<Inner>,
    key: String,
    token: LockToken,
    round: Round,
    armed: bool,
}

impl Attempt {
    /// The round, decided: the attempt no longer cleans up on drop.
    fn disarm(mut self) -> Round {
        self.armed = false;
        std::mem::replace(&mut self.round, Round::start(0, Vec::new()))
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let written = self
            .round
            .answered(Vote::may_have_written)
            .into_iter()
            .map(|i| (i, Vote::Yes))
            .collect();
        let pending = self.round.take_pending();
        spawn_follow_up(
            &self.inner,
            &self.key,
            self.token,
            written,
            pending,
            FollowUp::Abandoned,
        );
    }
}

#[async_trait]
impl LockBackend for Redlock {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        let inner = &self.inner;
        inner.check(key, ttl)?;
        let validity = inner.validity(ttl);
        let sent_at = Instant::now();
        let mut attempt = Attempt {
            inner: inner.clone(),
            key: key.to_owned(),
            token: *token,
            round: inner.acquire_round(key, token, ttl),
            armed: true,
        };
        let reached = attempt.round.until_decided().await;
        let mut round = attempt.disarm();
        let elapsed = sent_at.elapsed();
        if reached && elapsed < validity {
            // Nodes still in flight may grant too: their follow-up settles them.
            let holders = round.answered(Vote::may_have_written);
            inner
                .holdings
                .record(key, token, holders, round.unanswered(), sent_at + ttl);
            spawn_follow_up(inner, key, *token, Vec::new(), round.take_pending(), FollowUp::Granted);
            return Ok(AcquireOutcome::Acquired(Lease::new().with_validity(Some(validity))));
        }

        // Decide the answer before giving anything back, then give back what
        // was (or may have been) written: answered nodes now, nodes still in
        // flight when they answer.
        if !reached {
            round.until_classified().await;
        }
        let answer = if reached {
            None
        } else if round.blocked_by_failures() {
            Some(Err(inner.unreachable(&round)))
        } else {
            // Split: some grants, and too few refusals for anyone to hold a
            // quorum. See the `splits` module.
            let split = round.yes() > 0 && round.count(|v| *v == Vote::HeldByOther) < inner.quorum;
            inner.splits.refused(key, split);
            Some(Ok(AcquireOutcome::Held {
                retry_after: inner.retry_hint(&round),
            }))
        };
        // Nodes that granted are released before returning; nodes that may
        // have written (no reply in time, lost reply) could well be down, so
        // waiting for them would double the time to fail: background.
        let granted = round.answered(|v| *v == Vote::Yes);
        let maybe: Vec<(usize, Vote)> = round
            .answered(|v| v.may_have_written() && *v != Vote::Yes)
            .into_iter()
            .map(|i| (i, Vote::TimedOut))
            .collect();
        let clean = maybe.is_empty();
        spawn_follow_up(inner, key, *token, maybe, round.take_pending(), FollowUp::Abandoned);
        let clean = inner.release_nodes(&granted, key, token, inner.node_timeout(ttl)).await && clean;
        match answer {
            Some(answer) => answer,
            None => Err(Error::Backend {
                backend: NAME.to_owned(),
                outcome_unknown: !clean,
                message: format!(
                    "a quorum of {} granted after {elapsed:?}, past the validity of {validity:?} \
                     (ttl {ttl:?} minus drift); the grants were given back",
                    inner.quorum
                ),
                source: None,
            }),
        }
    }

    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        validate_key(key)?;
        let inner = &self.inner;
        inner.mark_released(key, token);
        let (holders, in_flight) = inner.holdings.take(key, token).unzip();
        let mut round = inner.release_round_on(key, token, holders.as_deref());
        let mut released = round.until_decided().await;
        // Nodes whose acquire is still answering are released by its
        // follow-up; call them now only if the quorum needs them.
        if !released && let Some(in_flight) = in_flight.filter(|n| !n.is_empty()) {
            for i in in_flight {
                round.add_call(i, inner.release_call(i, key, token, inner.options.max_node_timeout));
            }
            released = round.until_decided().await;
        }
        if !released {
            round.until_classified().await;
        }
        let outcome = if released {
            Ok(ReleaseOutcome::Released)
        } else if round.blocked_by_failures() {
            Err(inner.unreachable(&round))
        } else if round.count(|v| *v == Vote::HeldByOther) > 0 {
            Ok(ReleaseOutcome::HeldByOther)
        } else {
            Ok(ReleaseOutcome::Missing)
        };
        // The remaining deletes still go out; nobody waits for them.
        spawn_follow_up(inner, key, *token, Vec::new(), round.take_pending(), FollowUp::Drain);
        outcome
    }

    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        let inner = &self.inner;
        inner.check(key, ttl)?;
        let validity = inner.validity(ttl);
        let sent_at = Instant::now();
        let mut round = inner.renew_round(key, token, ttl);
        if round.until_decided().await {
            let elapsed = sent_at.elapsed();
            if elapsed >= validity {
                return Err(Error::backend(
                    NAME,
                    format!(
                        "a quorum of {} renewed after {elapsed:?}, past the validity of {validity:?} \
                         (ttl {ttl:?} minus drift)",
                        inner.quorum
                    ),
                ));
            }
            let missing = if inner.options.reseed_on_renew {
                round.answered(|v| *v == Vote::Missing)
            } else {
                Vec::new()
            };
            inner.holdings.renewed(key, token, sent_at + ttl);
            let missing = missing.into_iter().map(|i| (i, Vote::Missing)).collect();
            spawn_follow_up(
                inner,
                key,
                *token,
                missing,
                round.take_pending(),
                FollowUp::Renewed { ttl },
            );
            return Ok(RenewOutcome::Renewed);
        }
        // Below the quorum: renewals still in flight change nothing that
        // matters (they never create a key), so they are dropped once they
        // cannot change the answer.
        round.until_classified().await;
        if round.blocked_by_failures() {
            Err(inner.unreachable(&round))
        } else if round.count(|v| *v == Vote::HeldByOther) > 0 {
            Ok(RenewOutcome::HeldByOther)
        } else {
            Ok(RenewOutcome::Missing)
        }
    }

    async fn wait_for_release(&self, key: &str, max_wait: Duration) {
        let inner = &self.inner;
        if inner.splits.recent(key) {
            // Soon after a split vote, a release signal is most likely a
            // contender giving its grants back: waking on it would retry in
            // step with the others. Wait a random delay instead.
            tokio::time::sleep(splits::jittered(max_wait)).await;
            return;
        }
        let mut waits: FuturesUnordered<_> = inner
            .notifying
            .iter()
            .filter_map(|&i| inner.nodes.get(i))
            .map(|node| node.wait_for_release(key, max_wait))
            .collect();
        // A holder releases all its nodes (at least M) at once: wait for M
        // signals, not the first, or the retry would race the holder's other
        // deletes and miss their signals. The timeout guards against a node
        // that overstays its own bound.
        let needed = inner.quorum.min(waits.len());
        let signals = async {
            for _ in 0..needed {
                if waits.next().await.is_none() {
                    break;
                }
            }
        };
        if needed == 0 {
            tokio::time::sleep(max_wait).await;
        } else if tokio::time::timeout(max_wait, signals).await.is_ok() {
            inner.splits.woken(key);
        }
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities.clone()
    }
}
