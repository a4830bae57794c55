//! PostgreSQL backend of verrou: locks as leases in a table, decided by the
//! server in one statement per operation (tokio-postgres through
//! deadpool-postgres).
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let server = lock_testkit::server::PostgresServer::start().await?;
//! # let url = server.url(); // a PostgreSQL server on a free loopback port
//! use lock_core::LockManager;
//! use lock_postgres::PostgresBackend;
//!
//! // `url`: "postgres://user[:pass]@host[:port]/db" (creates its schema if missing)
//! let backend = PostgresBackend::connect(&url).await?;
//! let locks = LockManager::new(backend)?;
//! let guard = locks.lock("invoice:42").await?;
//! let token = guard.fencing_token(); // always issued: hand it to the resource you write
//! assert!(token.is_some());
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Wire protocol
//!
//! | operation | statement | round trips |
//! |---|---|---|
//! | acquire | `INSERT … ON CONFLICT (key) DO UPDATE … WHERE expired OR ours RETURNING fence`, plus the holder's remaining TTL when held | 1 |
//! | release | `DELETE … WHERE key AND owner`, then which of released / held by another / missing | 1 |
//! | renew | `UPDATE … SET expires_at WHERE key AND owner AND live` | 1 |
//! | renew many | `SELECT … FROM schema.renew_many($keys, $owners, …)` per batch: a primary-key update per key (PL/pgSQL), so a batch never joins the table on statistics that call it empty | 1 |
//! | versioned get / create | `SELECT` / `INSERT … ON CONFLICT` | 1 |
//! | semaphore / read-write acquire | `SELECT * FROM schema.sem_acquire(…)` / `rw_acquire(…)`: the name's row locked `FOR UPDATE`, then the decision | 1 |
//! | multi-key acquire | `multi_acquire(keys, …)`: every key's row in sorted order, or none (a rolled-back block) | 1 |
//! | election | the lock's statements on the `leaders` table (the term is the fencing token) | 1 |
//! | versioned CAS / delete | `SELECT * FROM schema.kv_cas(…)` / `kv_delete(…)` (PL/pgSQL) | 1 |
//!
//! Every write is sent inside its own transaction (see *Server settings*):
//! `BEGIN`, the statement and `COMMIT` pipelined, one round trip.
//!
//! Every expiry is computed by the server from `clock_timestamp()` (the
//! current time, not the transaction's start `now()`); client clocks never
//! count. Fencing tokens come from a sequence (`fence_seq`), so they only
//! grow, across keys, deletes and restarts; each is drawn under a
//! transaction advisory lock on its key, so a key's tokens grow in the order
//! it is granted under contention too (`tests/it/fencing_order.rs`); versions of the store from
//! another (`version_seq`), so a key deleted and created again never
//! repeats a version. Tokens are the 16 raw bytes of a [`LockToken`](lock_core::LockToken)
//! (`bytea`).
//!
//! # Pools and PgBouncer
//!
//! Each operation is one statement sent with the extended protocol's
//! *unnamed* statement (tokio-postgres `query_typed`: Parse, Bind, Execute,
//! Sync), a write wrapped in its own transaction (`BEGIN … ; COMMIT`
//! pipelined with it: one round trip), and nothing is left on the session:
//! no prepared statement, no session-level `SET` (the transaction's
//! settings end with it), no session lock. So the backend works through
//! any pool and through PgBouncer in transaction mode, whose server
//! connections change between transactions (named prepared statements
//! would break there before PgBouncer 1.21, which is why
//! deadpool-postgres's statement cache is not used). PgBouncer's
//! *statement* mode refuses transactions: not supported.
//!
//! A connection whose reply did not come (the response timeout, or the
//! caller's future dropped) is never handed to another caller: it leaves
//! the pool and is kept aside until its replies come (at most a minute,
//! then a cancel request is sent and it is closed). When it carried a
//! grant (an acquire of any kind), the clean-up of that grant's token (the
//! release the manager sends after an unknown outcome) goes out on the same
//! connection, so the server runs it after the grant, never before.
//!
//! # Server settings
//!
//! The claims below hold whatever the server, database, role or URL sets
//! for `default_transaction_isolation` and `synchronous_commit`: every
//! write runs at READ COMMITTED (a REPEATABLE READ snapshot, taken before a
//! kind's function waits for its name's row lock, would miss the previous
//! holder's grant), with `synchronous_commit` raised to `on` for its
//! transaction when the session says `off` (a crash would lose a confirmed
//! grant and hand its fencing token out again); `local`, `remote_write`
//! and `remote_apply` are kept. Three writes grant nothing and commit
//! without waiting for their flush (nor for a synchronous standby): a
//! plain lock's release (lost in a crash or a failover, the lease comes
//! back until its expiry, never a second holder; the next grant's commit
//! flushes it first, the log being written in order), a refused fair
//! attempt (it only kept its place in the queue) and, with release
//! notifications, a refused plain attempt (it only marked the lease as
//! waited for); test `a_refused_attempt_does_not_wait_for_the_synchronous_standby`. They need `fsync` on (the default) and, for
//! a failover, a synchronous standby (see *Guarantees*).
//!
//! # Schema
//!
//! [`SCHEMA_SQL`] (`sql/schema.sql`) creates the schema `verrou` with its
//! tables, sequences and functions; [`schema_sql`] gives it for another
//! schema name. By default the builder creates what is missing at build
//! (under a transaction-scoped advisory lock);
//! [`PostgresBuilder::create_schema(false)`](PostgresBuilder::create_schema)
//! leaves that to your migrations and fails the build when it is not there.
//! A missing table, a missing privilege or a read-only server is an
//! [`Error::Refused`] whose [`RefusalReason`](lock_core::RefusalReason) says which.
//! Every round trip of the build is bounded by the response timeout. The
//! sequences start at the server's time in microseconds, so a schema
//! dropped and created again does not repeat a fencing token or a version.
//! A release removes its name's row (semaphores, read-write locks) when it
//! was the last holder; every backend sweeps expired rows of every table in
//! the background ([`PostgresBackend::sweep`], every [`SWEEP_INTERVAL`]).
//!
//! # Waiting
//!
//! An acquire that finds the key held answers the holder's remaining TTL,
//! so a waiter's backoff never sleeps past the expiry. Release
//! notifications are on by default ([`PostgresBuilder::release_notifications`];
//! off over an application pool unless a [`PostgresBuilder::listen_url`]
//! is given): each backend keeps one `LISTEN` connection, and a release
//! that someone waits for sends `pg_notify` (in the release statement),
//! which wakes one local waiter of the key instead of its timer, and in
//! fair mode the queue's head, which the release names (a wake-up that
//! comes while the head's attempt is in flight is kept for its next wait).
//! "Someone waits" is written in the lease row: a waiter's failed attempt
//! marks it (`waited`, committed without waiting for its flush: a lost mark
//! costs a waiter its timer), a grant to a process that waited for the key
//! within the last second starts marked, and a live entry in the key's fair
//! queue counts too. A release nobody waits for sends nothing, so it costs
//! what it costs with notifications off (a commit that notifies takes a
//! database-wide lock while it flushes: notifying every release cost 44 %
//! of uncontended throughput, `bench/analysis.md`). `LISTEN` is session state, so
//! that connection must be direct, never through PgBouncer's transaction
//! mode: name it with [`PostgresBuilder::listen_url`] (URL parameter
//! `listen_url`) when the pool goes through PgBouncer. Without
//! notifications, waiters use their timers. A lost notification costs
//! latency, never correctness.
//!
//! # Fair mode
//!
//! With [`lock_core::Fairness::Fifo`], waiters queue in the `queue` table
//! (a ticket from the sequence, an expiry `claim` after each attempt); the
//! `acquire_fair` function grants a free key only to the live head of its
//! queue and drops dead entries, in one statement per attempt. Without
//! notifications nothing wakes the head when the holder releases, so the
//! head and the waiter right behind it (nothing tells it either when the
//! head takes the key) are told they are next and poll on the manager's
//! backoff; the waiters further back poll only to keep their entries
//! alive, once per third of the claim, so they learn that they moved up
//! only then. With release notifications (the default), each release
//! wakes the head it names instead (BENCHMARKS.md, hot key, has both
//! rows).
//!
//! # Keys
//!
//! Keys are `text` primary keys: at most [`MAX_KEY_BYTES`] bytes (a btree
//! entry must fit in a third of a page) and no NUL character; others are
//! [`Error::InvalidArgument`].
//!
//! # Guarantees
//!
//! On one server: mutual exclusion while each holder stays inside its
//! local deadline (the manager's deadline starts before the request is
//! sent, the server's expiry after it arrives). A row is never taken over
//! before its expiry by the server's clock. A failover keeps the confirmed
//! leases only when the standby was synchronous (`synchronous_standby_names`
//! with `synchronous_commit` `on` or `remote_apply`); it (or a crash) can
//! undo a confirmed release, which keeps the key held until the lease's
//! expiry.
//!
//! # URL
//!
//! [`PostgresBackend::connect`] and `verrou::connect` take libpq's URL,
//! `postgres://user[:pass]@host[:port]/db` or `postgresql://…` (its own
//! parameters such as `sslmode` included), plus verrou's: `schema` (default
//! `verrou`), `create_schema` (`false` leaves it to your migrations),
//! `response_timeout`, `pool_size`, `release_notifications` and `listen_url`
//! (a direct connection for `LISTEN` when the pool goes through PgBouncer),
//! `mode` (`lease`, the default, or `advisory`) and `fencing` (advisory
//! mode's tokens; a typed error with `mode=advisory`: the lease-only
//! `release_notifications` and `listen_url`).
//!
//! # Advisory mode
//!
//! `mode=advisory` (`verrou::connect`, or [`AdvisoryBackend`]) holds each
//! lock as a session advisory lock: `pg_try_advisory_lock(id)` (the key's
//! [`advisory_key`], a stable 64-bit hash: two colliding keys exclude each
//! other, nothing worse). The locks live on a few *multiplexed sessions*
//! (`multiplexed_sessions`, default 2): pooled connections kept for the
//! backend's life, each holding the locks of many keys, every caller's
//! statement pipelined on them, a key always on the same one. Advisory
//! locks are re-entrant per session, so each session keeps the ids it holds
//! or is trying: a second try of such a key through the same backend is
//! answered `Held` by the backend, never sent to re-enter it. A try
//! or an unlock whose reply never came (cancelled, timed out) leaves its
//! id reserved and sends `pg_advisory_unlock` again (statements of a
//! session run in order, so it frees whatever the grant took); only the
//! server's answer frees the id. `multiplexed_sessions=0` keeps one pooled
//! connection per held lock instead, back to the pool at release (closed
//! when its unlock fails or is cancelled). Renewal is a liveness check of
//! the session (one round trip). No table, one round trip per acquire and
//! release, prepared once per connection. Plain locks only (no fair mode,
//! lock kinds, versioned store or `inspect`); fencing tokens are opt-in
//! (`fencing=true`: `nextval` of `fence_seq` in the grant's statement,
//! committed with `synchronous_commit` at least `on`). Waiters poll on the
//! manager's backoff. The trade-offs against lease rows:
//!
//! - Sessions are the lock: PgBouncer in transaction or statement mode
//!   would share them between holders, and is refused at build (connect
//!   directly or through session mode).
//! - A session's end ends every lock it holds: with multiplexed sessions,
//!   one terminated or cut connection loses the locks of every key on it
//!   (each holder's `lost()` fires at its next check), where one session
//!   per lock (`multiplexed_sessions=0`) loses one lock, at the price of a
//!   connection per held lock (`pool_size` then bounds the locks held at
//!   once).
//! - A lock does not survive a failover or a server restart (the session
//!   ends); the holder's `lost()` fires at its next liveness check.
//! - The lock lives as long as the session, not a TTL
//!   ([`Capabilities::lease_expires`](lock_core::Capabilities::lease_expires)
//!   is false): a frozen holder keeps it until the server finds the session
//!   dead (TCP keepalives, `idle_session_timeout`,
//!   `tcp_user_timeout`). A terminated session (`pg_terminate_backend`, a
//!   cut connection) ends the lock at once while its holder learns at its
//!   next check: the window in which the holder may still act is the check
//!   interval (a third of the TTL), not a TTL.
//!
//! [`try_xact_lock`] and [`xact_lock`] take the transaction-scoped form on
//! the caller's own transaction, released by its commit or rollback: the
//! form for a lock that guards a change to the same database.
//!
//! # Features
//!
//! - `tls`: TLS by `sslmode` through rustls with the platform's roots; facade
//!   feature `postgres-tls`.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod advisory;
mod builder;
mod config;
mod conn;
mod error;
mod inspect;
mod kinds;
mod lease;
mod notify;
mod outcome;
mod replication;
mod schema;
mod sweep;
mod versioned;

