//! The advisory mode (`mode=advisory`): a held lock is a session advisory
//! lock, `pg_try_advisory_lock(bigint)`, on one of a few multiplexed
//! sessions (pooled connections kept for the backend's life, many keys'
//! locks each, statements pipelined; see [`multiplexed`]), or, without
//! them, on a pooled connection that stays checked out while the lock is
//! held. Advisory locks are re-entrant per session, so two holders must
//! never try one id on one session: the multiplexed sessions keep the ids
//! they hold. See the crate's *Advisory mode* for the trade-offs.

mod builder;
mod multiplexed;
mod session;
mod xact;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::raw::{validate_key, validate_ttl};
use lock_core::{AcquireOutcome, Lease, ReleaseOutcome, RenewOutcome};
use lock_core::{Capabilities, Error, FencingToken, LockBackend, LockToken, Result};
use tokio_postgres::types::Type;

pub use builder::AdvisoryBuilder;
pub use xact::{try_xact_lock, xact_lock};

use crate::error::{pool_error, statement_error};
use multiplexed::{Multiplexed, MuxSession, Reservation};
pub(crate) use session::Session;
use session::{Held, HeldLocks, Holding};

/// Backend name in errors and capabilities.
pub(crate) const BACKEND: &str = "postgres-advisory";

/// One statement with one `bigint` parameter, prepared once per connection,
/// on `client` within `left`; `None` when no reply came in time (or there
/// is no connection).
async fn ask(
    client: Option<&deadpool_postgres::ClientWrapper>,
    sql: &str,
    id: i64,
    left: Duration,
) -> Option<std::result::Result<tokio_postgres::Row, tokio_postgres::Error>> {
    let client = client?;
    let exchange = async {
        let statement = client.prepare_typed_cached(sql, &[Type::INT8]).await?;
        client.query_one(&statement, &[&id]).await
    };
    tokio::time::timeout(left, exchange).await.ok()
}

/// `pg_advisory_unlock(id)` on `client`: whether its session held the id;
/// `None` when no reply came in time.
async fn unlock(
    client: Option<&deadpool_postgres::ClientWrapper>,
    id: i64,
    left: Duration,
) -> Option<std::result::Result<bool, tokio_postgres::Error>> {
    let reply = ask(client, "SELECT pg_advisory_unlock($1)", id, left).await?;
    Some(reply.map(|row| row.try_get::<_, bool>(0).unwrap_or(false)))
}

/// The advisory lock id of `key`: FNV-1a (64-bit) of its UTF-8 bytes, as a
/// signed `bigint`. Stable: the same key gives the same id in every
/// version of verrou, on every platform, so a SQL session can take the
/// same lock with `pg_advisory_lock(id)`.
///
/// Two keys whose ids collide exclude each other (each waits while the
/// other is held): a collision costs waiting, never exclusion. With `n`
/// keys in use at once the chance of any collision is about
/// `n² / 2⁶⁵` (10⁵ keys: about 3 × 10⁻¹⁰). The ids share PostgreSQL's one
/// `bigint` advisory lock space of the database with the application's own
/// advisory locks.
///
/// ```
/// assert_eq!(lock_postgres::advisory_key("invoice:42"), lock_postgres::advisory_key("invoice:42"));
/// assert_ne!(lock_postgres::advisory_key("invoice:42"), lock_postgres::advisory_key("invoice:43"));
/// assert_eq!(lock_postgres::advisory_key(""), 0xcbf2_9ce4_8422_2325_u64 as i64);
/// ```
pub fn advisory_key(key: &str) -> i64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = key.bytes().fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME));
    i64::from_ne_bytes(hash.to_ne_bytes())
}

/// The statements, each prepared once per connection (deadpool's
/// statement cache).
pub(crate) struct Statements {
    /// The grant: `pg_try_advisory_lock`, the session's process id and,
    /// with fencing, `nextval` when taken.
    grant: String,
    fencing: bool,
    /// The schema of the fencing sequence (for error messages).
    schema: String,
    /// The liveness check of a held session.
    alive: &'static str,
    /// Whether any session of the database holds the id (another
    /// client's token).
    held_by_any: &'static str,
}

