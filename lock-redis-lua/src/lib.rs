//! Lua-on-Redis backend of verrou: any Redis >= 6 or Valkey, standalone or
//! cluster, needing only EVAL/EVALSHA (through deadpool-redis and its
//! re-exported `redis` crate).
//!
//! # Wire protocol
//!
//! | operation | command | round trips |
//! |---|---|---|
//! | acquire (Redis ≥ 7.0, no fencing) | `SET key token NX PX ttl GET` | 1 |
//! | acquire (older servers, fencing) | script: `GET`; free → `SET token PX ttl` (+ fence); held → `PTTL` | 1 |
//! | release | script: `GET == token` → `DEL` (+ `PUBLISH` when a waiter left its marker) | 1 |
//! | renew | script: `GET == token` → `PEXPIRE` | 1 |
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
//! # Connections and timeouts
//!
//! The hot path uses one multiplexed connection, cloned per call (a pool
//! checkout would add a recycle round trip, `UNWATCH`+`PING`, to every
//! operation). It is replaced after an unrecoverable error (connection
//! dropped or refused) or two timeouts in a row. Dedicated pooled
//! connections serve write + WAIT pairs only (see [`ReplicaAck`]): WAIT
//! blocks the server-side connection, so it must not sit in front of the
//! shared traffic. Timeouts: connect ([`DEFAULT_CONNECT_TIMEOUT`]) and
//! response ([`DEFAULT_RESPONSE_TIMEOUT`]), plus an overall bound of
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
//! source, releases are also announced with `PUBLISH` when a waiter left a
//! marker (`verrou:lua:waiting:{key}`, see [`RESERVED_KEY_PREFIX`]; set with a short TTL after subscribing; the
//! release script deletes it with the lock in one `DEL`), and
//! `wait_for_release` wakes on them (see
//! [`RedisLuaBuilder::release_notifications`]): measured across two
//! managers, a waiter took the lock 0.06–0.12 ms after the release instead
//! of 6–70 ms on timers alone. A lost message costs the timer, never
//! correctness.
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

mod builder;
mod connection;
mod error;
mod in_flight;
mod keys;
mod notify;
mod scripts;

use lock_core::RenewBatch;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use deadpool_redis::redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use deadpool_redis::redis::{self, Cmd, Value};
use lock_core::options::{ttl_millis, validate_key, validate_ttl};
use lock_core::{
    AcquireOutcome, Capabilities, CasOutcome, CreateOutcome, DeleteOutcome, Error, Expiry, FencingToken, Lease,
    LockBackend, LockToken, ReleaseOutcome, RenewOutcome, Replication, Result, Versioned, VersionedStore,
};

pub use builder::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_DEDICATED_POOL_SIZE, DEFAULT_RESPONSE_TIMEOUT, OnShortfall, RedisLuaBuilder,
    ReplicaAck,
};
/// The deadpool-redis crate this backend is built on (pools, `redis`).
pub use deadpool_redis;

/// Every helper key of this backend (fence counters, waiter markers) starts
/// with this prefix; user keys starting with it are refused with
/// [`Error::InvalidArgument`], so no lock or value can be (or become)
/// another lock's helper key.
pub const RESERVED_KEY_PREFIX: &str = keys::RESERVED_PREFIX;

use connection::{Conn, Dedicated, Shared, pool_error, run_script};
use error::{Access, BACKEND, command_error, op_timeout, same_error, unexpected_reply};
use in_flight::InFlight;
use keys::Helper;
use notify::Notifier;
use scripts::{LuaScript, Scripts};

/// The Lua-on-Redis backend: implements [`LockBackend`] and
/// [`VersionedStore`]. Cheap to clone; clones share connections.
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
            .finish()
    }
}

impl RedisLuaBackend {
    /// A backend on the standalone server at `url`, with the defaults.
    ///
    /// # Errors
    /// As [`RedisLuaBuilder::build`].
    pub async fn connect(url: &str) -> Result<Self> {
        RedisLuaBuilder::url(url).build().await
    }

    /// A builder for a standalone server at `url` (see [`RedisLuaBuilder::url`]).
    pub fn builder_url(url: impl Into<String>) -> RedisLuaBuilder {
        RedisLuaBuilder::url(url)
    }

    /// A builder for a cluster (see [`RedisLuaBuilder::cluster`]).
    pub fn builder_cluster<I, S>(urls: I) -> RedisLuaBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedisLuaBuilder::cluster(urls)
    }

    /// The key holding `key`'s fence counter (only written with fencing on),
    /// under [`RESERVED_KEY_PREFIX`].
    pub fn fence_key(key: &str) -> String {
        keys::helper(key, Helper::Fence)
    }
}

/// Unique ids of versioned writes, so a re-sent write recognises itself.
struct WriteIds {
    prefix: u64,
    next: AtomicU64,
}

impl WriteIds {
    fn new() -> Result<Self> {
        let bytes = *LockToken::generate()?.as_bytes();
        let mut prefix = [0u8; 8];
        prefix.copy_from_slice(&bytes[..8]);
        Ok(WriteIds {
            prefix: u64::from_le_bytes(prefix),
            next: AtomicU64::new(0),
        })
    }

