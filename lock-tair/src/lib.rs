//! Tair backend of verrou: locks on Tair's native `CAD` / `CAS`, and a
//! versioned store on exString (`EXGET` / `EXSET` / `EXCAS` / `EXCAD`), over
//! [fred](https://docs.rs/fred), on one server or Redis Cluster.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let server = lock_testkit::server::RedisServer::builder().tair_module().start().await?;
//! # let url = server.url(); // a redis-server with the TairString-compatible module
//! use lock_core::LockManager;
//! use lock_tair::TairBackend;
//!
//! // `url`: "tair://[user:pass@]host[:port][/db]" or "redis://…"
//! let backend = TairBackend::connect(&format!("{url}?fencing=true")).await?;
//! let locks = LockManager::new(backend)?;
//! let guard = locks.lock("invoice:42").await?;
//! let token = guard.fencing_token(); // hand it to the resource you write
//! assert!(token.is_some());
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! One [`TairBackend`] implements both [`LockBackend`] and
//! [`VersionedStore`](lock_core::VersionedStore). Every operation is one round trip, a native command,
//! unless a waiter marked the key (on a single server, see *Release
//! notifications*): then the holder's release and renewal take a second one.
//!
//! | operation | command | replies |
//! |---|---|---|
//! | acquire | `SET key token NX PX ttl` | `OK` / nil |
//! | release | `CAD key token`; on a single server, when it answers 0 (a waiter may have marked the value), the release script (token with or without the mark; wakes a waiter) | 1 released, 0 held by another, -1 missing |
//! | renew | `CAS key token token PX ttl`; on a single server, when it answers 0, the same with the marked token | 1 renewed, 0 held by another, -1 missing |
//! | renew many (the manager's batched renewals) | one script running that `CAS` (and the marked one on a 0) per key, per ≤ 128 keys (per hash slot in a cluster), sent concurrently | one code per key, as renew |
//! | get | `EXGET key` | `[value, version]` / nil |
//! | create | `EXSET key value [PX ms \| KEEPTTL] NX ABS <random> WITHVERSION` | version / nil |
//! | compare-and-set | `EXCAS key value version [PX ms \| KEEPTTL]` | `[OK, "", version]` / `[CAS_FAILED, value, version]` / -1 |
//! | delete | `EXCAD key version` | 1 / 0 / -1 (0 costs one `EXGET` more, for the current version) |
//!
//! Tokens are stored as [`LockToken::to_hex`]. No Lua runs on the
//! single-key paths; [fencing tokens](TairBuilder::fencing) are opt-in and
//! make acquire one small script (still one round trip), and batched renewals
//! run one small script per chunk of keys, so that thousands of auto-renewed
//! locks cost a few commands per renewal round instead of one each.
//!
//! # Release notifications
//!
//! On a single server (not a cluster), unless
//! [`TairBuilder::release_notifications`] turns them off, a waiter
//! subscribes on a pub/sub connection of its backend (one channel per
//! backend, `verrou:wake:<id>`, opened by the first wait), then joins the
//! key's wake set (`verrou:tair:wake:<key>`: its id and the end of its wait),
//! leaves a marker (`verrou:tair:waiting:<key>`) and *marks the lock key*:
//! appends `lock_redis_family::wake::WAITER_MARK` (`~w`, which no hex token
//! contains) to its value, its TTL kept (`SET … KEEPTTL`), all only while
//! the lock key exists (one script). Waiters pay for the wake-up, not
//! holders: a release is the native `CAD` alone, as with notifications off,
//! until a waiter marked the key; then the `CAD` answers 0 and only then
//! does the holder run the release script (one more round trip), which
//! takes the token with or without the mark, deletes the key and the marker
//! and, when the marker was there, hands the key off: if the
//! waiter whose acquire started waiting first has waited
//! `lock_redis_family::wake::STARVING_MS`, the key (if still free) is set to a
//! short reservation naming it (`verrou:reserved:<waiter id>`, which no
//! token matches and only its process's acquire takes) and its id is
//! `PUBLISH`ed, so one waiter wakes per release, not the herd; a waiter
//! that has not waited that long is not woken, and the releaser may take
//! the key right back (starvation-bounded barging: a hot key mostly stays
//! with its holder). A holder that waited for the key itself releases
//! through the script at once (its own registration leaves the wake set),
//! which keeps a hand-off chain going; a release that leaves waiters
//! registered makes its backend's next acquire of the key write the token
//! already marked (`SET NX` of the marked token), until a release leaves
//! none, so a holder that takes the key right back still wakes them. A woken waiter claims the
//! reservation with one script; a waiter not woken looks once after
//! `RECHECK_MS` whether the key is free, and marks the value of a holder
//! that took the key since it registered (a newcomer's `SET NX` writes the
//! bare token). A waiter that registers after the `CAD` finds the key gone
//! (or held by a newer holder, whose value it marks) and does not sleep on
//! this release, so no wake-up is lost. A key that changes hands more than
//! once between a waiter's registration and its look leaves it on its
//! timer; a lost message costs the waiter its timer, never correctness.
//!
//! Every path that compares a lock value takes the marked form as its
//! holder's: renew retries `CAS` with the marked token when the bare one
//! misses (`CAS` rewrites the value, so the mark stays), batched renewals
//! do the same in their script, the multi-key lock's and the fair queue's
//! scripts accept it, and a backend with notifications off (or whose server
//! refuses the scripts: then `CAD` of the marked token, without a wake-up)
//! releases a key another backend's waiter marked. A stale holder's token
//! matches neither form. On a cluster nobody marks: `CAD` and `CAS` answer
//! alone. An ACL user without channel rights (`NOPERM`) turns the
//! notifications off with one warning and its pub/sub connection closed; a
//! server that refuses the scripts leaves waiters on their timers. A
//! multi-key lock's release (one script over its keys) does not wake: mutex
//! waiters of its keys use their look after `RECHECK_MS` and their timers.
//!
//! Fair mode ([`lock_core::Fairness::Fifo`], `LockOptions::fair`) runs on one
//! server as on the Lua backend: waiters queue in `verrou:tair:queue:<key>`
//! (waiter id → ticket) with a server-time claim deadline each in
//! `verrou:tair:queued:<key>`; the acquire script grants a free key only to
//! the head of the live waiters (writing the token marked while the marker
//! says waiters remain) and a waiter that queues behind a holder marks its
//! value, so the release script runs and wakes the head; a
//! waiter that gives up leaves and wakes the next. Without release
//! notifications waiters poll every third of their claim. On a cluster or
//! with replica acknowledgement fair locking is refused with
//! [`Error::Unsupported`].
//!
//! # TTL safety
//!
//! Tair's `CAS`, `EXSET` and `EXCAS` *remove* a key's TTL unless the command
//! carries a TTL option, and `CAS … KEEPTTL` drops it as well. So renew always
//! sends `PX ttl`, and every versioned write sends what the caller's
//! [`Expiry`](lock_core::Expiry) asks: `Keep` → `KEEPTTL`, `Persist` → no option (the TTL is
//! removed, on purpose), `After(d)` → `PX ms`. A TTL is never dropped by
//! accident. A waiter's mark is written with the server's own `SET …
//! KEEPTTL` (Redis 6.0 and later), which keeps it.
//!
//! # ABA
//!
//! Tair restarts a key's version at 1 after a delete or expiry, so a version
//! read before the delete could match the recreated key. [`VersionedStore::create`](lock_core::VersionedStore::create)
//! therefore creates every key at a random version drawn from the OS CSPRNG
//! in `[2^32, 2^62)` (`EXSET … ABS v`), leaving 2^62 increments of headroom;
//! a stale version matches a recreated key only if the two version ranges
//! overlap (about `2n / 2^62` for `n` writes per incarnation). Locks need no
//! such care: their 128-bit tokens are never reused.
//!
//! # Failures
//!
//! fred is set up with a reconnect policy, a timeout on every command, and a
//! single attempt per command: a write is never silently re-sent after a
//! reconnect. While the client is reconnecting, a command waits for the
//! next connection attempt (at most its timeout) instead of queueing behind
//! it: a dead server's refusal comes back at that attempt as a definite
//! [`Error::Backend`] (nothing was sent). A write that fails in transport
//! (timeout, connection lost) is
//! [`Error::Backend`] with `outcome_unknown: true`, and so is any error of
//! a write script (fenced acquire, batched renewals): Redis does not roll a
//! script back, so it may have written before failing. A server without the
//! TairString commands is refused at connect with [`Error::Unsupported`].
//! A key of the wrong type (e.g. a versioned exString key used as a lock, or
//! the reverse): versioned operations fail with [`Error::InvalidArgument`];
//! lock release and renew answer `HeldByOther` (the key is not ours) and log
//! a warning; acquire sees the key as held.
//!
//! # Replica acknowledgement
//!
//! [`ReplicaAck`] adds `WAIT` after acquires, renewals (one `WAIT` per
//! batch) and versioned writes, and after every other lock kind's grants and
//! renewals (semaphore, read-write, multi-key, election), on a dedicated
//! connection; see there. A
//! renewal counts only once confirmed: whatever [`OnShortfall`] says (it
//! governs acquires and versioned writes), a shortfall makes it an
//! outcome-unknown error, so the manager does not
//! move the lease's deadline past what a promoted replica knows. A `WAIT`
//! on a connection that reconnected since the write counts as no
//! acknowledgement (it would have no write offset to wait for). On a
//! cluster, `WAIT` goes to the slot's owner: a write that fred sent to
//! another node after an `ASK` redirect (a slot being migrated) is not what
//! it waits for, so such a confirmation can be false. An acquire
//! that ends without the server's answer has its clean-up release sent on
//! the same connection, after it: a `SET NX` still queued behind another
//! caller's `WAIT` can no longer run after its own clean-up.
//!
//! Tair's semi-synchronous replication is the server-side alternative, with
//! the same limit as `WAIT`: when the replica does not answer within its
//! timeout, Tair degrades to asynchronous replication, and a failover then
//! can lose the latest grants and renewals.
//!
//! # Fencing tokens across failover
//!
//! See [`TairBuilder::fencing`]: the fence is `max(counter + 1, server time
//! in µs)`, so a lost counter (eviction, restart without data, failover)
//! does not restart the tokens; across a failover they stay increasing
//! only while the new primary's clock is not behind the old one's.
//!
//! # Servers and tests
//!
//! Any server with TairString's commands works: Tair itself, or Redis /
//! Valkey with a TairString-compatible module loaded (Alibaba's open-source
//! `TairString`, or this workspace's `tair-module`). The tests start real
//! `redis-server` processes with the module from `$VERROU_TAIR_MODULE`, else
//! `target/release/libtair_module.so` (`cargo build --release -p
//! tair-module`); point `VERROU_TAIR_MODULE` at another TairString-compatible
//! module to run the same suite against it.
//!
//! # Guarantees
//!
//! On one server: mutual exclusion while each holder stays inside its local
//! deadline, as on the Lua backend. With asynchronous replication a failover
//! can lose a lock granted just before it; [`ReplicaAck`] (`WAIT` after
//! grants and renewals) narrows that window, and Tair's semi-synchronous
//! replication narrows it server-side but degrades to asynchronous when the
//! replica does not answer in time. SAFETY.md measures both.
//!
//! # URL
//!
//! `verrou::connect` builds this backend from `tair://[user:pass@]host[:port][/db]`,
//! `tairs://…` (TLS, feature `tls`), `tair+cluster://h1[:p1],h2[:p2]…` and
//! `tairs+cluster://…`, with the same query parameters as the Lua backend's
//! URLs: `connect_timeout`, `response_timeout`, `fencing`,
//! `release_notifications`, `replica_ack` with `replica_ack_timeout`,
//! `ack_connections`, `db`, `tls_ca`.
//!
//! # Features
//!
//! - `tls`: `tairs://` URLs through rustls ([`TairBuilder::tls_root_certs`]
//!   for a private CA); facade feature `tair-tls`.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acquire;
mod builder;
mod config;
mod conn;
mod contended;
mod fair;
mod inspect;
mod keys;
mod kinds;
mod notify;
mod renew;
mod replica_ack;
mod replies;
mod script;
mod switches;
mod unsettled;
mod versioned;
mod wake;

