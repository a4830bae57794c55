//! The primitive lock operations every backend implements.

use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::error::Result;
use crate::token::{FencingToken, LockToken};

/// Primitive, owner-checked lock operations: one round trip each on remote
/// backends. The [`crate::LockManager`] builds waiting, renewal and guards on
/// top; backends only answer "did it work, and if not, why".
///
/// Object safe: use it as `Arc<dyn LockBackend>`.
///
/// # Errors
///
/// Every method fails with [`crate::Error::InvalidArgument`] for a bad key or
/// TTL and [`crate::Error::Backend`] for a transport or server failure
/// (`outcome_unknown` when the write may have been applied).
///
/// # Cancel safety
///
/// Dropping a call's future leaves its outcome unknown (the write applied
/// whole or not at all) and must leave the backend usable. The manager
/// relies on exactly that: it releases a dropped acquire's token and keeps a
/// lease's local deadline where it was after a dropped renewal.
#[async_trait]
pub trait LockBackend: Send + Sync + 'static {
    /// Take `key` for `token` for `ttl` if nobody holds it.
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome>;

    /// Delete `key` only if `token` holds it.
    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome>;

    /// Reset `key`'s TTL to `ttl` only if `token` holds it.
    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome>;

    /// Renew many leases for the same `ttl`, one result per item, in order.
    ///
    /// The renewer batches leases that come due together through this. The
    /// default renews each concurrently; backends override it to send one
    /// script or pipeline. A transport failure fails every item whose outcome
    /// is unknown.
    async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        futures::future::join_all(items.iter().map(|(key, token)| self.renew(key, token, ttl))).await
    }

    /// Wait until `key` may have been released, or `max_wait` passes.
    ///
    /// A hint for waiters, never a guarantee: returning early or late costs
    /// latency, not correctness. The default just sleeps; backends with a
    /// release notification (memory, pub/sub) wake earlier.
    async fn wait_for_release(&self, key: &str, max_wait: Duration) {
        let _ = key;
        tokio::time::sleep(max_wait).await;
    }

    /// [`LockBackend::wait_for_release`] for a named waiter: a wrapper that
    /// spreads one waiter's wait over several backends (Redlock's nodes)
    /// gives each the same [`Waiter`], so that backends which wake one
    /// waiter per release (the one that has waited longest) pick the same
    /// waiter on every node. A hint, as `wait_for_release`.
    ///
    /// The default ignores the waiter and calls `wait_for_release`.
    async fn wait_for_release_opts(&self, key: &str, options: &WaitOptions) {
        self.wait_for_release(key, options.max_wait).await;
    }

    /// [`LockBackend::try_acquire`] in a first-come, first-served queue
    /// ([`crate::Fairness::Fifo`]): take `key` only if it is free and
    /// `waiter` heads the key's queue of live waiters (or the queue is
    /// empty); otherwise queue `waiter` (once: its place is kept across
    /// attempts) and answer `Held`. Every call keeps `waiter`'s entry alive
    /// for `waiter.claim`; a grant removes it.
    ///
    /// The default answers [`crate::Error::Unsupported`]: backends with a
    /// queue set [`Capabilities::fair_queue`].
    async fn try_acquire_fair(
        &self,
        key: &str,
        token: &LockToken,
        ttl: Duration,
        waiter: &FairWaiter,
    ) -> Result<AcquireOutcome> {
        let _ = (key, token, ttl, waiter);
        Err(crate::Error::unsupported(
            self.capabilities().name,
            "fair (FIFO) locking",
        ))
    }

    /// Wait until `waiter` may head `key`'s free queue, or `max_wait`
    /// passes. A hint, as [`LockBackend::wait_for_release`] (its default).
    async fn wait_fair(&self, key: &str, waiter: &FairWaiter, max_wait: Duration) {
        let _ = waiter;
        self.wait_for_release(key, max_wait).await;
    }

    /// Take `waiter` out of `key`'s queue (it stopped waiting), and wake the
    /// next waiter if it was the head of a free key's queue. Best effort: an
    /// entry left behind expires after its claim.
    async fn leave_queue(&self, key: &str, waiter: &FairWaiter) -> Result<()> {
        let _ = (key, waiter);
        Ok(())
    }

    /// What the server sees of `key`, without taking it: held or free,
    /// the holder's remaining lease and fencing token
    /// ([`crate::LockInfo`]). A read: it never writes, never advances a
    /// fencing counter, never joins or reorders a fair queue.
    ///
    /// The default answers [`crate::Error::Unsupported`] with the reason:
    /// a backend that can read its key state overrides it.
    async fn inspect(&self, key: &str) -> Result<crate::LockInfo> {
        let _ = key;
        Err(crate::Error::unsupported(
            self.capabilities().name,
            "inspecting a lock without taking it (this backend has no read of its lock state)",
        ))
    }

    /// What this backend can do.
    fn capabilities(&self) -> Capabilities;

    /// The same lock, answered at once: `Some` for a backend whose acquire
    /// and release never wait (in-process state, no I/O), so the manager
    /// calls them directly, without boxing a future or arming a timeout.
    ///
    /// The default is `None`. A wrapper (a layer, a fault injector) must not
    /// forward it: returning `None` keeps every call going through the
    /// wrapper's own [`LockBackend`] methods.
    fn instant(&self) -> Option<&dyn InstantLockBackend> {
        None
    }
}