    fn next(&self) -> String {
        format!("{:016x}{:x}", self.prefix, self.next.fetch_add(1, Ordering::Relaxed))
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
    /// Acquires without a reply, for their clean-up to follow them.
    in_flight: InFlight,
}

/// One command or script call.
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
            notifier,
            scripts: Scripts::new(),
            fencing,
            replica_ack,
            connect_timeout,
            response_timeout,
            write_ids: WriteIds::new()?,
            native_acquire: AtomicBool::new(false),
            in_flight: InFlight::default(),
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

    /// Bound of one call on an open connection: a script may take two
    /// round trips (EVALSHA, NOSCRIPT, EVAL).
    fn call_budget(&self) -> Duration {
        self.response_timeout * 2
    }

    /// Runs `call` on the shared connection.
    async fn exec(&self, op: &str, key: &str, access: Access, call: Call<'_>) -> Result<Value> {
        self.exec_tracked(op, key, access, call, None).await
    }

    /// Runs `call` on the shared connection; an acquire (`acquire`: its
    /// token and TTL) is remembered with its connection until it gets a
    /// reply (see [`InFlight`]).
    async fn exec_tracked(
        &self,
        op: &str,
        key: &str,
        access: Access,
        call: Call<'_>,
        acquire: Option<(&LockToken, Duration)>,
    ) -> Result<Value> {
        let (checkout, mut conn) = self.shared.get().await?;
        if let Some((token, ttl)) = acquire {
            self.in_flight.start(token, conn.clone(), ttl);
        }
        let budget = self.call_budget();
        let reply = tokio::time::timeout(budget, call.run(&mut conn)).await;
        if let (Some((token, _)), Ok(r)) = (acquire, &reply)
            && answered(r)
        {
            self.in_flight.settled(token);
        }
        match reply {
            Ok(Ok(value)) => {
                self.shared.succeeded(checkout);
                Ok(value)
            }
            Ok(Err(e)) => {
                self.shared.failed(checkout, Some(&e));
                Err(command_error(e, op, key, access))
            }
            Err(_) => {
                self.shared.failed(checkout, None);
                Err(op_timeout(op, key, budget, access))
            }
        }
    }

    /// Runs a write on a dedicated connection and, when `wrote` says it
    /// wrote, WAITs on that same connection. Never used before a release.
    async fn exec_acked(
        &self,
        op: &str,
        key: &str,
        call: Call<'_>,
        ack: &ReplicaAck,
        wrote: impl Fn(&Value) -> bool,
        acquire: Option<(&LockToken, Duration)>,
    ) -> Result<(Value, Option<Replication>)> {
        let budget = self.call_budget();
        let wait = redis::cmd("WAIT")
            .arg(ack.replicas)
            .arg(ttl_millis(ack.timeout))
            .to_owned();
        let wait_budget = ack.timeout + self.response_timeout;
        let acknowledged = match &self.dedicated {
            None => {
                let value = self.exec_tracked(op, key, Access::Write, call, acquire).await?;
                return Ok((value, None));
            }
            Some(Dedicated::Standalone(pool)) => {
                let mut conn =
                    match tokio::time::timeout(self.connect_timeout + self.response_timeout, pool.get()).await {
                        Ok(r) => r.map_err(pool_error)?,
                        Err(_) => return Err(pool_error("no dedicated connection within the connect timeout")),
                    };
                if let Some((token, ttl)) = acquire {
                    // A clone keeps the connection open after the pool's copy is closed.
                    self.in_flight.start(token, Conn::Single((*conn).clone()), ttl);
                }
                let reply = tokio::time::timeout(budget, call.run(&mut conn)).await;
                if let (Some((token, _)), Ok(r)) = (acquire, &reply)
                    && answered(r)
                {
                    self.in_flight.settled(token);
                }
                let value = match reply {
                    Ok(Ok(v)) => v,
                    Ok(Err(e)) => {
                        if e.code().is_none() {
                            drop(deadpool_redis::Connection::take(conn));
                        }
                        return Err(command_error(e, op, key, Access::Write));
                    }
                    Err(_) => {
                        drop(deadpool_redis::Connection::take(conn));
                        return Err(op_timeout(op, key, budget, Access::Write));
                    }
                };
                if !wrote(&value) {
                    return Ok((value, None));
                }
                let acked = match tokio::time::timeout(wait_budget, wait.query_async::<i64>(&mut conn)).await {
                    Ok(Ok(n)) => n,
                    other => {
                        tracing::debug!(key, ok = other.is_ok(), "WAIT failed; counting no acknowledgement");
                        drop(deadpool_redis::Connection::take(conn));
                        0
                    }
                };
                (value, acked)
            }
            Some(Dedicated::Cluster(pool)) => {
                let mut conn =
                    match tokio::time::timeout(self.connect_timeout * 2 + self.response_timeout, pool.get()).await {
                        Ok(r) => r.map_err(pool_error)?,
                        Err(_) => return Err(pool_error("no dedicated cluster connection within the connect timeout")),
                    };
                if let Some((token, ttl)) = acquire {
                    self.in_flight.start(token, Conn::Cluster((*conn).clone()), ttl);
                }
                // Write and WAIT in one pipeline to one node: WAIT then runs on
                // the connection that made the write, even after a redirect
                // or a reconnect (alone, it could land on a connection that
                // wrote nothing and confirm at once).
                let both = budget + wait_budget;
                let reply = tokio::time::timeout(both, cluster_write_then_wait(&mut conn, &call, &wait, key)).await;
                if let (Some((token, _)), Ok(r)) = (acquire, &reply)
                    && answered(r)
                {
                    self.in_flight.settled(token);
                }
                let (value, waited) = match reply {
                    Ok(Ok(v)) => v,
                    Ok(Err(e)) => {
                        if e.code().is_none() {
                            drop(deadpool_redis::cluster::Connection::take(conn));
                        }
                        return Err(command_error(e, op, key, Access::Write));
                    }
                    Err(_) => {
                        drop(deadpool_redis::cluster::Connection::take(conn));
                        return Err(op_timeout(op, key, both, Access::Write));
                    }
                };
                if !wrote(&value) {
                    return Ok((value, None));
                }
                let acked = match waited {
                    Value::Int(n) => n,
                    other => {
                        tracing::debug!(key, reply = ?other, "WAIT failed; counting no acknowledgement");
                        0
                    }
                };
                (value, acked)
            }
        };
        let (value, acked) = acknowledged;
        let acked = u32::try_from(acked.max(0)).unwrap_or(u32::MAX);
        let replication = if acked >= ack.replicas {
            Replication::Confirmed { replicas: acked }
        } else {
            Replication::Unconfirmed {
                acknowledged: acked,
                requested: ack.replicas,
            }
        };
        Ok((value, Some(replication)))
    }