use lock_core::raw::RenewBatch;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::Value;
use fred::types::config::Options;
use fred::util::redis_keyslot;
use lock_core::raw::{FairWaiter, WaitOptions};
use lock_core::raw::{ttl_millis, validate_key, validate_ttl};
use lock_core::{AcquireOutcome, Lease, ReleaseOutcome, RenewOutcome};
use lock_core::{Capabilities, Error, FencingToken, LockBackend, LockToken, Result};

/// The prefix of the lock kinds' keys and the waiter markers: user keys
/// under it are refused (see [`TairBackend::reserved_key_prefixes`]).
pub const RESERVED_KEY_PREFIX: &str = keys::KIND_PREFIX;

pub use builder::{
    DEFAULT_ACK_CONNECTIONS, DEFAULT_CONNECT_TIMEOUT, DEFAULT_FENCE_PREFIX, DEFAULT_RESPONSE_TIMEOUT,
    MAX_ACK_CONNECTIONS, OnShortfall, ReplicaAck, TairBuilder,
};
pub use config::{TairConfig, TairConnector};
/// The fred version this crate is built with, to build your own client or
/// pool for [`TairBuilder::connection`] / [`TairBuilder::pool`].
pub use fred;

use conn::{Access, COMMANDS, Clients, NAME, map_error, send, unexpected_reply};
use renew::RENEW_MANY_CHUNK;
use replies::FencedReply;
use unsettled::{Pending, Unsettled};
use wake::Notifications;

