//! PostgreSQL in the benchmark (issue 25): the server, started on first
//! use, verrou's postgres backend, and what a Rust service on PostgreSQL
//! would use instead: raw tokio-postgres sending the backend's own
//! statements over the same pool, `pg_try_advisory_lock` /
//! `pg_advisory_unlock` on a held connection, sqlx's `PgAdvisoryLock`, and
//! `distributed-lock-postgres`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distributed_lock_core::traits::{DistributedLock, LockHandle, LockProvider};
use lock_core::LockToken;
use lock_postgres::deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use lock_postgres::tokio_postgres::types::Type;
use lock_postgres::tokio_postgres::{self, NoTls, Statement};
use lock_postgres::{DEFAULT_POOL_SIZE, LockStatements, PostgresBackend};
use lock_testkit::server::PostgresServer;

use crate::BoxResult;
use crate::drive::Op;
use crate::locks::Locker;

/// verrou's postgres backend, defaults (release notifications on: a
/// release notifies when someone waits).
pub const VERROU_PG: &str = "verrou postgres";
/// The same with release notifications off (waiters on their timers).
pub const VERROU_PG_QUIET: &str = "verrou postgres, notifications off";
/// verrou's postgres advisory mode (`mode=advisory`, issue 44): a session
/// advisory lock per held lock, on a pooled connection kept checked out.
pub const VERROU_PG_ADVISORY: &str = "verrou postgres, advisory mode";
/// Raw tokio-postgres, the backend's statements over the same pool.
pub const RAW_TOKIO_PG: &str = "raw tokio-postgres (same statements, same pool)";
/// Session advisory locks on one held connection.
pub const ADVISORY: &str = "pg_try_advisory_lock + pg_advisory_unlock (tokio-postgres, held connection)";
/// Blocking session advisory locks, one held connection per contender.
pub const ADVISORY_BLOCKING: &str = "pg_advisory_lock + pg_advisory_unlock (tokio-postgres, held connections)";
/// sqlx's advisory lock over its pool.
pub const SQLX: &str = "sqlx 0.8 PgAdvisoryLock (postgres)";
/// The `distributed-lock-postgres` crate.
pub const DLP: &str = "distributed-lock-postgres 0.2";
/// The `application_name` of the peers' sessions.
pub const PEER_APPLICATION: &str = "verrou-bench-peer";
/// The PostgreSQL round trip.
pub const PING_PG: &str = "SELECT 1 (tokio-postgres)";

/// Whether a row label is one of the PostgreSQL rows.
pub fn is_pg(label: &str) -> bool {
    label.contains("postgres")
}

/// The PostgreSQL server of a run, started on first use (a run filtered to
/// Redis rows never starts one), with `synchronous_commit = off`: a commit
/// is confirmed before its WAL reaches the disk, as the Redis rows run
/// without persistence. With it on, every number here is the disk's: the
/// virtual disk of the project's machine takes about 4 ms per flush, so a
/// pair (two commits) takes 8 ms whichever client sends it (measured).
/// Torture runs PostgreSQL with it on.
#[derive(Default)]
pub struct PgLab {
    server: Option<PostgresServer>,
}

impl PgLab {
    /// The server's URL, starting it on first call.
    pub async fn url(&mut self) -> BoxResult<String> {
        if self.server.is_none() {
            let server = PostgresServer::builder()
                .setting("max_connections", "600")
                .setting("synchronous_commit", "off")
                .start()
                .await?;
            self.server = Some(server);
        }
        Ok(self.server.as_ref().ok_or("postgres not started")?.url())
    }

    /// The URL the peers connect with: their sessions carry
    /// [`PEER_APPLICATION`], so that [`PgLab::end_peer_sessions`] finds them.
    pub async fn peer_url(&mut self) -> BoxResult<String> {
        Ok(format!("{}?application_name={PEER_APPLICATION}", self.url().await?))
    }

