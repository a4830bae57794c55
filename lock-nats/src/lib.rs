//! NATS backend of verrou: [`NatsBackend`] implements [`LockBackend`] and
//! [`lock_core::VersionedStore`] on a JetStream key-value bucket through
//! `async-nats`, the official client.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let nats = lock_testkit::server::NatsCluster::single().await?;
//! # let url = nats.url(); // one nats-server with JetStream on a free loopback port
//! use lock_core::{LockManager, LockOptions};
//! use lock_nats::NatsBackend;
//! use std::time::Duration;
//!
//! // `url`: "nats://10.0.0.1:4222,10.0.0.2:4222,10.0.0.3:4222?replicas=3"
//! let backend = NatsBackend::connect(&url).await?;
//! let locks = LockManager::with_options(backend, LockOptions::with_ttl(Duration::from_secs(5)))?;
//! let guard = locks.lock("invoice:42").await?;
//! let token = guard.fencing_token(); // the revision the acquire wrote
//! assert!(token.is_some());
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # How it works
//!
//! Each lock is a key of the bucket (default `verrou`, created when
//! missing: history 1, file storage, per-key TTL and delete markers on).
//! Every write is one publish to the key's subject carrying the sequence it
//! expects the subject to end at (`Nats-Expected-Last-Subject-Sequence`),
//! so the stream leader applies it only if nothing changed since:
//!
//! - **Acquire**: create with the lease's TTL: expect no message, or (after
//!   a release or an expiry) the delete marker that is the key's last
//!   message, read from the stream leader. Two creators after a release
//!   expect the same marker and exactly one wins (the client's own
//!   `create` once re-created a deleted key as a plain put, so two
//!   creators both won: nats.rs #1301). The **fencing token** is the
//!   revision the acquire wrote: the stream sequence, bucket-wide and only
//!   growing, never reused after a delete (but see *Guarantees*).
//! - **Renew**: the holder's token again at the held revision, with the
//!   TTL again (`Nats-TTL`; the client's `update` sends none), and the
//!   fencing token after it (`<token>:<revision>`). The renewals the
//!   manager's renewer sends together ([`LockBackend::renew_many`]) go
//!   out as one JetStream atomic batch per 1,000 (server 2.12 and later;
//!   the builder turns `allow_atomic` on for the bucket's stream, and
//!   without it renewals stay one publish each): the same messages, one
//!   acknowledgement per batch instead of one per renewal. A batch is all
//!   or nothing, so when any lock in it was lost the batch stores nothing
//!   and its leases are renewed one by one, each told its own outcome.
//! - **Inspect** ([`LockBackend::inspect`]): one read of the key. A held
//!   key reports the acquire's revision as its fencing token (after any
//!   number of renewals) and its whole `Nats-TTL` as the remaining lease:
//!   an upper bound that needs no comparison of this machine's clock with
//!   the server's.
//! - **Release**: a delete marker expecting the held revision (itself
//!   ending after the bucket's marker TTL, 1 s by default).
//! - **TTLs are whole seconds** on the server: a TTL is rounded up (a dead
//!   holder's lock frees at most a second later than its TTL), TTLs below
//!   1 s are refused ([`Capabilities::min_ttl`]), and the local deadline
//!   still follows the TTL asked for, so it always ends first. The
//!   client's `create_with_ttl` rounds down, which would end a 1.5 s lease
//!   on the server before its holder's deadline: this crate writes its own
//!   headers. Each lock's TTL is its own: a lock nobody renews expires
//!   within its TTL (rounded up) whatever the backend's other locks do.
//! - **Waiting** reads the holder's entry, then watches the key's subject
//!   from the next revision (an ordered consumer filtered on the server)
//!   until a delete marker comes: the release's, or the server's when the
//!   TTL ran out. Renewals do not wake it; nothing polls.
//! - **Versioned store** on the revisions too (values under their own
//!   subjects): one publish per write, expecting the version it replaces.
//!
//! Reads go to the stream leader (`STREAM.MSG.GET`), not to the direct-get
//! API, which a lagging replica may answer.
//!
//! A write whose outcome is unknown (no acknowledgement in time, or a
//! connection lost: the client may still send it after a reconnect) may be
//! applied later; it carries the lease's TTL, so whatever it leaves ends
//! within that TTL.
//!
//! # What it does not do
//!
//! - **`ReplicaAck` has no meaning here**: JetStream acknowledges a write
//!   only once the stream's replicas have it ([`Capabilities::replica_ack`]
//!   is false; there is nothing to wait for after the acknowledgement).
//! - **Fair mode** is refused with [`lock_core::Error::Unsupported`]: a
//!   queue needs an ordered set per key with dead-waiter clean-up, which a
//!   history-1 bucket does not give in one conditional write.
//! - **Lock kinds** (semaphores, read-write and multi-key locks, leader
//!   election) are not implemented ([`Capabilities`] says so): each needs
//!   several keys changed at once, with per-kind clean-up of dead
//!   holders that one atomic batch of conditional writes does not give.
//!
//! # Guarantees
//!
//! Safe only with `sync_interval: always` on every server, replicas ≥ 3 and
//! no membership change while locks are held. Jepsen's analysis of NATS
//! 2.12.1 (December 2025) lost acknowledged writes after a whole-cluster
//! crash with the default `sync_interval` (fsync every two minutes), and
//! even with `sync_interval: always` after file corruption on a minority or
//! membership changes under partitions. A lost log tail can hand out a
//! revision again: the fencing token only grows while the stream's log is
//! not lost. SAFETY.md's NATS rows are what was tested.
//!
//! # Features
//!
//! None: TLS (`tls://`) is always compiled in (async-nats, rustls with
//! `ring`). The facade's feature is `nats` (part of `full`).
//!
//! # URL
//!
//! [`NatsConfig::from_url`]: `nats://[user:password@]host[:4222][,host…]`
//! or `tls://…`, with the parameters `bucket`, `replicas`,
//! `connect_timeout`, `response_timeout`, `marker_ttl` and `tls_ca`
//! ([`config`]).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod batch;
mod builder;
pub mod config;
mod error;
mod kv;
mod lock;
mod versioned;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::raw::{BackendConfig, Connected, Connector, FairWaiter, SchemeTable, in_context};
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{Capabilities, Error, LockBackend, LockToken, Result};

