//! Lua-on-Redis backend of verrou: any Redis >= 6 or Valkey, standalone or
//! cluster, needing only EVAL/EVALSHA (through deadpool-redis and its
//! re-exported `redis` crate).
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let server = lock_testkit::server::RedisServer::start().await?;
//! # let url = server.url(); // a redis-server on a free loopback port
//! use lock_core::LockManager;
//! use lock_redis_lua::RedisLuaBackend;
//!
//! // `url`: "redis://[user:pass@]host[:port][/db]", parameters in the query (see `RedisLuaConfig`)
//! let backend = RedisLuaBackend::connect(&format!("{url}?fencing=true")).await?;
//! let locks = LockManager::new(backend)?;
//! let guard = locks.lock("invoice:42").await?;
//! let token = guard.fencing_token(); // hand it to the resource you write
//! assert!(token.is_some());
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Wire protocol
//!
//! | operation | command | round trips |
//! |---|---|---|
//! | acquire (Redis ≥ 7.0, no fencing) | `SET key token NX PX ttl GET` | 1 |
//! | acquire (older servers, fencing) | script: `GET`; free → `SET token PX ttl` (+ fence); held → `PTTL` | 1 |
//! | release | script: `GET == token` → `DEL` (+ `PUBLISH` when a waiter left its marker) | 1 |
//! | renew | script: `GET == token` → `PEXPIRE`; on Valkey ≥ 8.1 `SET key token IFEQ token PX ttl GET` | 1 |
//! | renew many (the manager's batched renewals) | one script per ≤ 128 keys (per hash slot in a cluster), sent concurrently | 1 |
//! | versioned get | `HMGET key v n` | 1 |
//! | create / CAS / delete | scripts on a hash `{v value, n version, w write id}` | 1 |
//!
//! Scripts go out as EVALSHA; on NOSCRIPT (restart, `SCRIPT FLUSH`,
//! failover) the same call is re-sent as EVAL, which caches it again.
//! Release and renew tell `Released`/`Renewed`, `HeldByOther` and `Missing`
//! apart. Tokens are stored as [`LockToken::to_hex`].
//!
//! The plain acquire needs `NX` with `GET` (Redis 7.0, any Valkey), detected
//! once at build from `HELLO`; a server that refuses it later (a failover to
//! an older replica) switches the backend back to the script. Its reply
//! tells the three cases apart: nil, acquired; our own token, a re-sent
//! acquire (the script then refreshes the TTL from now, as it would have);
//! another token, held (no `PTTL` hint on this path: release notifications
//! wake waiters, and the manager's backoff is short).
//!
//! The native renew is chosen at build when a `SET IFEQ` on a reserved key
//! that does not exist answers nil (it writes nothing); its `GET` reply tells
//! the outcomes apart as the script does. A server that refuses it later
//! switches the backend back to the script.
//!
//! # Connections and timeouts
//!
//! The hot path uses one multiplexed connection, cloned per call (a pool
//! checkout would add a recycle round trip, `UNWATCH`+`PING`, to every
//! operation). It is replaced after an unrecoverable error (connection
//! dropped or refused) or two timeouts in a row. Dedicated pooled
//! connections serve write + WAIT pairs only (see [`ReplicaAck`]): WAIT
//! blocks the server-side connection, so it must not sit in front of the
//! shared traffic. Timeouts: connect ([`DEFAULT_CONNECT_TIMEOUT`], 2 s) and
//! response ([`DEFAULT_RESPONSE_TIMEOUT`], 2 s), plus an overall bound of
//! `connect + 2 × response` per operation. A write that times out or loses
//! its connection fails with `Error::Backend { outcome_unknown: true }`.
//! An acquire without a reply keeps its connection open until its clean-up
//! release, which goes out on that same connection, so the server runs the
//! release after the acquire even when the shared connection was replaced
//! meanwhile (see `in_flight.rs`).
//!
//! # Waiting for a held lock
//!
//! The acquire script returns the holder's PTTL, so the manager's jittered
//! backoff never sleeps past the holder's expiry. On a standalone URL
//! source, releases are also announced: a waiter subscribes, then joins the
//! key's wake set (`verrou:lua:wake:{key}`, its id with a deadline) and leaves
//! a marker (`verrou:lua:waiting:{key}`, see [`RESERVED_KEY_PREFIX`]), with
//! when its acquire started waiting (`verrou:lua:wake-since:{key}`). The
//! release script, finding the marker, hands the key off with a bound on
//! starvation: if the live waiter that started waiting first has waited
//! `lock_redis_family::wake::STARVING_MS`, the key is set to a short
//! reservation naming it (`verrou:reserved:<waiter id>`, which no token
//! matches and only its process's acquire takes) and its id is
//! `PUBLISH`ed, so only that waiter wakes and the releaser cannot barge
//! back past it; a waiter that has not waited that long is not woken, and
//! the releaser may take the key right back (a hot key mostly stays with
//! its holder, as with a plain `SET NX` loop, without starving the others).
//! A waiter not woken looks once after `RECHECK_MS` whether the key is free
//! (see [`RedisLuaBuilder::release_notifications`]; `hand_off_tests.rs`,
//! and `a_release_wakes_one_waiter_not_the_herd` in `tests/it/hot_path.rs`).
//! A lost message costs the timer, never correctness.
//!
//! # Fair mode
//!
//! With [`lock_core::Fairness::Fifo`] (`LockOptions::fair`), waiters queue
//! in `verrou:lua:queue:{key}` (waiter id → ticket) with a deadline each in
//! `verrou:lua:queue-deadlines:{key}` (server time, `claim` after the
//! waiter's last attempt). The acquire script grants a free key only to the
//! queue's live head (dead entries are dropped wherever they are), and the
//! release script publishes the head's id; a waiter that gives up leaves the
//! queue and wakes the next head. Without release notifications (a cluster)
//! waiters poll every third of their claim.
//!
//! # Cluster
//!
//! [`RedisLuaBuilder::cluster`] routes every script by its first key. The
//! fence key keeps the lock key's hash tag (or wraps the key as the tag),
//! so the acquire script touches one slot. With [`ReplicaAck`], the write
//! and its WAIT go out as one pipeline to one node (the master of the key's
//! slot, or the node an ASK or MOVED redirect names, once), so WAIT always
//! runs on the connection that made the write, even after a redirect or a
//! reconnect; it also runs when the write wrote nothing (e.g. a held key),
//! which then costs up to the WAIT timeout if replicas lag.
//! Release notifications are standalone only (cluster `PUBLISH` is
//! broadcast to every node). The cluster client re-sends a request whose
//! connection dropped; the scripts are written to be safe under that, and
//! to answer a re-send as the first run: a re-sent acquire finds its own
//! token, a re-sent versioned write its write id, and a release or a
//! versioned delete leaves its call's unique id in a short-lived tombstone
//! (`verrou:lua:released:…`, `verrou:lua:deleted:…`, one per key, living
//! twice the call's time bound), so its re-send answers `Released` /
//! `Deleted` rather than `Missing` or `HeldByOther`. Owner and version
//! checks are unchanged: a tombstone only repeats an answer, it never lets
//! a call write.
//!
//! # Versions and fencing tokens
//!
//! A new versioned key starts at the server's `TIME` in microseconds; each
//! write moves it to `max(version + 1, TIME)`. So versions never restart
//! after a delete or expiry (no ABA) unless the server clock steps back
//! further than the key's life (e.g. a failover to a replica whose clock
//! lags). Fencing tokens use the same rule on a per-lock fence key that has
//! no TTL: they increase per grant, and still increase if the fence key is
//! lost (eviction, failover without WAIT). Both are exact integers below
//! 2^53 (Lua numbers).
//!
//! # Guarantees
//!
//! On one server: mutual exclusion while each holder stays inside its local
//! deadline. With asynchronous replication, a failover can lose a lock
//! granted just before it (two holders): use [`ReplicaAck`] to narrow that
//! window, fencing tokens or the versioned store where it matters.
//!
//! # URL
//!
//! `verrou::connect` builds this backend from `redis://[user:pass@]host[:port][/db]`,
//! `rediss://…` (TLS, feature `tls`), `redis+cluster://h1[:p1],h2[:p2]…` and
//! `rediss+cluster://…`. The query parameters are the builder's options under
//! the same names: `connect_timeout`, `response_timeout` (`500ms`, `2s`),
//! `fencing` (`true` for fencing tokens), `release_notifications`,
//! `replica_ack=N` with `replica_ack_timeout=D`, `ack_connections`, `db`, and
//! `tls_ca=/path/ca.pem` (trust this CA instead of the platform's roots). An
//! unknown parameter is an error naming the accepted ones.
//!
//! # Features
//!
//! - `tls`: `rediss://` URLs through rustls
//!   ([`RedisLuaBuilder::tls_root_certs`] for a private CA); facade feature
//!   `redis-lua-tls`.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acquire;
mod builder;
mod config;
mod connection;
mod error;
mod exec;
mod fair;
#[cfg(test)]
mod hand_off_tests;
mod in_flight;
mod inspect;
mod keys;
mod kinds;
mod notify;
mod release;
mod renew;
mod replica_ack;
mod replies;
mod scripts;
mod sentinel;
mod versioned;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use deadpool_redis::redis::{self, Cmd, Value};
use lock_core::raw::{FairWaiter, WaitOptions};
use lock_core::raw::{validate_key, validate_ttl};
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{Capabilities, Error, LockBackend, LockToken, Result};
use lock_redis_family::board::Subscriber;