use std::sync::Arc;
use std::time::Duration;

use lock_core::raw::{ttl_millis, validate_key, validate_ttl};
use lock_core::{Error, Result};
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

pub use advisory::{AdvisoryBackend, AdvisoryBuilder, advisory_key, try_xact_lock, xact_lock};
pub use builder::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_POOL_SIZE, DEFAULT_RESPONSE_TIMEOUT, MAX_POOL_SIZE, PostgresBuilder,
};
/// The deadpool-postgres crate the backend is built on (hand over a `Pool`).
pub use config::{POSTGRES_PARAMS, PostgresConfig, PostgresConnector, PostgresMode};
pub use deadpool_postgres;
pub use kinds::GONE_WINDOW;
pub use replication::ReplicationMode;
pub use schema::{DEFAULT_SCHEMA, LockStatements, SCHEMA_SQL, schema_sql, validate_identifier};
pub use sweep::{SWEEP_INTERVAL, SWEEP_LIMIT};
/// The tokio-postgres crate the backend is built on.
pub use tokio_postgres;

use conn::Op;
use outcome::{acquire_outcome, outcome_code, release_outcome, renew_outcome};
use schema::Statements;

/// Longest key accepted, in bytes (a btree index entry must fit in a third
/// of an 8 KiB page).
pub const MAX_KEY_BYTES: usize = 2048;