    /// Ends every peer session still open (none when the server is not
    /// started). A row's window closes by dropping its tasks: a peer
    /// waiting in `pg_advisory_lock`, or holding a lock in an open
    /// transaction, keeps its session in a pool the dropped task cannot
    /// close (measured: distributed-lock-postgres's sessions were still
    /// waiting 20 s later, into the renewal scenario). A waiting statement
    /// holds a snapshot, which keeps every dead row version in the database
    /// from being removed: the rows after it would be measured on a server
    /// the peers still burden.
    pub async fn end_peer_sessions(&self) -> BoxResult<()> {
        let Some(server) = &self.server else { return Ok(()) };
        let others = format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = '{PEER_APPLICATION}'"
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            // Terminating is asynchronous: ask again until none is left.
            if server.psql(&others).await?.trim() == "0" {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err("peer sessions still open 10 s after pg_terminate_backend".into());
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// A new advisory-mode backend with its own pool (defaults: no fencing).
    pub async fn advisory(&mut self) -> BoxResult<lock_postgres::AdvisoryBackend> {
        let url = self.url().await?;
        Ok(lock_postgres::AdvisoryBackend::connect(&format!("{url}?mode=advisory")).await?)
    }

    /// A new backend with its own pool (the schema is created on first use).
    pub async fn backend(&mut self, notifications: bool) -> BoxResult<PostgresBackend> {
        let url = self.url().await?;
        Ok(PostgresBackend::builder(&url)?
            .release_notifications(notifications)
            .build()
            .await?)
    }
}

/// A connection pool as the backend builds its own: `DEFAULT_POOL_SIZE`
/// connections, fast recycling, no TLS on loopback.
fn pool(url: &str) -> BoxResult<Pool> {
    let config: tokio_postgres::Config = url.parse()?;
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Ok(Pool::builder(manager).max_size(DEFAULT_POOL_SIZE).build()?)
}

/// One connection, driven by its own task.
async fn connection(url: &str) -> BoxResult<tokio_postgres::Client> {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// 16-byte owner tokens from a random prefix and a counter: the floor of
/// what a token can cost (verrou draws a random one per lock).
struct Owners {
    prefix: [u8; 8],
    next: AtomicU64,
}

impl Owners {
    fn new() -> BoxResult<Self> {
        let token = LockToken::generate()?;
        let mut prefix = [0u8; 8];
        prefix.copy_from_slice(&token.as_bytes()[..8]);
        Ok(Owners {
            prefix,
            next: AtomicU64::new(0),
        })
    }

    fn next(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.prefix);
        out[8..].copy_from_slice(&self.next.fetch_add(1, Ordering::Relaxed).to_be_bytes());
        out
    }
}

/// tokio-postgres, no framework: the postgres backend's own acquire and
/// release statements in its default configuration (from
/// [`PostgresBackend::lock_statements`]: release notifications on), sent as
/// it sends them (`query_typed`: unnamed statement, in its own durable
/// transaction, one round trip each) over a pool built as it builds its own.
pub struct RawTokioPostgres {
    pool: Pool,
    sql: LockStatements,
    owners: Owners,
    ttl_ms: i64,
}

impl RawTokioPostgres {
    /// Statements of `backend` (whose build created the schema), a pool to `url`.
    pub fn new(backend: &PostgresBackend, url: &str, ttl: Duration) -> BoxResult<Self> {
        Ok(RawTokioPostgres {
            pool: pool(url)?,
            sql: backend.lock_statements(),
            owners: Owners::new()?,
            ttl_ms: i64::try_from(ttl.as_millis())?,
        })
    }
}

impl Locker for RawTokioPostgres {
    type Held = (String, [u8; 16]);

    async fn acquire(&self, key: &str) -> BoxResult<(String, [u8; 16])> {
        let owner = self.owners.next();
        let owner_ref: &[u8] = &owner;
        let client = self.pool.get().await?;
        let rows = in_transaction(
            &client,
            &self.sql,
            &self.sql.acquire_marking,
            &[
                (&key, Type::TEXT),
                (&owner_ref, Type::BYTEA),
                (&self.ttl_ms, Type::INT8),
                (&false, Type::BOOL),
            ],
        )
        .await?;
        let fence: Option<i64> = rows.first().map(|r| r.try_get(0)).transpose()?.flatten();
        match fence {
            Some(_) => Ok((key.to_owned(), owner)),
            None => Err(format!("raw tokio-postgres: {key} is held").into()),
        }
    }

    async fn release(&self, (key, owner): (String, [u8; 16])) -> BoxResult<()> {
        let owner_ref: &[u8] = &owner;
        let client = self.pool.get().await?;
        let rows = in_transaction(
            &client,
            &self.sql,
            &self.sql.release_notify,
            &[
                (&key, Type::TEXT),
                (&owner_ref, Type::BYTEA),
                (&self.sql.channel.as_str(), Type::TEXT),
            ],
        )
        .await?;
        let code: i32 = rows.first().ok_or("release: no row")?.try_get(0)?;
        if code == 0 {
            Ok(())
        } else {
            Err(format!("raw tokio-postgres: release of {key} answered {code}").into())
        }
    }
}

/// `sql` in its own transaction as the backend sends a write: its `BEGIN`
/// (READ COMMITTED, a durable commit), the statement and `COMMIT`, pipelined
/// in one round trip.
async fn in_transaction(
    client: &tokio_postgres::Client,
    statements: &LockStatements,
    sql: &str,
    params: &[(&(dyn tokio_postgres::types::ToSql + Sync), Type)],
) -> BoxResult<Vec<tokio_postgres::Row>> {
    let (begin, rows, commit) = futures::join!(
        client.batch_execute(statements.begin),
        client.query_typed(sql, params),
        client.batch_execute("COMMIT")
    );
    begin?;
    let rows = rows?;
    commit?;
    Ok(rows)
}

/// A stable 64-bit key for a name (FNV-1a), as an advisory lock needs.
pub fn advisory_key(name: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    i64::from_ne_bytes(h.to_ne_bytes())
}

/// Session advisory locks on one held connection (prepared statements):
/// `pg_try_advisory_lock` answers at once; with `blocking`,
/// `pg_advisory_lock` waits in the server. No TTL, no fencing, no loss
/// signal, and every task of the process shares the one session (a second
/// task taking the same key in it would be granted too: session locks are
/// re-entrant), so contenders need a connection each.
pub struct AdvisoryHeld {
    client: tokio_postgres::Client,
    lock: Statement,
    unlock: Statement,
    blocking: bool,
}

impl AdvisoryHeld {
    /// Connect to `url` and prepare the two statements.
    pub async fn connect(url: &str, blocking: bool) -> BoxResult<Self> {
        let client = connection(url).await?;
        let lock_sql = if blocking {
            "SELECT pg_advisory_lock($1)"
        } else {
            "SELECT pg_try_advisory_lock($1)"
        };
        let lock = client.prepare_typed(lock_sql, &[Type::INT8]).await?;
        let unlock = client
            .prepare_typed("SELECT pg_advisory_unlock($1)", &[Type::INT8])
            .await?;
        Ok(AdvisoryHeld {
            client,
            lock,
            unlock,
            blocking,
        })
    }
}

impl Locker for AdvisoryHeld {
    type Held = i64;

    async fn acquire(&self, key: &str) -> BoxResult<i64> {
        let k = advisory_key(key);
        let row = self.client.query_one(&self.lock, &[&k]).await?;
        // `pg_advisory_lock` answers void once granted.
        if self.blocking || row.try_get::<_, bool>(0)? {
            Ok(k)
        } else {
            Err(format!("advisory lock: {key} is held").into())
        }
    }

    async fn release(&self, k: i64) -> BoxResult<()> {
        let row = self.client.query_one(&self.unlock, &[&k]).await?;
        let released: bool = row.try_get(0)?;
        if released {
            Ok(())
        } else {
            Err("pg_advisory_unlock answered false".into())
        }
    }
}

/// sqlx 0.8's `PgAdvisoryLock`: a pooled connection (sqlx's pool, its
/// defaults), `acquire` (`pg_advisory_lock`, waiting in the server), then
/// its release (`pg_advisory_unlock`) handing the connection back.
pub struct SqlxAdvisory {
    pool: sqlx::PgPool,
    /// One lock object per key (a guard borrows its lock for its lifetime;
    /// the few keys of a run are leaked on purpose).
    locks: Mutex<HashMap<String, &'static sqlx::postgres::PgAdvisoryLock>>,
}

impl SqlxAdvisory {
    /// A pool to `url` with sqlx's default options.
    pub async fn connect(url: &str) -> BoxResult<Self> {
        Ok(SqlxAdvisory {
            pool: sqlx::PgPool::connect(url).await?,
            locks: Mutex::new(HashMap::new()),
        })
    }

    fn lock_of(&self, key: &str) -> &'static sqlx::postgres::PgAdvisoryLock {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks
            .entry(key.to_owned())
            .or_insert_with(|| Box::leak(Box::new(sqlx::postgres::PgAdvisoryLock::new(key))))
    }
}

/// A held sqlx advisory lock.
pub type SqlxGuard = sqlx::postgres::PgAdvisoryLockGuard<'static, sqlx::pool::PoolConnection<sqlx::Postgres>>;

impl Locker for SqlxAdvisory {
    type Held = (SqlxGuard, &'static sqlx::postgres::PgAdvisoryLock);

    async fn acquire(&self, key: &str) -> BoxResult<Self::Held> {
        let lock = self.lock_of(key);
        let conn = self.pool.acquire().await?;
        Ok((lock.acquire(conn).await?, lock))
    }

    async fn release(&self, (guard, lock): Self::Held) -> BoxResult<()> {
        // What `release_now` sends, keeping its answer.
        let (_conn, released) = lock.force_release(guard.leak()).await?;
        if released {
            Ok(())
        } else {
            Err("sqlx: pg_advisory_unlock answered false".into())
        }
    }
}

/// `distributed-lock-postgres` 0.2: its provider over a connection string
/// (its own sqlx pool), `create_lock(name).acquire(None)`, `release`.
pub struct DistributedLockPg {
    provider: distributed_lock_postgres::PostgresLockProvider,
}

impl DistributedLockPg {
    /// A provider for `url`.
    pub async fn connect(url: &str) -> BoxResult<Self> {
        Ok(DistributedLockPg {
            provider: distributed_lock_postgres::PostgresLockProvider::new(url).await?,
        })
    }
}

impl Locker for DistributedLockPg {
    type Held = distributed_lock_postgres::handle::PostgresLockHandle;