pub use builder::{
    DEFAULT_ACK_CONNECTIONS, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT, MAX_ACK_CONNECTIONS, OnShortfall,
    RedisLuaBuilder, ReplicaAck,
};
pub use config::{RedisLuaConfig, RedisLuaConnector};
/// The deadpool-redis crate this backend is built on (pools, `redis`).
pub use deadpool_redis;

/// Every helper key of this backend (fence counters, waiter markers) starts
/// with this prefix; user keys starting with it are refused with
/// [`Error::InvalidArgument`], so no lock or value can be (or become)
/// another lock's helper key.
pub const RESERVED_KEY_PREFIX: &str = keys::RESERVED_PREFIX;

use connection::{Dedicated, Shared, run_script};
use error::{Access, BACKEND};
use in_flight::InFlight;
use keys::Helper;
use notify::Notifier;
use replies::server_version;
use scripts::{LuaScript, Scripts};
use versioned::WriteIds;

/// The Lua-on-Redis backend: implements [`LockBackend`] and
/// [`VersionedStore`](lock_core::VersionedStore). Cheap to clone; clones share connections.
#[derive(Clone)]
pub struct RedisLuaBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisLuaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let i = &self.inner;
        f.debug_struct("RedisLuaBackend")
            .field("source", &i.description)
            .field("cluster", &i.cluster)
            .field("fencing", &i.fencing)
            .field("replica_ack", &i.replica_ack)
            .field("release_notifications", &i.notifier.is_some())
            .field("dedicated", &i.dedicated)
            .field("connect_timeout", &i.connect_timeout)
            .field("response_timeout", &i.response_timeout)
            .finish_non_exhaustive()
    }
}