    /// Runs a versioned write, with WAIT if configured; a shortfall fails
    /// (outcome unknown: the write is on the primary only) or warns.
    async fn versioned_write(&self, op: &str, key: &str, call: Call<'_>, wrote: fn(&Value) -> bool) -> Result<Value> {
        let Some(ack) = &self.replica_ack else {
            return self.exec(op, key, Access::Write, call).await;
        };
        let (value, replication) = self.exec_acked(op, key, call, ack, wrote, None).await?;
        if let Some(Replication::Unconfirmed {
            acknowledged,
            requested,
        }) = replication
        {
            let message = format!(
                "{op} on {key:?} was written, but only {acknowledged} of {requested} replicas acknowledged it within \
                 {:?}: a failover could lose it",
                ack.timeout
            );
            match ack.on_shortfall {
                OnShortfall::MarkUnconfirmed => tracing::warn!(key, "{message}"),
                _ => return Err(Error::outcome_unknown(BACKEND, message)),
            }
        }
        Ok(value)
    }

    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        check_key(key)?;
        let hex = token.hex_bytes();
        let marker = self.notifier.as_ref().map(|_| keys::helper(key, Helper::Waiting));
        let tombstone = self.tombstone(key, Helper::Released);
        let id = tombstone.as_ref().map(|_| self.write_ids.next());
        let mut ms = [0u8; 20];
        let ms = decimal(ttl_millis(self.resend_window()), &mut ms);
        let (script, keys, args): (&LuaScript, &[&str], &[&[u8]]) = match (&marker, &tombstone, &id) {
            (Some(marker), _, _) => (&self.scripts.release_notify, &[key, marker.as_str()], &[&hex]),
            (None, Some(tombstone), Some(id)) => (
                &self.scripts.release_resendable,
                &[key, tombstone.as_str()],
                &[&hex, id.as_bytes(), ms],
            ),
            _ => (&self.scripts.release, &[key], &[&hex]),
        };
        let call = Call::Script { script, keys, args };
        let reply = match self.in_flight.take(token) {
            Some(conn) => self.release_after_acquire(key, conn, call).await?,
            None => self.exec("release", key, Access::Write, call).await?,
        };
        match reply {
            Value::Int(1) => Ok(ReleaseOutcome::Released),
            Value::Int(0) => Ok(ReleaseOutcome::Missing),
            Value::Int(2) => Ok(ReleaseOutcome::HeldByOther),
            other => Err(unexpected_reply("release", key, &other)),
        }
    }

    /// In a cluster, `key`'s tombstone of kind `helper`, which lets a
    /// re-sent release or delete recognise itself (see
    /// `scripts::RELEASE_RESENDABLE`); `None` on one server (nothing
    /// re-sends) or when it cannot share `key`'s slot.
    fn tombstone(&self, key: &str, helper: Helper) -> Option<String> {
        if !self.cluster {
            return None;
        }
        let tombstone = keys::helper(key, helper);
        keys::same_slot(key, &tombstone).then_some(tombstone)
    }

    /// How long a tombstone outlives its call: past our own bound on the
    /// call, a re-send's answer is never read.
    fn resend_window(&self) -> Duration {
        ((self.connect_timeout + self.call_budget()) * 2).max(Duration::from_secs(1))
    }

    /// The clean-up release of an acquire that got no reply, on the
    /// acquire's own connection, so that the server runs it after the
    /// acquire. Sent as EVAL: a queued EVALSHA answered NOSCRIPT after our
    /// timeout would never be re-sent. If that connection is broken (not
    /// merely slow), the server will run nothing more from it: the shared
    /// connection is as good.
    async fn release_after_acquire(&self, key: &str, mut conn: Conn, call: Call<'_>) -> Result<Value> {
        let Call::Script { script, keys, args } = call else {
            return self.exec("release", key, Access::Write, call).await;
        };
        let budget = self.call_budget();
        match tokio::time::timeout(budget, script.cmd(true, keys, args).query_async::<Value>(&mut conn)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) if e.code().is_none() && (e.is_connection_dropped() || e.is_unrecoverable_error()) => {
                self.exec("release", key, Access::Write, call).await
            }
            Ok(Err(e)) => Err(command_error(e, "release", key, Access::Write)),
            Err(_) => Err(op_timeout("release", key, budget, Access::Write)),
        }
    }

    /// Leaves `key`'s waiter marker for `max_wait` so that its release
    /// publishes; false when the lock is already free (no point waiting).
    /// A failure only costs the waiter its timer.
    async fn mark_waiting(&self, key: &str, max_wait: Duration) -> bool {
        let marker = keys::helper(key, Helper::Waiting);
        let mut ms = [0u8; 20];
        // The margin covers the round trips between the waiter and the server.
        let ms = decimal(ttl_millis(max_wait).saturating_add(WAITING_MARGIN_MS), &mut ms);
        let call = Call::Script {
            script: &self.scripts.mark_waiting,
            keys: &[key, &marker],
            args: &[ms],
        };
        match self.exec("wait for release", key, Access::Write, call).await {
            Ok(Value::Int(0)) => false,
            Ok(_) => true,
            Err(e) => {
                tracing::debug!(error = %e, "no waiter marker; waiting on the timer");
                true
            }
        }
    }

    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        check_key(key)?;
        validate_ttl(ttl)?;
        let hex = token.hex_bytes();
        let mut ms = [0u8; 20];
        let call = Call::Script {
            script: &self.scripts.renew,
            keys: &[key],
            args: &[&hex, decimal(ttl_millis(ttl), &mut ms)],
        };
        let (value, replication) = match &self.replica_ack {
            Some(ack) => {
                self.exec_acked("renew", key, call, ack, |v| *v == Value::Int(1), None)
                    .await?
            }
            None => (self.exec("renew", key, Access::Write, call).await?, None),
        };
        let outcome = match value {
            Value::Int(1) => RenewOutcome::Renewed,
            Value::Int(0) => RenewOutcome::Missing,
            Value::Int(2) => RenewOutcome::HeldByOther,
            other => return Err(unexpected_reply("renew", key, &other)),
        };
        match (outcome, self.renewal_shortfall(key, replication)) {
            (RenewOutcome::Renewed, Some(e)) => Err(e),
            _ => Ok(outcome),
        }
    }

    /// A renewal that too few replicas acknowledged: an error (outcome
    /// unknown: it is on the primary only), so the guard's deadline stays
    /// where the last confirmed grant or renewal put it. Whatever
    /// [`OnShortfall`] says: a failover would bring back the older expiry.
    fn renewal_shortfall(&self, key: &str, replication: Option<Replication>) -> Option<Error> {
        let (
            Some(ack),
            Some(Replication::Unconfirmed {
                acknowledged,
                requested,
            }),
        ) = (&self.replica_ack, replication)
        else {
            return None;
        };
        Some(Error::outcome_unknown(
            BACKEND,
            format!(
                "renewed {key:?} on the primary, but only {acknowledged} of {requested} replicas acknowledged within \
                 {:?}: not counted as renewed (a failover would bring back the older expiry)",
                ack.timeout
            ),
        ))
    }

    /// Renews `items` with one renew-many script call per chunk of at most
    /// [`RENEW_MANY_CHUNK`] keys (per hash slot in a cluster, since one
    /// script's keys must share a slot), the calls sent concurrently.
    async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        let cluster = self.cluster;
        let batch = RenewBatch::new(items, ttl, RENEW_MANY_CHUNK, |key| cluster.then(|| keys::slot(key)));
        let mut ms = [0u8; 20];
        let ms = decimal(ttl_millis(ttl), &mut ms);
        let calls = batch.chunks().iter().map(|chunk| self.renew_chunk(items, chunk, ms));
        let outcomes = futures::future::join_all(calls).await;
        batch.finish(items, outcomes, BACKEND)
    }

    /// One renew-many script call for the `items` at the indices `chunk`
    /// (one hash slot): one result per index, in order. A failed call fails
    /// each item as a single renew would have failed.
    async fn renew_chunk(
        &self,
        items: &[(&str, &LockToken)],
        chunk: &[usize],
        ttl_ms: &[u8],
    ) -> Vec<Result<RenewOutcome>> {
        if chunk.iter().any(|&i| keys::check_user_key(items[i].0).is_err()) {
            // Rare: answer the reserved keys, send the others.
            let (refused, sent): (Vec<usize>, Vec<usize>) =
                chunk.iter().partition(|&&i| keys::check_user_key(items[i].0).is_err());
            let mut answers: Vec<Option<Result<RenewOutcome>>> = Vec::with_capacity(chunk.len());
            answers.resize_with(chunk.len(), || None);
            let mut sent_outcomes = Box::pin(self.renew_chunk(items, &sent, ttl_ms)).await.into_iter();
            for (slot, &i) in answers.iter_mut().zip(chunk) {
                *slot = Some(if refused.contains(&i) {
                    keys::check_user_key(items[i].0).map(|()| RenewOutcome::Missing)
                } else {
                    sent_outcomes
                        .next()
                        .unwrap_or_else(|| Err(Error::outcome_unknown(BACKEND, "renew: no reply")))
                });
            }
            return answers.into_iter().flatten().collect();
        }
        if chunk.is_empty() {
            return Vec::new();
        }
        let keys: Vec<&str> = chunk.iter().map(|&i| items[i].0).collect();
        let tokens: Vec<[u8; 32]> = chunk.iter().map(|&i| items[i].1.hex_bytes()).collect();
        let mut args: Vec<&[u8]> = Vec::with_capacity(1 + tokens.len());
        args.push(ttl_ms);
        args.extend(tokens.iter().map(|t| &t[..]));
        let call = Call::Script {
            script: &self.scripts.renew_many,
            keys: &keys,
            args: &args,
        };
        let op = format!("renew of {} keys from", keys.len());
        let first = keys.first().copied().unwrap_or_default();
        // With replica acknowledgement: one WAIT per call, after it.
        let sent = match &self.replica_ack {
            Some(ack) => {
                let renewed_any = |v: &Value| array(v).is_some_and(|codes| codes.contains(&Value::Int(1)));
                self.exec_acked(&op, first, call, ack, renewed_any, None).await
            }
            None => self.exec(&op, first, Access::Write, call).await.map(|v| (v, None)),
        };
        match sent {
            Ok((Value::Array(codes), replication)) if codes.len() == keys.len() => codes
                .iter()
                .zip(&keys)
                .map(|(code, key)| match code {
                    Value::Int(1) => match self.renewal_shortfall(key, replication) {
                        Some(e) => Err(e),
                        None => Ok(RenewOutcome::Renewed),
                    },
                    Value::Int(0) => Ok(RenewOutcome::Missing),
                    Value::Int(2) => Ok(RenewOutcome::HeldByOther),
                    other => Err(unexpected_reply("renew", key, other)),
                })
                .collect(),
            Ok((other, _)) => keys
                .iter()
                .map(|key| Err(unexpected_reply("renew", key, &other)))
                .collect(),
            Err(e) => {
                let mut failed: Vec<Result<RenewOutcome>> = Vec::with_capacity(keys.len());
                failed.extend(keys.iter().skip(1).map(|_| Err(same_error(&e))));
                failed.insert(0, Err(e));
                failed
            }
        }
    }

    /// `SET key token NX PX ttl GET`: `None` when the script must decide
    /// (our own token found, or the server refuses the command).
    async fn acquire_native(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<Option<AcquireOutcome>> {
        let hex = token.hex_bytes();
        let mut ms = [0u8; 20];
        let ms = decimal(ttl_millis(ttl), &mut ms);
        let mut cmd = Cmd::with_capacity(7, 3 + key.len() + hex.len() + 2 + 2 + ms.len() + 3);
        cmd.arg("SET").arg(key).arg(&hex).arg("NX").arg("PX").arg(ms).arg("GET");
        let call = Call::Command(cmd);
        let sent = match &self.replica_ack {
            Some(ack) => {
                self.exec_acked("acquire", key, call, ack, |v| *v == Value::Nil, Some((token, ttl)))
                    .await
            }
            None => self
                .exec_tracked("acquire", key, Access::Write, call, Some((token, ttl)))
                .await
                .map(|v| (v, None)),
        };
        let (value, replication) = match sent {
            Ok(sent) => sent,
            Err(Error::Backend { source: Some(e), .. }) if redis_error(&e).is_some_and(refuses_set_nx_get) => {
                tracing::warn!("the server refuses SET NX GET (older than Redis 7.0?); acquiring with the script");
                self.native_acquire.store(false, Ordering::Relaxed);
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        match value {
            Value::Nil => self.granted(key, token, None, replication).await.map(Some),
            Value::BulkString(held) if held == hex => Ok(None),
            Value::BulkString(_) => Ok(Some(AcquireOutcome::Held { retry_after: None })),
            other => Err(unexpected_reply("acquire", key, &other)),
        }
    }

    /// The acquire script (servers before 7.0, fencing, our own token found).
    async fn acquire_script(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        let fence_key = self.fencing.then(|| keys::helper(key, Helper::Fence));
        if let Some(fence) = &fence_key
            && self.cluster
            && !keys::same_slot(key, fence)
        {
            return Err(Error::invalid(format!(
                "key {key:?} contains '}}' but no hash tag, so its fence key cannot share its cluster slot; \
                 give it a hash tag, e.g. {{tag}}:rest"
            )));
        }
        let hex = token.hex_bytes();
        let mut ms = [0u8; 20];
        let args: [&[u8]; 2] = [&hex, decimal(ttl_millis(ttl), &mut ms)];
        let (script, keys): (&LuaScript, &[&str]) = match &fence_key {
            Some(f) => (&self.scripts.acquire_fenced, &[key, f.as_str()]),
            None => (&self.scripts.acquire, &[key]),
        };
        let call = Call::Script {
            script,
            keys,
            args: &args,
        };
        let acquired = |v: &Value| status(v) == Some(1);
        let (value, replication) = match &self.replica_ack {
            Some(ack) => {
                self.exec_acked("acquire", key, call, ack, acquired, Some((token, ttl)))
                    .await?
            }
            None => (
                self.exec_tracked("acquire", key, Access::Write, call, Some((token, ttl)))
                    .await?,
                None,
            ),
        };
        let items = array(&value).ok_or_else(|| unexpected_reply("acquire", key, &value))?;
        match int_at(items, 0) {
            Some(1) => {
                let fencing_token = if self.fencing {
                    Some(FencingToken(
                        u64_at(items, 1).ok_or_else(|| unexpected_reply("acquire", key, &value))?,
                    ))
                } else {
                    None
                };
                self.granted(key, token, fencing_token, replication).await
            }
            Some(0) => {
                let retry_after = int_at(items, 1)
                    .and_then(|ms| u64::try_from(ms).ok())
                    .map(Duration::from_millis);
                Ok(AcquireOutcome::Held { retry_after })
            }
            _ => Err(unexpected_reply("acquire", key, &value)),
        }
    }

    /// A granted acquire: the lease, unless too few replicas acknowledged it
    /// and the options say to release and fail.
    async fn granted(
        &self,
        key: &str,
        token: &LockToken,
        fencing_token: Option<FencingToken>,
        replication: Option<Replication>,
    ) -> Result<AcquireOutcome> {
        if let (
            Some(ack),
            Some(Replication::Unconfirmed {
                acknowledged,
                requested,
            }),
        ) = (&self.replica_ack, replication)
            && ack.on_shortfall == OnShortfall::ReleaseAndFail
        {
            let released = self.release(key, token).await;
            let message = format!(
                "acquired {key:?} but only {acknowledged} of {requested} replicas acknowledged within {:?}; {}",
                ack.timeout,
                match &released {
                    Ok(_) => "released it".to_owned(),
                    Err(e) => format!("releasing it failed ({e})"),
                }
            );
            // If our release failed, the manager releases the token.
            return Err(match released {
                Ok(_) => Error::backend(BACKEND, message),
                Err(_) => Error::outcome_unknown(BACKEND, message),
            });
        }
        Ok(AcquireOutcome::Acquired(
            Lease::new()
                .with_fencing_token(fencing_token)
                .with_replication(replication.unwrap_or_default()),
        ))
    }
}

/// Sends `call` and `wait` as one pipeline to the master of `key`'s slot,
/// following one ASK or MOVED redirect of the write (to the node that will
/// make it, with `ASKING` for ASK), and re-sending as EVAL after NOSCRIPT.
/// The write's reply (an error reply as `Err`) and WAIT's reply.
async fn cluster_write_then_wait(
    conn: &mut deadpool_redis::redis::cluster_async::ClusterConnection,
    call: &Call<'_>,
    wait: &Cmd,
    key: &str,
) -> redis::RedisResult<(Value, Value)> {
    let mut route = SingleNodeRoutingInfo::SpecificNode(Route::with_slot(keys::slot(key), SlotAddr::Master));
    let mut asking = false;
    let mut eval = false;
    for _ in 0..3 {
        let mut pipe = redis::pipe();
        if asking {
            pipe.add_command(redis::cmd("ASKING"));
        }
        pipe.add_command(match call {
            Call::Script { script, keys, args } => script.cmd(eval, keys, args),
            Call::Command(cmd) => cmd.clone(),
        });
        pipe.add_command(wait.clone());
        let count = if asking { 3 } else { 2 };
        let mut values = conn.route_pipeline(pipe, 0, count, route.clone()).await?;
        let (Some(waited), Some(written)) = (values.pop(), values.pop()) else {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "write + WAIT pipeline",
                "short reply".to_owned(),
            )));
        };
        match written.extract_error() {
            Ok(value) => return Ok((value, waited)),
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) && !eval => eval = true,
            Err(e) => {
                let Some((addr, _)) = e.redirect_node() else {
                    return Err(e);
                };
                let Some((host, port)) = addr.rsplit_once(':').and_then(|(h, p)| Some((h, p.parse().ok()?))) else {
                    return Err(e);
                };
                asking = e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::Ask);
                route = SingleNodeRoutingInfo::ByAddress {
                    host: host.to_owned(),
                    port,
                };
            }
        }
    }
    Err(redis::RedisError::from((
        redis::ErrorKind::Client,
        "write + WAIT pipeline",
        format!("too many redirects for {key:?}"),
    )))
}