/// Most items renewed by one statement of [`LockBackend::renew_many`](lock_core::LockBackend::renew_many);
/// longer batches are split.
pub const RENEW_BATCH: usize = 1000;

/// The PostgreSQL backend: implements [`LockBackend`](lock_core::LockBackend) and
/// [`VersionedStore`](lock_core::VersionedStore). Cheap to clone; clones
/// share the pool.
#[derive(Clone)]
pub struct PostgresBackend {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pool: deadpool_postgres::Pool,
    sql: Statements,
    response_timeout: Duration,
    description: String,
    replication: std::sync::OnceLock<ReplicationMode>,
    /// Release notifications, when on.
    notifier: Option<notify::Notifier>,
    /// The `NOTIFY` channel of this schema.
    channel: String,
    /// Connections of grants whose reply did not come, by token (`conn`).
    set_aside: conn::SetAside,
}

impl std::fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("source", &self.inner.description)
            .field("schema", &self.inner.sql.schema)
            .field("response_timeout", &self.inner.response_timeout)
            .finish_non_exhaustive()
    }
}

/// A statement parameter with its type (sent unprepared, so typed here).
type Param<'a> = (&'a (dyn ToSql + Sync), Type);

impl PostgresBackend {
    /// The schema in use.
    pub fn schema(&self) -> &str {
        &self.inner.sql.schema
    }