impl RedisLuaBackend {
    /// The key holding `key`'s fence counter (only written with fencing on),
    /// under [`RESERVED_KEY_PREFIX`].
    pub fn fence_key(key: &str) -> String {
        keys::helper(key, Helper::Fence)
    }
}

pub(crate) struct Inner {
    description: String,
    cluster: bool,
    shared: Shared,
    dedicated: Option<Dedicated>,
    notifier: Option<Arc<Notifier>>,
    scripts: Scripts,
    fencing: bool,
    replica_ack: Option<ReplicaAck>,
    connect_timeout: Duration,
    response_timeout: Duration,
    write_ids: WriteIds,
    /// Acquire with `SET NX PX GET` instead of the script (fencing off, and
    /// the server accepts it).
    native_acquire: AtomicBool,
    /// Renew with the server's `SET IFEQ` (Valkey 8.1) instead of a script.
    native_renew: AtomicBool,
    /// Acquires without a reply, for their clean-up to follow them.
    in_flight: InFlight,
    /// How long this backend's waiters have waited per key (release
    /// notifications: the starvation bound counts from their first wait).
    waits: lock_redis_family::wake::Waits,
    /// The value prefix of keys reserved for this process's waiters (with
    /// release notifications).
    reservation: Option<Vec<u8>>,
    /// The starvation bound a release applies and how long its reservation
    /// lives, ms (as text: script arguments).
    starving_ms: String,
    reservation_ms: String,
}

/// One command or script call.
#[derive(Clone)]
enum Call<'a> {
    Script {
        script: &'a LuaScript,
        keys: &'a [&'a str],
        args: &'a [&'a [u8]],
    },
    Command(Cmd),
}

impl Call<'_> {
    async fn run<C: redis::aio::ConnectionLike + Send>(&self, conn: &mut C) -> redis::RedisResult<Value> {
        match self {
            Call::Script { script, keys, args } => run_script(conn, script, keys, args).await,
            Call::Command(cmd) => cmd.query_async::<Value>(conn).await,
        }
    }
}