/// A call's result says whether the server answered (a value or an error
/// reply): then the command's outcome is known.
fn answered<T>(r: &redis::RedisResult<T>) -> bool {
    match r {
        Ok(_) => true,
        Err(e) => e.code().is_some(),
    }
}

/// Most keys in one renew-many script call: bounds how long one script
/// holds the server (other clients wait behind it) and the command's size.
const RENEW_MANY_CHUNK: usize = 128;

/// How much longer than its wait a waiter's marker lives.
const WAITING_MARGIN_MS: u64 = 100;

/// `n` in decimal, written into `buf`, without allocating.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut start = buf.len();
    loop {
        start -= 1;
        // n % 10 < 10: the cast cannot truncate.
        buf[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[start..];
        }
    }
}

/// A usable user key: not empty, and not inside [`RESERVED_KEY_PREFIX`].
fn check_key(key: &str) -> Result<()> {
    validate_key(key)?;
    keys::check_user_key(key)
}

/// The client error inside a backend error, if any.
fn redis_error(source: &lock_core::BoxError) -> Option<&redis::RedisError> {
    source.downcast_ref::<redis::RedisError>()
}

/// A server that does not know `NX` with `GET` (before 7.0) answers this.
fn refuses_set_nx_get(e: &redis::RedisError) -> bool {
    e.code() == Some("ERR") && e.to_string().contains("syntax error")
}