pub use async_nats;
pub use builder::{NatsBuilder, OwnClient};
pub use config::{Credentials, NatsConfig};

/// The facade's entry for `nats://` and `tls://`: the backend's locks and
/// versioned store (no lock kinds: [`Capabilities`] says why not).
#[derive(Debug, Clone, Copy, Default)]
pub struct NatsConnector;

#[async_trait]
impl Connector for NatsConnector {
    fn check(&self, url: &str, _: &SchemeTable) -> Result<()> {
        NatsConfig::from_url(url).map(drop)
    }

    async fn connect(&self, url: &str, _: &SchemeTable) -> Result<Connected> {
        let config = NatsConfig::from_url(url)?;
        let description = config.description();
        let backend = Arc::new(
            NatsBackend::builder_from(config)?
                .build()
                .await
                .map_err(|e| in_context(e, &description))?,
        );
        let mut connected = Connected::locks_only(backend.clone(), description);
        connected.store = Some(backend);
        Ok(connected)
    }
}
pub use kv::MAX_SUBJECT_KEY_LEN;

/// Why fair mode is refused (the text of its [`Error::Unsupported`]).
pub const FAIR_UNSUPPORTED: &str = "fair (FIFO) locking: a per-key queue of waiters with dead-waiter clean-up \
     takes several keys changed at once, which one conditional publish to a history-1 key-value bucket \
     cannot do";

/// The NATS backend. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct NatsBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for NatsBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsBackend")
            .field("subjects", &self.inner.subject_prefix)
            .field("replicas", &self.inner.replicas)
            .finish_non_exhaustive()
    }
}