impl Inner {
    #[allow(clippy::too_many_arguments)] // one constructor, called from the builder
    pub(crate) fn new(
        description: String,
        cluster: bool,
        shared: Shared,
        dedicated: Option<Dedicated>,
        notifier: Option<Arc<Notifier>>,
        fencing: bool,
        replica_ack: Option<ReplicaAck>,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Self> {
        Ok(Inner {
            description,
            cluster,
            shared,
            dedicated,
            scripts: Scripts::new(),
            fencing,
            replica_ack,
            connect_timeout,
            response_timeout,
            write_ids: WriteIds::new()?,
            native_acquire: AtomicBool::new(false),
            native_renew: AtomicBool::new(false),
            in_flight: InFlight::default(),
            waits: lock_redis_family::wake::Waits::default(),
            reservation: notifier
                .as_ref()
                .map(|n| lock_redis_family::wake::reservation_of(n.process())),
            starving_ms: lock_redis_family::wake::STARVING_MS.to_string(),
            reservation_ms: lock_redis_family::wake::RESERVATION_MS.to_string(),
            notifier,
        })
    }

    /// One PING on the shared connection (connecting first), then what the
    /// server accepts: the plain `SET NX GET` acquire needs Redis 7.0 (asked
    /// with `HELLO`, which any user may send, unlike `INFO`) and working
    /// scripts (the release is always one).
    pub(crate) async fn probe(&self) -> Result<()> {
        let ping = Call::Command(redis::cmd("PING"));
        match self.exec("connection check (PING)", "", Access::Read, ping).await {
            Ok(_) => {}
            Err(Error::Backend { message, source, .. }) => {
                return Err(Error::Backend {
                    backend: BACKEND.to_owned(),
                    outcome_unknown: false,
                    message: format!("cannot use the server: {message}"),
                    source,
                });
            }
            Err(e) => return Err(e),
        }
        self.probe_native_renew().await;
        if self.fencing {
            return Ok(());
        }
        let hello = Call::Command(redis::cmd("HELLO"));
        let version = match self.exec("server version (HELLO)", "", Access::Read, hello).await {
            Ok(reply) => server_version(&reply),
            // HELLO without a protocol version needs Redis 6.2: older, scripts.
            Err(e) => {
                tracing::debug!(error = %e, "no server version; acquiring with the script");
                None
            }
        };
        if version.is_none_or(|v| v < (7, 0)) {
            return Ok(());
        }
        // Renamed EVAL/EVALSHA: keep the acquire script, so that try_acquire
        // fails as Unsupported instead of taking a lock no release can free.
        let call = Call::Script {
            script: &self.scripts.probe,
            keys: &[],
            args: &[],
        };
        match self.exec("script check", "", Access::Read, call).await {
            Ok(_) => self.native_acquire.store(true, Ordering::Relaxed),
            Err(e) => tracing::debug!(error = %e, "scripts unavailable; acquiring with the script (and failing)"),
        }
        Ok(())
    }

    /// Whether the server has `SET IFEQ` (Valkey 8.1): asked on a reserved
    /// key that does not exist, so the probe writes nothing (IFEQ never
    /// creates a key). Any error (an older server's syntax error, a missing
    /// ACL right on the key) keeps the renew script.
    async fn probe_native_renew(&self) {
        let mut cmd = redis::cmd("SET");
        cmd.arg(keys::IFEQ_PROBE).arg("").arg("IFEQ").arg("").arg("PX").arg(1);
        match self
            .exec("SET IFEQ check", keys::IFEQ_PROBE, Access::Write, Call::Command(cmd))
            .await
        {
            Ok(Value::Nil) => self.native_renew.store(true, Ordering::Relaxed),
            Ok(other) => tracing::debug!(reply = ?other, "unexpected SET IFEQ reply; renewing with the script"),
            Err(e) => tracing::debug!(error = %e, "no SET IFEQ; renewing with the script"),
        }
    }
}

/// A usable user key: not empty, and not inside [`RESERVED_KEY_PREFIX`].
fn check_key(key: &str) -> Result<()> {
    validate_key(key)?;
    keys::check_user_key(key)
}

#[async_trait]
impl LockBackend for RedisLuaBackend {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        check_key(key)?;
        validate_ttl(ttl)?;
        let i = &self.inner;
        // After a wake-up the key is most likely reserved for us: the
        // script claims it in one round trip.
        let woken = i.waits.take_woken(key);
        let outcome = match i.native_acquire.load(Ordering::Relaxed) && !woken {
            true => match i.acquire_native(key, token, ttl).await? {
                Some(outcome) => outcome,
                None => i.acquire_script(key, token, ttl).await?,
            },
            false => i.acquire_script(key, token, ttl).await?,
        };
        if matches!(outcome, AcquireOutcome::Acquired(_)) {
            i.waits.acquired(key);
        }
        Ok(outcome)
    }

    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.inner.release(key, token).await
    }

    /// With [`ReplicaAck`], `Renewed` only once the replicas acknowledged
    /// the renewal; a shortfall is an outcome-unknown error, so the lease's
    /// deadline does not move.
    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.inner.renew(key, token, ttl).await
    }

    /// One renew-many script per chunk of up to 128 keys (per hash slot in a
    /// cluster), with the codes of [`LockBackend::renew`]; a key of another
    /// type fails alone, a failed call fails its chunk's items.
    async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        self.inner.renew_many(items, ttl).await
    }

    /// With release notifications: registered (with how long its acquire
    /// has waited), the waiter sleeps until a release reserves the key for
    /// it and wakes it (once it has waited `wake::STARVING_MS`), or its
    /// timer; after `wake::RECHECK_MS` without a wake-up it looks once
    /// whether the key is free (a release that found nobody starving woke
    /// nobody).
    async fn wait_for_release(&self, key: &str, max_wait: Duration) {
        self.wait_for_release_opts(key, &WaitOptions::new(max_wait)).await;
    }

    /// [`LockBackend::wait_for_release`] by the named waiter, when there is
    /// one: its id and its age (the caller's count of how long its acquire
    /// has waited) instead of this backend's, so that nodes given the same
    /// waiter reserve the key for the same one.
    async fn wait_for_release_opts(&self, key: &str, options: &WaitOptions) {
        let i = &self.inner;
        let max_wait = options.max_wait;
        let own = match options.waiter {
            Some(w) => Ok(w.id),
            None => LockToken::generate(),
        };
        match (&i.notifier, own) {
            (Some(n), Ok(own)) => {
                let id = notify::waiter_id(n.process(), &own.hex_bytes());
                let waited = i.waits.start_named(key, id, options.waiter.map(|w| w.waited));
                let (answered, replied) = tokio::sync::oneshot::channel();
                let mark = lock_redis_family::wake::noting_reply(i.mark_waiting(key, &id, max_wait, waited), answered);
                let wait = n.wait(id, max_wait, Some(mark));
                let woken =
                    lock_redis_family::wake::wait_or_recheck(max_wait, wait, replied, i.free_or_ours(key)).await;
                i.waits.end(key, woken);
            }
            _ => tokio::time::sleep(max_wait).await,
        }
    }

    /// The fair queue lives beside the key (see [`LockBackend::try_acquire_fair`]);
    /// with release notifications the head wakes on release, without them
    /// every waiter polls every third of its claim.
    async fn try_acquire_fair(
        &self,
        key: &str,
        token: &LockToken,
        ttl: Duration,
        waiter: &FairWaiter,
    ) -> Result<AcquireOutcome> {
        check_key(key)?;
        validate_ttl(ttl)?;
        self.inner.acquire_fair(key, token, ttl, waiter).await
    }

    async fn wait_fair(&self, key: &str, waiter: &FairWaiter, max_wait: Duration) {
        let _ = key; // the waiter's id names its channel
        match &self.inner.notifier {
            Some(n) => {
                let none: Option<std::future::Ready<bool>> = None;
                n.wait(self.inner.waiter_id(waiter), max_wait, none).await;
            }
            None => tokio::time::sleep(max_wait).await,
        }
    }

    async fn leave_queue(&self, key: &str, waiter: &FairWaiter) -> Result<()> {
        check_key(key)?;
        self.inner.leave_queue(key, waiter).await
    }

    /// One read-only script: the key's value, `PTTL` and fence counter.
    async fn inspect(&self, key: &str) -> Result<lock_core::LockInfo> {
        check_key(key)?;
        self.inner.inspect(key).await
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new(BACKEND);
        caps.fencing_tokens = self.inner.fencing;
        caps.replica_ack = self.inner.replica_ack.is_some();
        caps.release_notifications = self.inner.notifier.is_some();
        caps.fair_queue = self.inner.replica_ack.is_none();
        caps.semaphores = true;
        caps.multi_key_locks = true;
        caps.rw_locks = true;
        caps.leader_election = true;
        caps
    }
}
