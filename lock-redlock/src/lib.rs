//! Redlock for verrou: one [`LockBackend`] over N independent inner backends
//! (`Arc<dyn LockBackend>`: Lua-on-Redis, Tair and memory nodes can be mixed),
//! holding a lock while a quorum `M` of them (a majority: `2M > N`,
//! default `N / 2 + 1`) hold it for the same token.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let servers = lock_testkit::server::Instances::start(3, lock_testkit::server::RedisServer::builder()).await?;
//! # let urls = servers.urls(); // three independent redis-servers on free loopback ports
//! use std::sync::Arc;
//! use lock_core::{LockBackend, LockManager};
//! use lock_redis_lua::RedisLuaBackend;
//! use lock_redlock::Redlock;
//!
//! let mut nodes: Vec<Arc<dyn LockBackend>> = Vec::new();
//! for url in urls { // "redis://a:6379", "redis://b:6379", "redis://c:6379"
//!     nodes.push(Arc::new(RedisLuaBackend::connect(&url).await?));
//! }
//! let locks = LockManager::new(Redlock::new(nodes)?)?; // quorum 2 of 3
//! let guard = locks.lock("invoice:42").await?;
//! assert!(guard.fencing_token().is_none()); // Redlock issues none
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
//!   ([`Lease::validity`](lock_core::Lease::validity)), which the manager combines with its own bound.
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
//!   answers decide between the two. A node's refusal of the arguments
//!   ([`Error::InvalidArgument`], [`Error::Unsupported`]: a key under its
//!   reserved prefix, say) is the caller's error, not an outage, when
//!   refusals alone rule out the quorum (at least `N − M + 1` nodes refused,
//!   every node for bad input): the round returns it as it is, so the
//!   manager does not retry it (renew and release likewise). Fewer refusals
//!   come from a minority's state (a node's WRONGTYPE, a missing module):
//!   the round is classified as above, the refusal in the per-node report,
//!   so one such node hides neither a held lock nor an outage. A quorum reached after the validity
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
//!   and retrying on the first signal would race its other deletes. The
//!   waiting acquire is the same waiter on every node (one id, one age, kept
//!   across its waits): nodes that reserve a released key for their longest
//!   waiter pick the same one. For a second after a split vote on the key
//!   (some grants, no quorum, too few refusals for anyone else to hold one)
//!   it ignores the signals and sleeps a random `½..1 ×` the manager's
//!   delay, at most 25 ms: the signals then mostly come from contenders
//!   giving their partial grants back, and waking on them retries in step
//!   and splits again.
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
//!
//! # URL
//!
//! `verrou::connect` builds a Redlock from
//! `redlock://?quorum=2&node=redis://a:6379&node=redis://b:6379&node=tair://c:6379`:
//! `node` (repeated; any Redis-family URL, its own parameters
//! percent-encoded: `node=redis://a:6379%3Ffencing%3Dtrue`), `quorum` (a
//! majority, `2M > N`; default `N / 2 + 1`), `node_timeout`, `drift_factor`.
//! It starts once a quorum of nodes connects ([`LazyNode`]).
//!
//! # Features
//!
//! None of its own: nodes are any [`LockBackend`], built with their crates'
//! features.
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::raw::{FairWaiter, InstantLockBackend, WaitOptions};
use lock_core::raw::{validate_key, validate_ttl};
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{Capabilities, Error, LockBackend, LockToken, Result};

mod acquire;
mod config;
mod election;
mod follow_up;
mod holdings;
mod inflight;
mod inspect;
mod lazy;
mod multi;
mod notify;
mod options;
mod release;
mod renew;
mod round;
mod rw;
mod semaphore;
mod splits;
mod waiters;

pub use config::{MAX_NODES, REDLOCK_PARAMS, RedlockConfig, RedlockConnector};
pub use lazy::{LAZY_RETRY_MAX, LAZY_RETRY_MIN, LazyNode};
pub use options::{DEFAULT_MAX_NODE_TIMEOUT, DEFAULT_MIN_NODE_TIMEOUT, DEFAULT_NODE_TIMEOUT_FACTOR, RedlockOptions};

pub use release::ReleaseReport;

