//! etcd backend of verrou: [`EtcdBackend`] implements [`LockBackend`] and
//! [`lock_core::VersionedStore`] on an etcd cluster through `etcd-client`, so a lock
//! stays exclusive through the loss of any minority of members.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let cluster = lock_testkit::server::EtcdCluster::single().await?;
//! # let url = cluster.url(); // one etcd member on a free loopback port
//! use lock_core::LockManager;
//! use lock_etcd::EtcdBackend;
//!
//! // `url`: "etcd://10.0.0.1:2379,10.0.0.2:2379,…" (see `EtcdConfig`)
//! let backend = EtcdBackend::connect(&url).await?;
//! let locks = LockManager::new(backend)?; // TTL 30 s: whole seconds, at least the server's minimum
//! let guard = locks.lock("invoice:42").await?;
//! let token = guard.fencing_token(); // the key's create revision
//! assert!(token.is_some());
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # How it works
//!
//! - **Acquire** is one transaction: create the key only if it does not
//!   exist (`create_revision == 0`), attached to a lease, else read the
//!   holder. The **fencing token** is the key's create revision:
//!   cluster-wide, only growing, kept through leader changes.
//! - **Release and renew** are guarded by the owner: the key's value is the
//!   holder's lock token, compared in the same transaction.
//! - **A lease per holder**: each lock (a multi-key lock, a permit, a
//!   leadership, a read or write hold) is on an etcd lease of its own, so
//!   what its holder stops renewing (or a guard that is lost and not yet
//!   dropped) is freed on the server within its TTL rounded up to whole
//!   seconds, whatever the backend's other locks do. A renewal round is one
//!   keepalive message per lease, all on the backend's **one** keepalive
//!   stream (the round's answers awaited at most the response timeout),
//!   and **no read** of a lock key the backend created (or last read) on
//!   its lease: one watch per backend over the lock prefix, opened by the
//!   first renewal, tells which keys someone else deleted or rewrote (an
//!   operator's delete or put), and the round waits for it to report the
//!   keepalive answer's revision. Those keys, keys known before the watch
//!   opened, other kinds' entries and every key while no watch is open are
//!   read first (one read per 128 keys), so such a lock is lost at its
//!   next renewal. A lease left unused by a refused acquire or a release
//!   is kept for the next acquire of the same TTL.
//! - **TTLs are whole seconds** on the server, with a server minimum
//!   (`ceil(1.5 × election timeout)`: 2 s with etcd's default timers).
//!   A TTL is rounded up to whole seconds on the server (a dead holder's
//!   lock frees at most a second later than its TTL); the local deadline
//!   still follows the TTL asked for. A TTL below the server's minimum is
//!   refused with [`lock_core::Error::InvalidArgument`]; the minimum is
//!   learnt when connecting and reported in [`Capabilities::min_ttl`].
//! - **Loss**: the local deadline stays the source of truth (the manager
//!   takes it before the request, minus drift). A lease the server says is
//!   gone makes every renewal of its keys answer `Missing` (loss at once); a
//!   keepalive that fails, times out or whose stream closes fails the
//!   renewal (loss by the deadline at the latest), and the stream is
//!   reopened by the next one. A grant checks its lease (a keepalive sent
//!   after the request started, unless a recent one covers the TTL), so a
//!   lock is never handed out on a lease that had already ended.
//! - **Waiting** watches the holder's key from the revision read (a
//!   wake-up on its delete, no polling).
//! - **Fair mode** ([`lock_core::Fairness::Fifo`]) from create-revision
//!   order under a per-name queue prefix: each waiter watches only the entry
//!   before its own (no herd). A waiter's entry lives on a lease of its own
//!   for its claim, rounded up to whole seconds and at least the server's
//!   minimum.
//! - **Versioned store** on the key's `mod_revision`: compare-and-set in one
//!   transaction; versions never repeat, even after a delete.
//! - **Every lock kind**, each holder on a lease of its own, its fencing
//!   token (a leader's term) its entry's create revision: multi-key locks
//!   (one transaction over all keys, all or nothing), read-write locks
//!   (writer-preferring: a waiting writer's intent holds new readers back;
//!   one transaction per operation), semaphores (a decision from a read of
//!   the name's range, written only if that range is unchanged; a waiting
//!   multi-permit request's reservation holds single-permit churn back) and
//!   leader election (campaign / observe through a watch / resign; term =
//!   the leader key's create revision).
//!
//! A write whose outcome is unknown (no reply in time, or a caller that
//! gave up) may still commit later: its lease is never used again and
//! nobody renews it, so whatever the write may have left ends within its
//! TTL, as a lost lock does on the Redis backends.
//!
//! Keys live under a namespace (default `verrou/`): locks under
//! `verrou/lock/<key>`, values under `verrou/value/<key>`, fair queues under
//! `verrou/queue/`, semaphores under `verrou/sem/`, read-write locks under
//! `verrou/rw/`, leaders under `verrou/election/<name>`.
//!
//! # Guarantees
//!
//! Every write goes through Raft: mutual exclusion while a majority of members
//! is up and each holder stays inside its local deadline; the fencing token
//! never goes backwards across leader changes. SAFETY.md runs it on three
//! members under leader kills and pauses, a partitioned member and client
//! stalls.
//!
//! # URL
//!
//! `verrou::connect` builds this backend from
//! `etcd://[user:pass@]h1[:2379],h2[:2379]…` or `etcds://…` (TLS, feature
//! `tls`), with the parameters `connect_timeout`, `response_timeout`,
//! `namespace` (default `verrou/`) and `tls_ca`.
//!
//! # Features
//!
//! - `tls`: `etcds://` endpoints through tonic's rustls ([`EtcdBuilder::tls`]);
//!   facade feature `etcd-tls`.
//!
//! Building needs `protoc`: `etcd-client` compiles etcd's `.proto` files in
//! its build script and has no vendored option, which is why the facade's
//! `full` feature leaves etcd out.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod builder;
mod config;
mod election;
mod error;
mod fair;
mod held;
mod inspect;
mod keepalive;
mod kinds;
mod lock;
mod multi;
mod renew;
mod rw;
mod semaphore;
mod session;
mod versioned;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{EventType, WatchFilterType, WatchOptions};
use lock_core::raw::FairWaiter;
use lock_core::raw::{validate_key, validate_ttl};
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{Capabilities, Error, LockBackend, LockToken, Result};