/// Acquire and release of a [`LockBackend`] that answers in the caller's
/// thread without waiting ([`LockBackend::instant`]): the same key space and
/// the same semantics as its `try_acquire` and `release`, with an outcome
/// that is always known (there is no future to drop half-way).
///
/// # Errors
///
/// As [`LockBackend::try_acquire`] and [`LockBackend::release`].
pub trait InstantLockBackend: Send + Sync {
    /// [`LockBackend::try_acquire`], answered at once.
    fn try_acquire_now(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome>;

    /// [`LockBackend::release`], answered at once.
    fn release_now(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome>;

    /// [`InstantLockBackend::try_acquire_now`] as of `now`, a reading of
    /// `tokio::time::Instant::now()` the caller took before this call (the
    /// manager's own, which its local deadline counts from): the backend may
    /// use it instead of reading the clock again. An earlier reading only
    /// makes the lock expire earlier and frees expired locks later, as if the
    /// call had been answered at `now`. The default ignores `now`.
    fn try_acquire_at(&self, key: &str, token: &LockToken, ttl: Duration, now: Instant) -> Result<AcquireOutcome> {
        let _ = now;
        self.try_acquire_now(key, token, ttl)
    }

    /// [`InstantLockBackend::release_now`] as of `now`, a clock reading taken
    /// before the call (see [`InstantLockBackend::try_acquire_at`]). The
    /// default ignores `now`.
    fn release_at(&self, key: &str, token: &LockToken, now: Instant) -> Result<ReleaseOutcome> {
        let _ = now;
        self.release_now(key, token)
    }
}

/// A waiter in a key's fair queue: one per [`crate::LockManager::lock`]
/// call (every attempt of the call still draws its own lock token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FairWaiter {
    /// Unpredictable id of the waiting call.
    pub id: LockToken,
    /// How long the queue entry lives after each attempt.
    pub claim: Duration,
}

impl FairWaiter {
    /// A waiter `id` whose entry lives `claim` after each attempt.
    pub fn new(id: LockToken, claim: Duration) -> Self {
        FairWaiter { id, claim }
    }
}

/// A wait for a release ([`LockBackend::wait_for_release_opts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaitOptions {
    /// The longest wait.
    pub max_wait: Duration,
    /// Who waits, when the caller names the waiter.
    pub waiter: Option<Waiter>,
}

impl WaitOptions {
    /// A wait of at most `max_wait` by an unnamed waiter (the backend
    /// names it, as in [`LockBackend::wait_for_release`]).
    pub fn new(max_wait: Duration) -> Self {
        WaitOptions { max_wait, waiter: None }
    }

    /// The same wait by `waiter`.
    #[must_use]
    pub fn waiter(mut self, waiter: Waiter) -> Self {
        self.waiter = Some(waiter);
        self
    }
}

/// A named waiter ([`WaitOptions::waiter`]): the same on every backend its
/// wait is spread over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// Unpredictable id of the waiting acquire, kept across its waits.
    pub id: LockToken,
    /// How long the acquire has waited for the key before this wait.
    pub waited: Duration,
}

impl Waiter {
    /// Waiter `id`, whose acquire has waited `waited` so far.
    pub fn new(id: LockToken, waited: Duration) -> Self {
        Waiter { id, waited }
    }
}

/// Result of [`LockBackend::try_acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AcquireOutcome {
    /// The key is ours.
    Acquired(Lease),
    /// Someone else holds it.
    Held {
        /// The holder's remaining TTL, when the backend reports it cheaply.
        /// From [`LockBackend::try_acquire_fair`], `Some(Duration::ZERO)`
        /// says the waiter is next in line: a backend that does not wake
        /// its waiters (see [`LockBackend::wait_fair`]) gets its head polled
        /// on the manager's backoff rather than once per third of the claim.
        retry_after: Option<Duration>,
    },
}

/// What a successful acquire returns besides "yes".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lease {
    /// Fencing token of this grant, when the backend issues them.
    pub fencing_token: Option<FencingToken>,
    /// Replication status, when the backend waited for replicas.
    pub replication: Replication,
    /// An upper bound on the lease's validity from the moment the request was
    /// sent, when the backend knows better than `ttl` (Redlock subtracts its
    /// own drift). The manager uses the smaller of this and its own bound.
    pub validity: Option<Duration>,
}