/// The lowest `(major, minor)` server version in a `HELLO` reply (a map, or
/// a flat list of fields and values in RESP2; one per node from a cluster).
fn server_version(reply: &Value) -> Option<(u32, u32)> {
    fn text(v: &Value) -> Option<&str> {
        match v {
            Value::BulkString(b) => std::str::from_utf8(b).ok(),
            Value::SimpleString(s) => Some(s),
            _ => None,
        }
    }
    fn parse(v: &Value) -> Option<(u32, u32)> {
        let mut parts = text(v)?.split('.');
        Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
    }
    let mut lowest: Option<(u32, u32)> = None;
    let mut found = |v: Option<(u32, u32)>| {
        if let Some(v) = v {
            lowest = Some(lowest.map_or(v, |l| l.min(v)));
        }
    };
    match reply {
        Value::Map(fields) => {
            for (name, value) in fields {
                match text(name) {
                    Some("version") => found(parse(value)),
                    // A cluster's replies, keyed by node.
                    _ => found(server_version(value)),
                }
            }
        }
        Value::Array(items) => {
            for pair in items.chunks_exact(2) {
                if text(&pair[0]) == Some("version") {
                    found(parse(&pair[1]));
                }
            }
            for item in items {
                if matches!(item, Value::Map(_) | Value::Array(_)) {
                    found(server_version(item));
                }
            }
        }
        _ => {}
    }
    lowest
}