pub use builder::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_NAMESPACE, DEFAULT_RESPONSE_TIMEOUT, EtcdBuilder};
pub use config::{DEFAULT_PORT, ETCD_PARAMS, EtcdConfig, EtcdConnector};
/// The etcd-client version this crate is built with: the type of
/// [`EtcdBackend::client`], and the TLS settings of [`EtcdBuilder::tls`].
pub use etcd_client;
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub use etcd_client::{Certificate, Identity as TlsIdentity, TlsOptions};
pub use semaphore::GONE_WINDOW;

/// `d` in whole seconds, rounded up: [`Error::InvalidArgument`] above
/// [`lock_core::LockOptions::MAX_TTL`] (no lease that long is needed, and etcd's own
/// limit is not far above), never an overflow.
pub(crate) fn whole_secs(d: Duration, what: &str) -> Result<i64> {
    if d > lock_core::LockOptions::MAX_TTL {
        return Err(Error::invalid(format!(
            "{what} {d:?} is above the maximum {:?}",
            lock_core::LockOptions::MAX_TTL
        )));
    }
    let secs = d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0));
    i64::try_from(secs).map_err(|_| Error::invalid(format!("{what} {d:?} is too long for etcd")))
}

/// Most operations etcd accepts in one transaction by default
/// (`--max-txn-ops`).
pub(crate) const MAX_TXN_OPS: usize = 128;

/// The etcd backend. Cheap to clone; clones share the client and leases.
#[derive(Clone)]
pub struct EtcdBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("lock_prefix", &self.inner.lock_prefix)
            .field("min_ttl", &self.inner.min_ttl)
            .finish_non_exhaustive()
    }
}

pub(crate) struct Inner {
    pub(crate) client: etcd_client::Client,
    lock_prefix: String,
    value_prefix: String,
    min_ttl: Duration,
    pub(crate) sessions: session::Sessions,
    /// The one keepalive stream of every lease.
    pub(crate) keepalives: keepalive::KeepAlives,
    /// The held lock keys renewals trust, and the watch over them.
    pub(crate) held: held::HeldKeys,
    namespace: String,
    /// Each fair waiter's own lease (its queue entry's).
    waiter_leases: std::sync::Mutex<std::collections::HashMap<LockToken, i64>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Locks still held by this backend's leases free at once rather
        // than after their TTL (best effort: needs a runtime).
        let leases = self.sessions.leases();
        if leases.is_empty() {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let mut client = self.client.lease_client();
            rt.spawn(async move {
                for lease in leases {
                    let _ = client.revoke(lease).await;
                }
            });
        }
    }
}