impl Lease {
    /// A lease with no extra information.
    pub fn new() -> Self {
        Lease::default()
    }

    /// Attach a fencing token.
    #[must_use]
    pub fn with_fencing_token(mut self, token: Option<FencingToken>) -> Self {
        self.fencing_token = token;
        self
    }

    /// Attach a replication status.
    #[must_use]
    pub fn with_replication(mut self, replication: Replication) -> Self {
        self.replication = replication;
        self
    }

    /// Attach a validity bound.
    #[must_use]
    pub fn with_validity(mut self, validity: Option<Duration>) -> Self {
        self.validity = validity;
        self
    }
}

/// Whether a write was acknowledged by replicas (the WAIT pattern).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Replication {
    /// The backend did not check.
    #[default]
    NotChecked,
    /// At least the requested number of replicas acknowledged.
    Confirmed {
        /// Replicas that acknowledged.
        replicas: u32,
    },
    /// Fewer replicas acknowledged than requested: a failover now could lose
    /// the write.
    Unconfirmed {
        /// Replicas that acknowledged.
        acknowledged: u32,
        /// Replicas requested.
        requested: u32,
    },
}

/// Replica acknowledgement (the WAIT pattern), for backends that support it
/// ([`Capabilities::replica_ack`]): after an acquire that took the lock and
/// after every versioned write, the backend sends `WAIT replicas timeout` on
/// the connection that made the write (a dedicated one: WAIT blocks the
/// server-side connection and would stall everything multiplexed behind it).
/// Renewals wait too (one `WAIT` per renewal batch), and a renewal that
/// fewer replicas acknowledged is an outcome-unknown error whatever
/// [`OnShortfall`] says, so the guard's deadline never moves past what a
/// promoted replica knows. Release never waits: a late release breaks nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicaAck {
    /// Replicas that must acknowledge (`numreplicas` of WAIT), at least 1.
    pub replicas: u32,
    /// How long WAIT may block: 1 ms to 1 hour (`WAIT … 0` blocks forever).
    pub timeout: Duration,
    /// What happens when fewer replicas acknowledge.
    pub on_shortfall: OnShortfall,
}

impl ReplicaAck {
    /// Require `replicas` acknowledgements within `timeout`; an acquire that
    /// gets fewer releases the lock and fails ([`OnShortfall::ReleaseAndFail`]).
    pub fn new(replicas: u32, timeout: Duration) -> Self {
        ReplicaAck {
            replicas,
            timeout,
            on_shortfall: OnShortfall::ReleaseAndFail,
        }
    }

    /// Set what happens when fewer replicas acknowledge.
    #[must_use]
    pub fn on_shortfall(mut self, on_shortfall: OnShortfall) -> Self {
        self.on_shortfall = on_shortfall;
        self
    }

    /// Check the settings (backends call this when they are built).
    pub fn validate(&self) -> crate::Result<()> {
        if self.replicas == 0 {
            return Err(crate::Error::invalid(
                "replica acknowledgement needs at least 1 replica",
            ));
        }
        if self.timeout < Duration::from_millis(1) {
            return Err(crate::Error::invalid(
                "replica acknowledgement timeout must be at least 1 ms (WAIT with 0 blocks forever)",
            ));
        }
        if self.timeout > Duration::from_secs(3600) {
            return Err(crate::Error::invalid(
                "replica acknowledgement timeout is above one hour",
            ));
        }
        Ok(())
    }
}

/// What happens when fewer replicas than required acknowledge a write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnShortfall {
    /// Acquire: release the lock (owner-checked) and fail with
    /// [`crate::Error::Backend`] saying how many replicas acknowledged (the
    /// manager keeps trying until its acquire timeout). Versioned write, which
    /// cannot be taken back: fail with an outcome-unknown error (the write is
    /// on the primary, but a failover could lose it: re-read before relying
    /// on it).
    #[default]
    ReleaseAndFail,
    /// Acquire: succeed with `Lease.replication = Replication::Unconfirmed`,
    /// for the caller to decide. Versioned write: succeed and log a warning.
    /// (Renewals are never counted unconfirmed: see [`ReplicaAck`].)
    MarkUnconfirmed,
}

/// Result of [`LockBackend::release`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseOutcome {
    /// We held it; it is deleted.
    Released,
    /// Another token holds the key; it was left untouched.
    HeldByOther,
    /// The key was already gone (expired, or deleted).
    Missing,
}

/// Result of [`LockBackend::renew`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RenewOutcome {
    /// The TTL was reset.
    Renewed,
    /// Another token holds the key; it was left untouched.
    HeldByOther,
    /// The key is gone; nothing was created.
    Missing,
}