impl Statements {
    fn new(schema: &str, fencing: bool) -> Self {
        let grant = if fencing {
            // The WHERE (a one-time filter, evaluated before the select
            // list) raises synchronous_commit to `on` for this statement's
            // transaction when the session says `off`, so the commit that
            // ends it waits for the sequence's WAL: a token never repeats
            // after a crash. nextval runs only when the lock was taken.
            format!(
                "SELECT CASE WHEN pg_try_advisory_lock($1) THEN nextval('\"{schema}\".fence_seq') END, \
                 pg_backend_pid() \
                 WHERE CASE WHEN current_setting('synchronous_commit') = 'off' \
                       THEN set_config('synchronous_commit', 'on', true) IS NOT NULL ELSE true END"
            )
        } else {
            "SELECT pg_try_advisory_lock($1), pg_backend_pid()".to_owned()
        };
        Statements {
            grant,
            fencing,
            schema: schema.to_owned(),
            alive: "SELECT pg_backend_pid()",
            held_by_any: "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                 AND classid = (($1::int8 >> 32) & 4294967295)::oid AND objid = ($1::int8 & 4294967295)::oid \
                 AND objsubid = 1)",
        }
    }
}

/// PostgreSQL's advisory mode: implements [`LockBackend`] (plain locks).
/// Cheap to clone; clones share the pool and the held locks. Dropping the
/// last clone closes the held sessions, which ends their locks.
#[derive(Clone)]
pub struct AdvisoryBackend {
    inner: Arc<Inner>,
}

struct Inner {
    pool: deadpool_postgres::Pool,
    sql: Statements,
    response_timeout: Duration,
    description: String,
    held: HeldLocks,
    multiplexed: Multiplexed,
}

impl std::fmt::Debug for AdvisoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdvisoryBackend")
            .field("source", &self.inner.description)
            .field("fencing", &self.inner.sql.fencing)
            .field("response_timeout", &self.inner.response_timeout)
            .field("held", &self.inner.held.len())
            .field("multiplexed_sessions", &self.inner.multiplexed.len())
            .finish_non_exhaustive()
    }
}

/// What the grant statement answered.
enum Grant {
    Taken { pid: i32, fence: Option<u64> },
    Held,
}

impl AdvisoryBackend {
    /// The pool the backend's sessions come from.
    pub fn pool(&self) -> &deadpool_postgres::Pool {
        &self.inner.pool
    }

    /// Whether grants carry fencing tokens.
    pub fn fencing(&self) -> bool {
        self.inner.sql.fencing
    }

    /// Locks held through this backend now.
    pub fn held_locks(&self) -> usize {
        self.inner.held.len()
    }

    /// A session out of the pool within the response timeout.
    async fn checkout(&self) -> Result<Session> {
        let timeout = self.inner.response_timeout;
        match tokio::time::timeout(timeout, self.inner.pool.get()).await {
            Ok(Ok(object)) => Ok(Session::new(object)),
            Ok(Err(e)) => Err(pool_error(e)),
            Err(_) => Err(Error::backend(
                BACKEND,
                format!(
                    "no connection within the response timeout ({timeout:?}): each held advisory lock keeps \
                     one pooled connection ({} held through this backend; raise pool_size)",
                    self.inner.held.len()
                ),
            )),
        }
    }

    /// `pg_try_advisory_lock` on the connection `client`.
    async fn grant(&self, client: Option<&deadpool_postgres::ClientWrapper>, id: i64, left: Duration) -> Result<Grant> {
        let row = match ask(client, &self.inner.sql.grant, id, left).await {
            Some(Ok(row)) => row,
            Some(Err(e)) => return Err(statement_error(e, true, &self.inner.sql.schema)),
            None => {
                return Err(Error::outcome_unknown(
                    BACKEND,
                    format!("no reply to the grant within {:?}", self.inner.response_timeout),
                ));
            }
        };
        let bad = || Error::outcome_unknown(BACKEND, "unexpected reply to the grant");
        let pid: i32 = row.try_get(1).map_err(|_| bad())?;
        if self.inner.sql.fencing {
            let fence: Option<i64> = row.try_get(0).map_err(|_| bad())?;
            return match fence {
                Some(f) => Ok(Grant::Taken {
                    pid,
                    fence: Some(u64::try_from(f).map_err(|_| bad())?),
                }),
                None => Ok(Grant::Held),
            };
        }
        let taken: bool = row.try_get(0).map_err(|_| bad())?;
        Ok(if taken {
            Grant::Taken { pid, fence: None }
        } else {
            Grant::Held
        })
    }

    /// Whether some session of the database holds `id` (for a token this
    /// backend does not hold): `HeldByOther` or `Missing`, as `true` /
    /// `false`.
    async fn held_elsewhere(&self, id: i64) -> Result<bool> {
        let started = tokio::time::Instant::now();
        let session = self.checkout().await?;
        let left = self.left(started);
        match ask(session.client(), self.inner.sql.held_by_any, id, left).await {
            Some(Ok(row)) => {
                session.finish();
                row.try_get::<_, bool>(0)
                    .map_err(|_| Error::backend(BACKEND, "unexpected reply to the pg_locks read"))
            }
            Some(Err(e)) => Err(statement_error(e, false, &self.inner.sql.schema)),
            None => Err(Error::backend(BACKEND, "no reply to the pg_locks read")),
        }
    }