/// The Tair backend: [`LockBackend`] on plain strings with `CAD`/`CAS`, and
/// [`VersionedStore`](lock_core::VersionedStore) on exString keys. Cheap to clone; clones share the
/// connections.
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// use lock_core::{LockManager, VersionedStoreExt};
/// let backend = lock_tair::TairBackend::connect("redis://127.0.0.1:6379").await?;
/// let locks = LockManager::new(backend.clone())?;
/// let guard = locks.lock("invoice:42").await?;
/// guard.release().await?;
/// let v = backend.update("counter", |old| {
///     let n: u64 = old.and_then(|b| std::str::from_utf8(b).ok()?.parse().ok()).unwrap_or(0);
///     Some((n + 1).to_string().into_bytes())
/// }).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TairBackend {
    inner: Arc<Inner>,
}

struct Inner {
    /// Connections for everything but write + WAIT.
    commands: Clients,
    /// Dedicated connections for write + WAIT, when replica acks are on.
    ack: Option<(Clients, ReplicaAck)>,
    options: Options,
    response_timeout: Duration,
    fence_prefix: Option<String>,
    script_sha: String,
    /// SHA1 of [`RENEW_MANY`], for `EVALSHA`.
    renew_many_sha: String,
    retry_after_hint: bool,
    clustered: bool,
    /// Clients this backend built (from a URL, or ack connections) and so
    /// closes when the last clone is dropped.
    owned: Vec<Client>,
    /// Acquires that may still run, for their clean-up to follow them.
    unsettled: Unsettled,
    /// Release notifications (single server, unless turned off).
    wake: Option<Notifications>,
    /// Through Redis Sentinel: the `+switch-master` subscription that
    /// reconnects the clients to a new primary (stopped with the backend).
    _switches: Option<switches::Follower>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.owned.is_empty() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let clients = std::mem::take(&mut self.owned);
            runtime.spawn(async move {
                for client in clients {
                    let _ = client.quit().await;
                }
            });
        }
    }
}