impl Inner {
    /// `ttl` in whole seconds on the server, rounded up.
    pub(crate) fn lease_secs(&self, ttl: Duration) -> Result<i64> {
        validate_ttl(ttl)?;
        if ttl < self.min_ttl {
            return Err(Error::invalid(format!(
                "ttl {ttl:?} is below this etcd server's minimum lease TTL {:?}",
                self.min_ttl
            )));
        }
        whole_secs(ttl, "ttl")
    }

    pub(crate) fn lock_key(&self, key: &str) -> Result<Vec<u8>> {
        validate_key(key)?;
        Ok(format!("{}{key}", self.lock_prefix).into_bytes())
    }

    pub(crate) fn value_key(&self, key: &str) -> Result<Vec<u8>> {
        validate_key(key)?;
        Ok(format!("{}{key}", self.value_prefix).into_bytes())
    }

    /// Until `key` is deleted (or changes hands), from the revision read.
    pub(crate) async fn wait_for_release(&self, key: &str) -> Result<()> {
        let k = self.lock_key(key)?;
        let (current, revision) = self.get_entry(&k).await?;
        if current.is_none() {
            return Ok(());
        }
        self.watch_until_deleted(k, revision + 1).await
    }

    /// Until `key` is deleted at or after `start_revision` (or the server
    /// cancels the watch): one watch, no polling.
    pub(crate) async fn watch_until_deleted(&self, key: Vec<u8>, start_revision: i64) -> Result<()> {
        let opts = WatchOptions::new()
            .with_start_revision(start_revision)
            .with_filters([WatchFilterType::NoPut]);
        let mut events = self
            .client
            .watch_client()
            .watch(key, Some(opts))
            .await
            .map_err(|e| error::failed("watch", e))?;
        loop {
            match events.message().await {
                Ok(Some(resp)) if resp.canceled() => return Ok(()),
                Ok(Some(resp)) if resp.events().iter().any(|e| e.event_type() == EventType::Delete) => {
                    return Ok(());
                }
                Ok(Some(_)) => {}
                Ok(None) => return Err(Error::backend(error::NAME, "the watch stream closed")),
                Err(e) => return Err(error::failed("watch", e)),
            }
        }
    }
}

impl EtcdBackend {
    /// The server's minimum lease TTL, learnt when connecting.
    pub fn min_ttl(&self) -> Duration {
        self.inner.min_ttl
    }

    /// Lease keepalive messages this backend has sent: one per lease kept
    /// alive (a holder's, per renewal round), all on one stream.
    pub fn keepalives_sent(&self) -> u64 {
        self.inner.keepalives.sent.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Keepalive streams this backend has opened: one, and one more after
    /// each stream that failed or answered late, whatever the number of
    /// leases kept alive.
    pub fn keepalive_streams_opened(&self) -> u64 {
        self.inner.keepalives.opened.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The underlying client (for operations verrou does not wrap).
    pub fn client(&self) -> &etcd_client::Client {
        &self.inner.client
    }
}

#[async_trait]
impl LockBackend for EtcdBackend {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.inner.try_acquire(key, token, ttl).await
    }

    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.inner.release(key, token).await
    }

    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        let mut out = self.inner.renew_many(&[(key, token)], ttl).await;
        out.pop()
            .unwrap_or_else(|| Err(Error::backend(error::NAME, "renewal returned no outcome")))
    }

    async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        self.inner.renew_many(items, ttl).await
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
        self.inner.try_acquire_fair(key, token, ttl, waiter).await
    }

    async fn wait_fair(&self, key: &str, waiter: &FairWaiter, max_wait: Duration) {
        lock_core::raw::wait_hint(max_wait, self.inner.wait_fair(key, waiter)).await;
    }

    async fn leave_queue(&self, key: &str, waiter: &FairWaiter) -> Result<()> {
        validate_key(key)?;
        self.inner.leave_queue(key, waiter).await
    }

    /// A range read of the key and its lease's time to live.
    async fn inspect(&self, key: &str) -> Result<lock_core::LockInfo> {
        self.inner.inspect(key).await
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new(error::NAME);
        caps.fair_queue = true;
        caps.multi_key_locks = true;
        caps.semaphores = true;
        caps.rw_locks = true;
        caps.leader_election = true;
        caps.fencing_tokens = true;
        caps.native_compare_and_delete = true;
        caps.release_notifications = true;
        caps.min_ttl = self.inner.min_ttl;
        caps
    }
}