fn int_at(items: &[Value], i: usize) -> Option<i64> {
    match items.get(i)? {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

fn u64_at(items: &[Value], i: usize) -> Option<u64> {
    int_at(items, i).and_then(|n| u64::try_from(n).ok())
}

fn bytes_of(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.as_bytes().to_vec()),
        Value::Okay => Some(b"OK".to_vec()),
        _ => None,
    }
}

fn array(v: &Value) -> Option<&[Value]> {
    match v {
        Value::Array(items) => Some(items),
        _ => None,
    }
}

/// First element of a script's status array.
fn status(v: &Value) -> Option<i64> {
    array(v).and_then(|a| int_at(a, 0))
}

fn not_versioned(key: &str) -> Error {
    Error::invalid(format!(
        "key {key:?} holds a hash that was not written by verrou's versioned store (no version field)"
    ))
}

fn expiry_arg(expiry: Expiry) -> Result<String> {
    match expiry {
        Expiry::After(ttl) => {
            validate_ttl(ttl)?;
            Ok(ttl_millis(ttl).to_string())
        }
        Expiry::Persist => Ok("-1".to_owned()),
        _ => Ok(String::new()),
    }
}

#[async_trait]
impl LockBackend for RedisLuaBackend {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        check_key(key)?;
        validate_ttl(ttl)?;
        let i = &self.inner;
        if i.native_acquire.load(Ordering::Relaxed)
            && let Some(outcome) = i.acquire_native(key, token, ttl).await?
        {
            return Ok(outcome);
        }
        i.acquire_script(key, token, ttl).await
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