impl std::fmt::Debug for TairBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TairBackend")
            .field("clustered", &self.inner.clustered)
            .field("connections", &self.inner.commands.all().len())
            .field("fencing", &self.inner.fence_prefix.is_some())
            .field("replica_ack", &self.inner.ack.as_ref().map(|(_, a)| a))
            .field("response_timeout", &self.inner.response_timeout)
            .finish_non_exhaustive()
    }
}

impl TairBackend {
    /// The key prefixes this backend keeps for its own keys: every user key
    /// (a lock's, a lock kind's name, a versioned key) under one is refused
    /// with [`Error::InvalidArgument`]. [`RESERVED_KEY_PREFIX`] (the lock
    /// kinds' keys, waiter markers) and the fence counters' prefix (the
    /// configured one, else [`DEFAULT_FENCE_PREFIX`], which multi-key
    /// grants write whatever the mutex's fencing setting).
    #[must_use]
    pub fn reserved_key_prefixes(&self) -> [&str; 2] {
        [RESERVED_KEY_PREFIX, self.fence_counter_prefix()]
    }

    /// The prefix of the fence counters this backend writes.
    fn fence_counter_prefix(&self) -> &str {
        self.inner.fence_prefix.as_deref().unwrap_or(DEFAULT_FENCE_PREFIX)
    }