pub(crate) struct Inner {
    pub(crate) client: async_nats::Client,
    pub(crate) js: async_nats::jetstream::Context,
    pub(crate) stream: async_nats::jetstream::stream::Stream,
    pub(crate) store: async_nats::jetstream::kv::Store,
    /// `$KV.<bucket>.`
    pub(crate) subject_prefix: String,
    replicas: usize,
    /// Time to wait for one answer.
    pub(crate) response_timeout: Duration,
    /// Lifetime of the delete markers this backend writes.
    pub(crate) marker_ttl_secs: u64,
    pub(crate) held: lock::Held,
    /// Whether the bucket's stream takes atomic batches (the renewer's
    /// batched renewals, see `batch`): set by the builder, cleared when the
    /// server refuses one.
    pub(crate) atomic_batches: std::sync::atomic::AtomicBool,
    pub(crate) markers: lock::Markers,
    pub(crate) kept: versioned::Kept,
}

impl NatsBackend {
    /// Connect to `url` ([`NatsConfig::from_url`]) with its settings.
    ///
    /// # Errors
    /// As [`NatsConfig::from_url`] and [`NatsBuilder::build`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`NatsBuilder::build`].
    pub async fn connect(url: &str) -> Result<NatsBackend> {
        NatsBackend::builder(url)?.build().await
    }

    /// Settings from `url`, to adjust before [`NatsBuilder::build`].
    ///
    /// # Errors
    /// As [`NatsConfig::from_url`].
    pub fn builder(url: &str) -> Result<NatsBuilder> {
        NatsBackend::builder_from(NatsConfig::from_url(url)?)
    }

    /// Settings from `config`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the config does not validate.
    pub fn builder_from(config: NatsConfig) -> Result<NatsBuilder> {
        config.validate()?;
        Ok(NatsBuilder::from_config(config))
    }

    /// Settings over a client of the caller's: an [`async_nats::Client`]
    /// or a [`async_nats::jetstream::Context`] (connection settings and
    /// credentials are the client's; the bucket settings apply).
    pub fn builder_with_client(client: impl Into<OwnClient>) -> NatsBuilder {
        NatsBuilder::with_client(client.into())
    }

    /// The connection (for operations verrou does not wrap).
    pub fn client(&self) -> &async_nats::Client {
        &self.inner.client
    }

    /// The bucket's replicas, as the server reports them.
    pub fn replicas(&self) -> usize {
        self.inner.replicas
    }

    /// Leases this backend remembers the revision of (held, or lost and
    /// not yet released): it goes back to zero once they are released.
    pub fn remembered_leases(&self) -> usize {
        self.inner.held.len()
    }
}

#[async_trait]
impl LockBackend for NatsBackend {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.inner.try_acquire(key, token, ttl).await
    }

    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.inner.release(key, token).await
    }

    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.inner.renew(key, token, ttl).await
    }

    async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        self.inner.renew_many(items, ttl).await
    }

    async fn inspect(&self, key: &str) -> Result<lock_core::LockInfo> {
        self.inner.inspect(key).await
    }
    async fn wait_for_release(&self, key: &str, max_wait: Duration) {
        lock_core::raw::wait_hint(max_wait, self.inner.wait_for_release(key)).await;
    }

    async fn try_acquire_fair(
        &self,
        key: &str,
        token: &LockToken,
        ttl: Duration,
        waiter: &FairWaiter,
    ) -> Result<AcquireOutcome> {
        let _ = (key, token, ttl, waiter);
        Err(Error::unsupported(error::NAME, FAIR_UNSUPPORTED))
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new(error::NAME);
        caps.fencing_tokens = true;
        caps.native_compare_and_delete = true;
        caps.release_notifications = true;
        // JetStream acknowledges after the stream's quorum: no WAIT to add.
        caps.replica_ack = false;
        caps.fair_queue = false;
        caps.min_ttl = Duration::from_secs(1);
        caps
    }
}