    async fn acquire(&self, key: &str) -> BoxResult<Self::Held> {
        Ok(self.provider.create_lock(key).acquire(None).await?)
    }

    async fn release(&self, handle: Self::Held) -> BoxResult<()> {
        Ok(handle.release().await?)
    }
}

/// `SELECT 1` over one tokio-postgres connection (unnamed statement, as the
/// backend sends its statements): the round trip.
pub struct PingPg(pub Arc<tokio_postgres::Client>);

impl PingPg {
    /// Connect to `url`.
    pub async fn connect(url: &str) -> BoxResult<Self> {
        Ok(PingPg(Arc::new(connection(url).await?)))
    }
}

impl Op for PingPg {
    async fn once(&self, _key: &str) -> BoxResult<()> {
        let rows = self.0.query_typed("SELECT 1", &[]).await?;
        if rows.len() == 1 {
            Ok(())
        } else {
            Err("SELECT 1 answered no row".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Client sessions other than the asking one that hold a snapshot
    /// (and so keep every dead row version in the database).
    async fn snapshot_holders(pg: &PgLab) -> String {
        let server = pg.server.as_ref().expect("started");
        server
            .psql(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' \
                 AND pid <> pg_backend_pid() AND backend_xmin IS NOT NULL",
            )
            .await
            .expect("psql")
    }

    /// A row's window closes by leaving its tasks. A distributed-lock-postgres
    /// peer's task waiting in `pg_advisory_lock` keeps its session waiting,
    /// with a snapshot, past the row (its holder's handle was dropped, its
    /// transaction left open in the pool); ending the peers' sessions
    /// between rows leaves none.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_peer_row_leaves_no_session_holding_a_snapshot() {
        let mut pg = PgLab::default();
        let url = pg.peer_url().await.expect("start postgres");
        let peer = Arc::new(DistributedLockPg::connect(&url).await.expect("connect"));
        let held = peer.acquire("k").await.expect("acquire");
        let waiter = {
            let peer = peer.clone();
            tokio::spawn(async move { peer.acquire("k").await.map(|_| ()).map_err(|e| e.to_string()) })
        };
        let mut waiting = false;
        for _ in 0..100 {
            if snapshot_holders(&pg).await != "0" {
                waiting = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(waiting, "the second acquire never waited in the server");
        // The row's end: the holder's guard dropped, the waiting task
        // left to itself (it keeps the peer's pool).
        drop(held);
        drop(peer);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_ne!(snapshot_holders(&pg).await, "0", "the waiter still waits");
        pg.end_peer_sessions().await.expect("end the peers' sessions");
        assert_eq!(snapshot_holders(&pg).await, "0");
        let ended = tokio::time::timeout(Duration::from_secs(10), waiter).await;
        assert!(ended.is_ok(), "the waiter still waits after its session ended");
    }

    #[test]
    fn advisory_keys_are_stable() {
        assert_eq!(
            advisory_key(""),
            i64::from_ne_bytes(0xcbf2_9ce4_8422_2325u64.to_ne_bytes())
        );
        assert_eq!(advisory_key("a"), advisory_key("a"));
        assert_ne!(advisory_key("a"), advisory_key("b"));
        assert!(is_pg(VERROU_PG) && is_pg(RAW_TOKIO_PG) && is_pg(ADVISORY) && is_pg(SQLX) && is_pg(DLP));
        assert!(is_pg(ADVISORY_BLOCKING) && is_pg(PING_PG) && is_pg(VERROU_PG_QUIET));
        assert!(!is_pg("verrou redis-lua"));
    }
}