    /// A usable user key: valid, and not under a reserved prefix.
    pub(crate) fn check_key(&self, key: &str) -> Result<()> {
        validate_key(key)?;
        keys::check_user_key(key, self.fence_counter_prefix())
    }

    /// The fred client of the next command (for commands of your own on the
    /// same connections).
    pub fn client(&self) -> &Client {
        self.inner.commands.next()
    }
}

/// A token as stored: its hex form, moved into the argument (no copy).
fn token_arg(token: &LockToken) -> Value {
    Value::from(token.to_hex())
}

/// A TTL in whole milliseconds (rounded up) as a command argument.
fn px(ttl: Duration) -> i64 {
    i64::try_from(ttl_millis(ttl)).unwrap_or(i64::MAX)
}

#[async_trait]
impl LockBackend for TairBackend {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.check_key(key)?;
        validate_ttl(ttl)?;
        let px = px(ttl);
        let mut writer = self.writer();
        // Until the server answers, a clean-up release must follow this
        // write on its connection: see the `unsettled` module.
        let pending = Pending::new(&self.inner.unsettled, *token, writer.client, self.unsettled_for(ttl));
        // After a wake-up the key is most likely reserved for us.
        let claiming = self
            .inner
            .wake
            .as_ref()
            .filter(|w| w.usable() && w.waits.take_woken(key));
        // This backend's last release of the key left waiters: the token
        // goes in marked, so that this holder's release wakes them.
        let marked = (self.inner.wake.as_ref()).is_some_and(|w| w.usable() && w.contended.contains(key));
        let stored = || {
            if marked {
                wake::marked_arg(token)
            } else {
                token_arg(token)
            }
        };
        let fence = match &self.inner.fence_prefix {
            None if let Some(wake) = claiming => {
                let taken = self.claim(wake, writer.client, key, token, px).await;
                pending.settle();
                match taken {
                    Ok(true) => None,
                    Ok(false) => {
                        return Ok(AcquireOutcome::Held {
                            retry_after: self.retry_after(key).await,
                        });
                    }
                    Err(e) => return Err(map_error("EVAL (claim)", key, Access::Script, e)),
                }
            }
            None => {
                let args: Vec<Value> = vec![
                    key.into(),
                    stored(),
                    Value::from_static_str("NX"),
                    Value::from_static_str("PX"),
                    px.into(),
                ];
                let reply = send(writer.client, &COMMANDS.set, args)
                    .await
                    .map_err(|e| map_error("SET NX", key, Access::Write, e))?;
                pending.settle();
                match replies::set_nx(&reply) {
                    Some(true) => None,
                    Some(false) => {
                        return Ok(AcquireOutcome::Held {
                            retry_after: self.retry_after(key).await,
                        });
                    }
                    None => return Err(unexpected_reply("SET NX", key, Access::Write, &reply)),
                }
            }
            Some(prefix) => {
                let mut hex = token.to_hex();
                if marked {
                    hex.push_str(lock_redis_family::wake::WAITER_MARK);
                }
                let reply = self.fenced_acquire(&writer, key, &hex, px, prefix).await?;
                pending.settle();
                match reply {
                    FencedReply::Acquired { fence } => Some(FencingToken(fence)),
                    FencedReply::Held { pttl_ms } => {
                        return Ok(AcquireOutcome::Held {
                            retry_after: pttl_ms.map(Duration::from_millis),
                        });
                    }
                }
            }
        };
        if let Some(wake) = &self.inner.wake {
            wake.waits.acquired(key);
        }
        let replication = self.confirm_acquire(&mut writer, key, token).await?;
        Ok(AcquireOutcome::Acquired(
            Lease::new().with_fencing_token(fence).with_replication(replication),
        ))
    }

    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.check_key(key)?;
        // The clean-up of an acquire that may still be queued goes after it.
        let after_acquire = self.inner.unsettled.take(token);
        let client = after_acquire.as_ref().unwrap_or_else(|| self.inner.commands.next());
        self.release_on(client, key, token, after_acquire.is_some()).await
    }

    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.check_key(key)?;
        validate_ttl(ttl)?;
        self.renew_one(key, token, px(ttl)).await
    }

    /// One script per chunk of up to 128 keys (per hash slot in a cluster),
    /// sent concurrently, with the single renew's outcomes per key; a failed
    /// call fails its chunk's items as a single renew would have failed.
    async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        if items.iter().any(|(key, _)| self.check_key(key).is_err()) {
            // Rare: answer the bad and reserved keys as `renew` would, send the others.
            let sent: Vec<(&str, &LockToken)> = items
                .iter()
                .filter(|(key, _)| self.check_key(key).is_ok())
                .copied()
                .collect();
            let mut sent_outcomes = self.renew_many(&sent, ttl).await.into_iter();
            return items
                .iter()
                .map(|(key, _)| {
                    self.check_key(key).and_then(|()| {
                        sent_outcomes
                            .next()
                            .unwrap_or_else(|| Err(Error::outcome_unknown(NAME, format!("renew of {key:?}: no reply"))))
                    })
                })
                .collect();
        }
        let clustered = self.inner.clustered;
        let batch = RenewBatch::new(items, ttl, RENEW_MANY_CHUNK, |key| {
            clustered.then(|| redis_keyslot(key.as_bytes()))
        });
        let px = px(ttl);
        // With replica acks, every chunk on one WAIT connection, then one
        // WAIT per server written to.
        let mut writer = self.writer();
        let client = writer.client;
        let calls = batch
            .chunks()
            .iter()
            .map(|chunk| self.renew_chunk(client, items, chunk, px));
        let mut outcomes = futures::future::join_all(calls).await;
        if let Some(ack) = writer.ack {
            self.confirm_renewals(&mut writer, ack, items, batch.chunks(), &mut outcomes)
                .await;
        }
        batch.finish(items, outcomes, NAME)
    }

    /// With release notifications (a single server), subscribed and in the
    /// key's wake set: a release reserves the key for it and wakes it once
    /// it has waited the starvation bound. Else the timer.
    async fn wait_for_release(&self, key: &str, max_wait: Duration) {
        self.wait_for_release_opts(key, &WaitOptions::new(max_wait)).await;
    }

    /// A named waiter keeps its id and its age (see
    /// [`LockBackend::wait_for_release_opts`]).
    async fn wait_for_release_opts(&self, key: &str, options: &WaitOptions) {
        match &self.inner.wake {
            Some(wake) => self.wait_woken(wake, key, options).await,
            None => tokio::time::sleep(options.max_wait).await,
        }
    }

    /// The queue lives beside the key, on one server (not a cluster, not
    /// with replica acknowledgement: `Unsupported` there); with release
    /// notifications the head wakes on release, without them waiters poll
    /// every third of their claim.
    async fn try_acquire_fair(
        &self,
        key: &str,
        token: &LockToken,
        ttl: Duration,
        waiter: &FairWaiter,
    ) -> Result<AcquireOutcome> {
        self.check_key(key)?;
        validate_ttl(ttl)?;
        self.acquire_fair(key, token, ttl, self.fair_waiter_id(waiter), waiter.claim)
            .await
    }

    async fn wait_fair(&self, key: &str, waiter: &FairWaiter, max_wait: Duration) {
        let _ = key; // the waiter's id names its channel
        self.wait_fair_turn(waiter, max_wait).await;
    }

    async fn leave_queue(&self, key: &str, waiter: &FairWaiter) -> Result<()> {
        self.check_key(key)?;
        self.leave_fair_queue(key, waiter).await
    }

    /// One read-only script: the key's value, `PTTL` and fence counter.
    async fn inspect(&self, key: &str) -> Result<lock_core::LockInfo> {
        self.check_key(key)?;
        self.inspect_lock(key).await
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new(NAME);
        caps.fair_queue = self.fair_supported();
        caps.fencing_tokens = self.inner.fence_prefix.is_some();
        caps.native_compare_and_delete = true;
        caps.release_notifications = self.inner.wake.is_some();
        caps.replica_ack = self.inner.ack.is_some();
        caps.semaphores = true;
        caps.multi_key_locks = true;
        caps.rw_locks = true;
        caps.leader_election = true;
        caps
    }
}