    fn left(&self, started: tokio::time::Instant) -> Duration {
        self.inner
            .response_timeout
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(1))
    }
}

impl AdvisoryBackend {
    /// A try on a session of its own out of the pool: kept checked out when
    /// the lock is taken, back to the pool when it is not. Cancelled (or
    /// failed, or timed out) before the grant is recorded, the session is
    /// closed, never pooled: its lock, if it took one, ends with it.
    async fn try_on_own_session(&self, key: &str, token: &LockToken, id: i64) -> Result<AcquireOutcome> {
        let started = tokio::time::Instant::now();
        let session = self.checkout().await?;
        match self.grant(session.client(), id, self.left(started)).await? {
            Grant::Held => {
                session.finish();
                Ok(AcquireOutcome::Held { retry_after: None })
            }
            Grant::Taken { pid, fence } => {
                // No await from the reply to here: recorded or dropped.
                self.record(
                    key,
                    token,
                    id,
                    pid,
                    fence,
                    Holding::Own(Box::new(tokio::sync::Mutex::new(Some(session)))),
                );
                Ok(AcquireOutcome::Acquired(
                    Lease::new().with_fencing_token(fence.map(FencingToken)),
                ))
            }
        }
    }

    /// A try on the multiplexed session `id` goes to. The id is reserved
    /// there first; a reservation the server never answered (cancelled,
    /// timed out, failed) unlocks the id on that session when dropped.
    async fn try_on_multiplexed(
        &self,
        key: &str,
        token: &LockToken,
        id: i64,
        session: Arc<MuxSession>,
        started: tokio::time::Instant,
    ) -> Result<AcquireOutcome> {
        if !session.reserve(id) {
            // This backend holds the id on that session, or is trying it.
            return Ok(AcquireOutcome::Held { retry_after: None });
        }
        let reservation = Reservation::new(session.clone(), id, self.inner.response_timeout);
        match self.grant(session.client(), id, self.left(started)).await {
            Ok(Grant::Held) => {
                reservation.settled();
                Ok(AcquireOutcome::Held { retry_after: None })
            }
            Ok(Grant::Taken { fence, .. }) => {
                // No await from the reply to here: recorded or unlocked.
                reservation.granted();
                let pid = session.pid;
                self.record(key, token, id, pid, fence, Holding::Multiplexed(session));
                Ok(AcquireOutcome::Acquired(
                    Lease::new().with_fencing_token(fence.map(FencingToken)),
                ))
            }
            Err(e) => {
                if session.is_dead() {
                    reservation.abandon();
                }
                // Otherwise dropped armed: the id is unlocked on the
                // session (a statement error may come after the grant).
                Err(e)
            }
        }
    }

    fn record(&self, key: &str, token: &LockToken, id: i64, pid: i32, fence: Option<u64>, holding: Holding) {
        self.inner.held.insert(
            *token,
            Arc::new(Held {
                key: key.to_owned(),
                id,
                pid,
                fence,
                holding,
            }),
        );
    }

    /// The liveness check of `pid`'s session on `client`.
    async fn alive(&self, client: Option<&deadpool_postgres::ClientWrapper>, pid: i32) -> bool {
        let timeout = self.inner.response_timeout;
        match ask(client, self.inner.sql.alive, 0, timeout).await {
            Some(Ok(row)) => row.try_get::<_, i32>(0).ok() == Some(pid),
            Some(Err(_)) | None => false,
        }
    }
}