use holdings::Holdings;
use inflight::Inflight;
use round::Round;
use splits::SplitVotes;
use waiters::Waiters;

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
    /// Each waiting acquire's id and age, the same on every node.
    waiters: Waiters,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.inner.names)
            .field("quorum", &self.inner.quorum)
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
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
        // A node whose locks live with its sessions keeps them past the
        // quorum's validity: the quorum's locks do not all expire either.
        capabilities.lease_expires = node_caps.iter().all(|c| c.lease_expires);
        capabilities.max_ttl = node_caps
            .iter()
            .map(|c| c.max_ttl)
            .min()
            .unwrap_or(lock_core::LockOptions::MAX_TTL);
        capabilities.min_ttl = node_caps
            .iter()
            .map(|c| c.min_ttl)
            .max()
            .unwrap_or(lock_core::LockOptions::MIN_TTL);
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
                waiters: Waiters::default(),
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
}

impl Inner {
    pub(crate) fn check(&self, key: &str, ttl: Duration) -> Result<()> {
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

    /// `ttl − drift`: how long a grant stays usable from the first send.
    pub(crate) fn validity(&self, ttl: Duration) -> Duration {
        ttl.saturating_sub(self.options.drift(ttl))
    }

    /// Waiting for a node longer than the validity is pointless.
    pub(crate) fn node_timeout(&self, ttl: Duration) -> Duration {
        self.options.node_timeout_for(ttl).min(self.validity(ttl))
    }

    pub(crate) fn name(&self, i: usize) -> &str {
        self.names.get(i).map_or("?", String::as_str)
    }

    /// Error for a round that did not reach the quorum because nodes failed
    /// or refused the arguments: refusals that alone made the quorum
    /// impossible ([`Round::refusal`]: `InvalidArgument`, `Unsupported`) are
    /// the caller's error and come first, so that the manager does not
    /// retry them as an outage.
    pub(crate) fn unreachable(&self, round: &Round) -> Error {
        if let Some(refusal) = round.refusal() {
            return refusal;
        }
        Error::QuorumUnreachable {
            granted: round.yes(),
            required: round.quorum(),
            nodes: round.report(&self.names),
        }
    }

    /// When enough holders' TTLs will have run out for a quorum to be
    /// possible again: the `k`-th smallest hint, `k = held + refused − (N − M)`
    /// (a node that refused the arguments will not grant either).
    pub(crate) fn retry_hint(&self, round: &Round) -> Option<Duration> {
        let mut hints = round.held_hints()?;
        let must_expire = (hints.len() + round.refused()).checked_sub(self.nodes.len() - self.quorum)?;
        hints.sort_unstable();
        hints.get(must_expire.checked_sub(1)?).copied()
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)] // every method decided here, none defaulted
impl LockBackend for Redlock {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.acquire(key, token, ttl).await
    }

    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.release_quorum(key, token).await
    }

    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.renew_quorum(key, token, ttl).await
    }

    /// One quorum renewal per lease, all at once.
    async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        futures::future::join_all(items.iter().map(|(key, token)| self.renew_quorum(key, token, ttl))).await
    }

    async fn wait_for_release(&self, key: &str, max_wait: Duration) {
        self.wait_for_quorum_release(key, &WaitOptions::new(max_wait)).await;
    }

    /// The waiter named by the caller, or else by this Redlock (one id and
    /// one age per waiting acquire): the same on every node.
    async fn wait_for_release_opts(&self, key: &str, options: &WaitOptions) {
        self.wait_for_quorum_release(key, options).await;
    }

    /// No fair queue across independent nodes: refused.
    async fn try_acquire_fair(
        &self,
        key: &str,
        token: &LockToken,
        ttl: Duration,
        waiter: &FairWaiter,
    ) -> Result<AcquireOutcome> {
        let _ = (key, token, ttl, waiter);
        Err(Error::Unsupported {
            backend: NAME.to_owned(),
            what: "fair (FIFO) locking".to_owned(),
        })
    }

    async fn wait_fair(&self, key: &str, waiter: &FairWaiter, max_wait: Duration) {
        let _ = waiter;
        self.wait_for_quorum_release(key, &WaitOptions::new(max_wait)).await;
    }

    /// Never queued (fair locking is refused).
    async fn leave_queue(&self, key: &str, waiter: &FairWaiter) -> Result<()> {
        let _ = (key, waiter);
        Ok(())
    }

    /// A quorum read of every node (each bounded by the maximum node
    /// timeout): held when `M` nodes hold the key (the remaining lease is
    /// the `M`-th longest), free when `N − M + 1` do not; otherwise an
    /// error (`Unsupported` with the reason when nodes that cannot inspect
    /// leave it open). No fencing token: Redlock issues none.
    async fn inspect(&self, key: &str) -> Result<lock_core::LockInfo> {
        self.inspect_quorum(key).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities.clone()
    }

    /// Every call is a round of node calls: never answered at once.
    fn instant(&self) -> Option<&dyn InstantLockBackend> {
        None
    }
}