    /// The pool the backend sends its statements on.
    pub fn pool(&self) -> &deadpool_postgres::Pool {
        &self.inner.pool
    }

    /// The statements of a plain lock, as this backend sends them (for a
    /// raw client doing the same, e.g. the benchmark's).
    pub fn lock_statements(&self) -> LockStatements {
        let sql = &self.inner.sql;
        LockStatements {
            begin: conn::BEGIN,
            acquire: sql.acquire.clone(),
            acquire_marking: sql.acquire_marking.clone(),
            release: sql.release.clone(),
            release_notify: sql.release_notify.clone(),
            renew: sql.renew.clone(),
            renew_many: sql.renew_many.clone(),
            channel: self.inner.channel.clone(),
        }
    }

    /// Runs one statement (a write in its own READ COMMITTED, durable
    /// transaction) on a pooled connection within the response timeout. A
    /// connection whose reply did not come in time, or whose caller went
    /// away first, is never handed to the next caller (see `conn`).
    pub(crate) async fn query(&self, sql: &str, params: &[Param<'_>], write: bool) -> Result<Vec<Row>> {
        self.run(sql, params, if write { Op::Write } else { Op::Read }).await
    }
}

/// [`validate_key`] plus this backend's limits on `text` keys.
pub(crate) fn check_key(key: &str) -> Result<()> {
    validate_key(key)?;
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::invalid(format!(
            "key is {} bytes; the postgres backend takes at most {MAX_KEY_BYTES}",
            key.len()
        )));
    }
    if key.contains('\0') {
        return Err(Error::invalid(
            "key contains a NUL character, which PostgreSQL text cannot hold",
        ));
    }
    Ok(())
}

/// A TTL as whole milliseconds for the server.
pub(crate) fn ttl_param(ttl: Duration) -> Result<i64> {
    validate_ttl(ttl)?;
    i64::try_from(ttl_millis(ttl)).map_err(|_| Error::invalid("ttl out of range"))
}