#[async_trait]
impl LockBackend for AdvisoryBackend {
    /// One round trip: on the multiplexed session the key goes to (its
    /// statement pipelined with the others'), or, without one, on a session
    /// out of the pool kept checked out while the lock is held. A try this
    /// backend already holds or is trying on its session is answered `Held`
    /// without a round trip. Cancelled (or failed, or timed out) before the
    /// grant is recorded, whatever it took is let go: an own session is
    /// closed, never pooled; on a multiplexed session an unlock of the id
    /// follows (statements of a session run in order).
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        validate_key(key)?;
        validate_ttl(ttl)?;
        if let Some(held) = self.inner.held.get(key, token) {
            // The same token again (a re-sent grant): still ours.
            return Ok(AcquireOutcome::Acquired(
                Lease::new().with_fencing_token(held.fence.map(FencingToken)),
            ));
        }
        let id = advisory_key(key);
        let started = tokio::time::Instant::now();
        let timeout = self.inner.response_timeout;
        match self.inner.multiplexed.session(&self.inner.pool, id, timeout).await {
            Some(session) => self.try_on_multiplexed(key, token, id, session, started).await,
            None => self.try_on_own_session(key, token, id).await,
        }
    }

    /// `pg_advisory_unlock` on the lock's session. An own session then goes
    /// back to the pool; when the unlock fails or gets no reply it is
    /// closed instead (its end frees the lock). On a multiplexed session an
    /// unlock without a reply is sent again by the runtime (or the session
    /// ends), and the id stays reserved until one is answered. A token this
    /// backend does not hold is answered from `pg_locks`.
    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        validate_key(key)?;
        let Some(held) = self.inner.held.remove(key, token) else {
            let other = self.held_elsewhere(advisory_key(key)).await?;
            return Ok(if other {
                ReleaseOutcome::HeldByOther
            } else {
                ReleaseOutcome::Missing
            });
        };
        let timeout = self.inner.response_timeout;
        let no_reply = || {
            Error::outcome_unknown(
                BACKEND,
                format!(
                    "no reply to pg_advisory_unlock within {timeout:?}: its connection is closed (or, for a \
                     multiplexed session, the unlock sent again), which ends the lock"
                ),
            )
        };
        let session = match &held.holding {
            Holding::Multiplexed(session) => {
                if session.is_dead() || !session.holds(held.id) {
                    return Ok(ReleaseOutcome::Missing);
                }
                let reservation = Reservation::new(session.clone(), held.id, timeout);
                return match unlock(session.client(), held.id, timeout).await {
                    Some(Ok(was_held)) => {
                        reservation.settled();
                        Ok(if was_held {
                            ReleaseOutcome::Released
                        } else {
                            ReleaseOutcome::Missing
                        })
                    }
                    // The connection failed: its session ended, and the lock
                    // with it.
                    Some(Err(_)) if session.is_dead() => {
                        reservation.abandon();
                        Ok(ReleaseOutcome::Missing)
                    }
                    // Dropped armed: the unlock is sent again.
                    Some(Err(_)) | None => Err(no_reply()),
                };
            }
            // Waits for a liveness check in flight on the same session.
            Holding::Own(slot) => slot.lock().await.take(),
        };
        let Some(session) = session else {
            return Ok(ReleaseOutcome::Missing);
        };
        match unlock(session.client(), held.id, timeout).await {
            Some(Ok(true)) => {
                session.finish();
                Ok(ReleaseOutcome::Released)
            }
            // The session did not hold it (it was not the grant's): closed.
            Some(Ok(false)) => Ok(ReleaseOutcome::Missing),
            // The connection failed: its session ended (or ends as it is
            // closed here), and the lock with it.
            Some(Err(_)) => Ok(ReleaseOutcome::Missing),
            None => Err(no_reply()),
        }
    }

    /// The liveness check: one round trip on the lock's session (the lock
    /// lives as long as the session). A failed check, or one answered by
    /// another server process (a transaction pooler in between), ends the
    /// lock here: its session is closed (a multiplexed one is no longer
    /// used, and closes once its other locks have learnt the same) and the
    /// answer is `Missing`, which the manager reports as the lease's loss.
    /// `ttl` is only checked.
    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        validate_key(key)?;
        validate_ttl(ttl)?;
        let Some(held) = self.inner.held.get(key, token) else {
            let other = self.held_elsewhere(advisory_key(key)).await?;
            return Ok(if other {
                RenewOutcome::HeldByOther
            } else {
                RenewOutcome::Missing
            });
        };
        match &held.holding {
            Holding::Multiplexed(session) => {
                if !session.is_dead() && session.holds(held.id) && self.alive(session.client(), held.pid).await {
                    return Ok(RenewOutcome::Renewed);
                }
                session.kill();
            }
            Holding::Own(slot) => {
                let mut slot = slot.lock().await;
                let Some(session) = slot.as_ref() else {
                    return Ok(RenewOutcome::Missing);
                };
                if self.alive(session.client(), held.pid).await {
                    return Ok(RenewOutcome::Renewed);
                }
                // Closed (dropped): whatever the server still holds for it
                // ends with the session.
                drop(slot.take());
            }
        }
        self.inner.held.forget(token, &held);
        Ok(RenewOutcome::Missing)
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new(BACKEND);
        caps.fencing_tokens = self.inner.sql.fencing;
        caps.distinguishes_missing = true;
        caps.lease_expires = false;
        caps
    }

    async fn inspect(&self, key: &str) -> Result<lock_core::LockInfo> {
        let _ = key;
        Err(Error::unsupported(
            BACKEND,
            "inspecting an advisory lock (pg_locks shows that a session holds it, but neither its fencing \
             token nor a remaining lease: the lock has none)",
        ))
    }
}