/// What a backend can do, so callers can check before relying on it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Short backend name, used in errors and logs; the same as
    /// [`VersionedStore::name`](crate::VersionedStore::name) for a backend
    /// that implements both.
    pub name: String,
    /// Acquire returns strictly increasing [`FencingToken`]s per key.
    pub fencing_tokens: bool,
    /// Release is one native compare-and-delete command (no script).
    pub native_compare_and_delete: bool,
    /// Writes can wait for replica acknowledgement.
    pub replica_ack: bool,
    /// `wait_for_release` wakes on release (not only on its timer).
    pub release_notifications: bool,
    /// Implements [`LockBackend::try_acquire_fair`] (a server-side queue of
    /// waiters per key: [`crate::Fairness::Fifo`]).
    pub fair_queue: bool,
    /// Release and renew tell `HeldByOther` from `Missing`.
    pub distinguishes_missing: bool,
    /// Longest TTL the backend accepts.
    pub max_ttl: Duration,
    /// Shortest TTL the backend can honour (etcd: its server's minimum
    /// lease TTL, whole seconds); shorter TTLs are refused with
    /// [`crate::Error::InvalidArgument`].
    pub min_ttl: Duration,
    /// Implements [`crate::raw::SemaphoreBackend`] with a sound bound (leased
    /// permits, counted on one server).
    pub semaphores: bool,
    /// Implements [`crate::raw::MultiLockBackend`] (all-or-nothing over keys).
    pub multi_key_locks: bool,
    /// Implements [`crate::raw::RwLockBackend`] (writer-preferring).
    pub rw_locks: bool,
    /// Implements [`crate::raw::ElectionBackend`].
    pub leader_election: bool,
    /// A lease is the server's record of a token: one that nobody renews
    /// ends when its TTL runs out, and any client presenting the token may
    /// release or renew it. True for every backend but one.
    ///
    /// False where a lock lives with its holder's database session
    /// (PostgreSQL's advisory mode): the lock ends only when its holder
    /// releases it or its session ends, never by a TTL (the TTL only sets
    /// the guard's local deadline and the pace of its liveness checks), and
    /// another client presenting the token is answered
    /// [`ReleaseOutcome::HeldByOther`] / [`RenewOutcome::HeldByOther`]
    /// (only the session that holds the lock can end it). The conformance
    /// suites check that behaviour instead of expiry on such a backend.
    pub lease_expires: bool,
}

impl Capabilities {
    /// These capabilities for a wrapper that implements only the mutex (the
    /// layers): the lock kinds are traits of their own, which the wrapper
    /// does not implement, so it claims none of them.
    pub(crate) fn without_kinds(mut self) -> Self {
        self.semaphores = false;
        self.multi_key_locks = false;
        self.rw_locks = false;
        self.leader_election = false;
        self
    }

    /// Conservative defaults for a backend called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Capabilities {
            name: name.into(),
            fencing_tokens: false,
            native_compare_and_delete: false,
            replica_ack: false,
            release_notifications: false,
            fair_queue: false,
            distinguishes_missing: true,
            max_ttl: crate::validate::MAX_TTL,
            min_ttl: crate::validate::MIN_TTL,
            semaphores: false,
            multi_key_locks: false,
            rw_locks: false,
            leader_election: false,
            lease_expires: true,
        }
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)] // a wrapper forwards every method
impl<B: LockBackend + ?Sized> LockBackend for std::sync::Arc<B> {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        (**self).try_acquire(key, token, ttl).await
    }
    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        (**self).release(key, token).await
    }
    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        (**self).renew(key, token, ttl).await
    }
    async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        (**self).renew_many(items, ttl).await
    }
    async fn wait_for_release(&self, key: &str, max_wait: Duration) {
        (**self).wait_for_release(key, max_wait).await;
    }
    async fn wait_for_release_opts(&self, key: &str, options: &WaitOptions) {
        (**self).wait_for_release_opts(key, options).await;
    }
    async fn try_acquire_fair(
        &self,
        key: &str,
        token: &LockToken,
        ttl: Duration,
        waiter: &FairWaiter,
    ) -> Result<AcquireOutcome> {
        (**self).try_acquire_fair(key, token, ttl, waiter).await
    }
    async fn wait_fair(&self, key: &str, waiter: &FairWaiter, max_wait: Duration) {
        (**self).wait_fair(key, waiter, max_wait).await;
    }
    async fn leave_queue(&self, key: &str, waiter: &FairWaiter) -> Result<()> {
        (**self).leave_queue(key, waiter).await
    }
    async fn inspect(&self, key: &str) -> Result<crate::LockInfo> {
        (**self).inspect(key).await
    }
    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }
    fn instant(&self) -> Option<&dyn InstantLockBackend> {
        (**self).instant()
    }
}
