//! The primitive lock operations every backend implements.

use std::time::Duration;

use async_trait::async_trait;

use crate::error::Result;
use crate::token::{FencingToken, LockToken};

/// Primitive, owner-checked lock operations: one round trip each on remote
/// backends. The [`crate::LockManager`] builds waiting, renewal and guards on
/// top; backends only answer "did it work, and if not, why".
///
/// Object safe: use it as `Arc<dyn LockBackend>`.
#[async_trait]
pub trait LockBackend: Send + Sync + 'static {
    /// Take `key` for `token` for `ttl` if nobody holds it.
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome>;

    /// Delete `key` only if `token` holds it.
    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome>;

    /// Reset `key`'s TTL to `ttl` only if `token` holds it.
    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome>;

    /// Wait until `key` may have been released, or `max_wait` passes.
    ///
    /// A hint for waiters, never a guarantee: returning early or late costs
    /// latency, not correctness. The default just sleeps; backends with a
    /// release notification (memory, pub/sub) wake earlier.
    async fn wait_for_release(&self, key: &str, max_wait: Duration) {
        let _ = key;
        tokio::time::sleep(max_wait).await;
    }

    /// What this backend can do.
    fn capabilities(&self) -> Capabilities;
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
    /// Short backend name, used in errors and logs.
    pub name: String,
    /// Acquire returns strictly increasing [`FencingToken`]s per key.
    pub fencing_tokens: bool,
    /// Release is one native compare-and-delete command (no script).
    pub native_compare_and_delete: bool,
    /// Writes can wait for replica acknowledgement.
    pub replica_ack: bool,
    /// `wait_for_release` wakes on release (not only on its timer).
    pub release_notifications: bool,
    /// Release and renew tell `HeldByOther` from `Missing`.
    pub distinguishes_missing: bool,
    /// Longest TTL the backend accepts.
    pub max_ttl: Duration,
}

impl Capabilities {
    /// Conservative defaults for a backend called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Capabilities {
            name: name.into(),
            fencing_tokens: false,
            native_compare_and_delete: false,
            replica_ack: false,
            release_notifications: false,
            distinguishes_missing: true,
            max_ttl: crate::options::MAX_TTL,
        }
    }
}

#[async_trait]
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
    async fn wait_for_release(&self, key: &str, max_wait: Duration) {
        (**self).wait_for_release(key, max_wait).await;
    }
    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }
}