    async fn wait_for_release(&self, key: &str, max_wait: Duration) {
        match &self.inner.notifier {
            Some(n) => n.wait(key, max_wait, self.inner.mark_waiting(key, max_wait)).await,
            None => tokio::time::sleep(max_wait).await,
        }
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new(BACKEND);
        caps.fencing_tokens = self.inner.fencing;
        caps.replica_ack = self.inner.replica_ack.is_some();
        caps.release_notifications = self.inner.notifier.is_some();
        caps
    }
}

#[async_trait]
impl VersionedStore for RedisLuaBackend {
    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        check_key(key)?;
        let cmd = redis::cmd("HMGET").arg(key).arg("v").arg("n").to_owned();
        let value = self.inner.exec("get", key, Access::Read, Call::Command(cmd)).await?;
        let items = array(&value).ok_or_else(|| unexpected_reply("get", key, &value))?;
        match (items.first(), items.get(1)) {
            (Some(Value::Nil), Some(Value::Nil)) => Ok(None),
            (Some(v), Some(n)) => {
                let version = bytes_of(n)
                    .and_then(|b| std::str::from_utf8(&b).ok()?.parse::<u64>().ok())
                    .ok_or_else(|| not_versioned(key))?;
                let value = bytes_of(v).ok_or_else(|| not_versioned(key))?;
                Ok(Some(Versioned { value, version }))
            }
            _ => Err(unexpected_reply("get", key, &value)),
        }
    }

    async fn create(&self, key: &str, value: &[u8], expiry: Expiry) -> Result<CreateOutcome> {
        check_key(key)?;
        let ttl = match expiry_arg(expiry)?.as_str() {
            "-1" => String::new(),
            other => other.to_owned(),
        };
        let id = self.inner.write_ids.next();
        let call = Call::Script {
            script: &self.inner.scripts.create,
            keys: &[key],
            args: &[value, ttl.as_bytes(), id.as_bytes()],
        };
        let reply = self
            .inner
            .versioned_write("create", key, call, |v| status(v) == Some(1))
            .await?;
        let items = array(&reply).ok_or_else(|| unexpected_reply("create", key, &reply))?;
        match int_at(items, 0) {
            Some(1) => Ok(CreateOutcome::Created {
                version: u64_at(items, 1).ok_or_else(|| unexpected_reply("create", key, &reply))?,
            }),
            Some(0) => Ok(CreateOutcome::Exists),
            Some(-1) => Err(not_versioned(key)),
            _ => Err(unexpected_reply("create", key, &reply)),
        }
    }

    async fn compare_and_set(&self, key: &str, expected: u64, value: &[u8], expiry: Expiry) -> Result<CasOutcome> {
        check_key(key)?;
        let expiry = expiry_arg(expiry)?;
        let expected = expected.to_string();
        let id = self.inner.write_ids.next();
        let call = Call::Script {
            script: &self.inner.scripts.compare_and_set,
            keys: &[key],
            args: &[expected.as_bytes(), value, expiry.as_bytes(), id.as_bytes()],
        };
        let reply = self
            .inner
            .versioned_write("compare_and_set", key, call, |v| status(v) == Some(1))
            .await?;
        let items = array(&reply).ok_or_else(|| unexpected_reply("compare_and_set", key, &reply))?;
        let bad = || unexpected_reply("compare_and_set", key, &reply);
        match int_at(items, 0) {
            Some(1) => Ok(CasOutcome::Written {
                version: u64_at(items, 1).ok_or_else(bad)?,
            }),
            Some(0) => Ok(CasOutcome::Conflict(Versioned {
                value: items.get(1).and_then(bytes_of).ok_or_else(bad)?,
                version: u64_at(items, 2).ok_or_else(bad)?,
            })),
            Some(2) => Ok(CasOutcome::Missing),
            Some(-1) => Err(not_versioned(key)),
            _ => Err(bad()),
        }
    }

    async fn delete(&self, key: &str, expected: u64) -> Result<DeleteOutcome> {
        check_key(key)?;
        let expected = expected.to_string();
        let i = &self.inner;
        let tombstone = i.tombstone(key, Helper::Deleted);
        let id = i.write_ids.next();
        let mut ms = [0u8; 20];
        let ms = decimal(ttl_millis(i.resend_window()), &mut ms);
        let call = match &tombstone {
            Some(tombstone) => Call::Script {
                script: &i.scripts.delete_resendable,
                keys: &[key, tombstone.as_str()],
                args: &[expected.as_bytes(), id.as_bytes(), ms],
            },
            None => Call::Script {
                script: &i.scripts.delete,
                keys: &[key],
                args: &[expected.as_bytes()],
            },
        };
        let reply = self
            .inner
            .versioned_write("delete", key, call, |v| status(v) == Some(1))
            .await?;
        let items = array(&reply).ok_or_else(|| unexpected_reply("delete", key, &reply))?;
        match int_at(items, 0) {
            Some(1) => Ok(DeleteOutcome::Deleted),
            Some(0) => Ok(DeleteOutcome::Conflict {
                current_version: u64_at(items, 1).ok_or_else(|| unexpected_reply("delete", key, &reply))?,
            }),
            Some(2) => Ok(DeleteOutcome::Missing),
            Some(-1) => Err(not_versioned(key)),
            _ => Err(unexpected_reply("delete", key, &reply)),
        }
    }

    fn store_name(&self) -> &str {
        BACKEND
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn tokens_and_numbers_are_written_as_before() {
        let token = LockToken::generate().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&token.hex_bytes()[..], token.to_hex().as_bytes());
        let mut buf = [0u8; 20];
        for n in [0, 7, 10, 30_000, u64::MAX] {
            assert_eq!(decimal(n, &mut buf), n.to_string().as_bytes());
        }
    }

    #[test]
    fn hello_replies_give_the_lowest_version() {
        let resp3 = Value::Map(vec![(bulk("server"), bulk("redis")), (bulk("version"), bulk("7.0.15"))]);
        assert_eq!(server_version(&resp3), Some((7, 0)));
        let resp2 = Value::Array(vec![bulk("server"), bulk("valkey"), bulk("version"), bulk("8.1.0")]);
        assert_eq!(server_version(&resp2), Some((8, 1)));
        let cluster = Value::Map(vec![
            (bulk("a:1"), resp3.clone()),
            (bulk("b:2"), Value::Map(vec![(bulk("version"), bulk("6.2.14"))])),
        ]);
        assert_eq!(server_version(&cluster), Some((6, 2)));
        assert_eq!(server_version(&Value::Okay), None);
    }
}
