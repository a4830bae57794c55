//! Connections: one shared multiplexed connection for the hot path, cloned
//! per call (no pool checkout, so no recycle round trip), replaced after an
//! unrecoverable error; and dedicated pooled connections for write + WAIT
//! pairs, because WAIT blocks the server-side connection it is sent on.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use deadpool_redis::redis::aio::{ConnectionLike, MultiplexedConnection};
use deadpool_redis::redis::cluster_async::ClusterConnection;
use deadpool_redis::redis::{self, AsyncConnectionConfig, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Value};
use lock_core::{Error, Result};

use crate::error::{BACKEND, connect_error};
use crate::scripts::LuaScript;
use crate::sentinel::Discovery;

/// After this many timeouts in a row the shared connection is replaced: a
/// half-open TCP connection would otherwise time out forever.
const TIMEOUTS_BEFORE_RECONNECT: u32 = 2;

/// A connection of either topology.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Runs a script as EVALSHA; on NOSCRIPT (a restarted server, SCRIPT FLUSH,
/// a failover) re-sends it as EVAL, which also caches it again. NOSCRIPT
/// means nothing ran, so the re-send cannot apply a write twice.
pub(crate) async fn run_script<C: ConnectionLike + Send>(
    conn: &mut C,
    script: &LuaScript,
    keys: &[&str],
    args: &[&[u8]],
) -> redis::RedisResult<Value> {
    match script.cmd(false, keys, args).query_async::<Value>(conn).await {
        Err(e) if e.kind() == ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.cmd(true, keys, args).query_async::<Value>(conn).await
        }
        other => other,
    }
}

/// Where the shared standalone connection comes from.
pub(crate) enum StandaloneSource {
    /// Built from a URL: connect (and reconnect) with these settings.
    Client {
        client: redis::Client,
        config: Box<AsyncConnectionConfig>,
    },
    /// The application's pool: one connection is kept checked out.
    Pool(deadpool_redis::Pool),
    /// The application's connection: used as is, never replaced.
    Fixed(MultiplexedConnection),
    /// The primary found through Redis Sentinel, found again at each
    /// reconnection.
    Sentinel(Arc<Discovery>),
}

struct Current {
    generation: u64,
    conn: MultiplexedConnection,
    /// The primary's address and the discovery's epoch, through Sentinel.
    primary: Option<(String, u64)>,
    /// Keeps a pooled connection checked out while it is in use.
    _checkout: Option<deadpool_redis::Connection>,
}

/// The shared standalone connection, replaced after unrecoverable errors.
pub(crate) struct SharedStandalone {
    source: StandaloneSource,
    current: Mutex<Option<Current>>,
    /// Held while connecting; remembers when the last attempt failed and
    /// why, so callers queued behind a failed attempt fail with it instead of
    /// each waiting out another connect timeout.
    connecting: tokio::sync::Mutex<Option<(Instant, String)>>,
    generations: AtomicU64,
    /// Timeouts in a row on the current connection; outside the mutex so
    /// that a success (the common case) costs one load.
    timeouts_in_a_row: AtomicU32,
    connect_timeout: Duration,
}

/// Which connection a call used, to report its fate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Checkout {
    generation: Option<u64>,
}

impl SharedStandalone {
    pub(crate) fn new(source: StandaloneSource, connect_timeout: Duration) -> Self {
        SharedStandalone {
            source,
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(None),
            generations: AtomicU64::new(0),
            timeouts_in_a_row: AtomicU32::new(0),
            connect_timeout,
        }
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Option<Current>> {
        // Every update is a single assignment: a poisoned lock holds a
        // consistent value.
        match self.current.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn cached(&self) -> Option<(Checkout, MultiplexedConnection)> {
        let current = self.current();
        if let (StandaloneSource::Sentinel(d), Some(c)) = (&self.source, current.as_ref())
            && c.primary.as_ref().is_some_and(|(_, epoch)| *epoch != d.epoch())
        {
            return None; // the primary changed: reconnect
        }
        current.as_ref().map(|c| {
            (
                Checkout {
                    generation: Some(c.generation),
                },
                c.conn.clone(),
            )
        })
    }

    /// The shared connection, connecting first if there is none. Only one
    /// caller connects; the others wait for it.
    pub(crate) async fn get(&self) -> Result<(Checkout, MultiplexedConnection)> {
        if let StandaloneSource::Fixed(conn) = &self.source {
            return Ok((Checkout { generation: None }, conn.clone()));
        }
        if let Some(found) = self.cached() {
            return Ok(found);
        }
        // Boxed: the connect future is several KiB, and every call's future
        // would carry it although nearly every call finds the connection.
        Box::pin(self.reconnect()).await
    }

    /// Connects the shared connection (one caller at a time).
    async fn reconnect(&self) -> Result<(Checkout, MultiplexedConnection)> {
        let queued_at = Instant::now();
        let mut last_failure = self.connecting.lock().await;
        if let Some(found) = self.cached() {
            return Ok(found);
        }
        if let Some((failed_at, why)) = last_failure.as_ref()
            && *failed_at >= queued_at
        {
            return Err(Error::backend(BACKEND, why.clone()));
        }
        let attempt = match tokio::time::timeout(self.connect_timeout, self.connect()).await {
            Ok(r) => r,
            Err(_) => Err(connect_error(format!(
                "no connection within the connect timeout ({:?})",
                self.connect_timeout
            ))),
        };
        let (conn, checkout, primary) = match attempt {
            Ok(found) => found,
            Err(e) => {
                let why = match &e {
                    Error::Backend { message, .. } => message.clone(),
                    other => other.to_string(),
                };
                *last_failure = Some((Instant::now(), why));
                return Err(e);
            }
        };
        *last_failure = None;
        let generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
        {
            let mut current = self.current();
            self.timeouts_in_a_row.store(0, Ordering::Relaxed);
            *current = Some(Current {
                generation,
                conn: conn.clone(),
                primary,
                _checkout: checkout,
            });
        }
        Ok((
            Checkout {
                generation: Some(generation),
            },
            conn,
        ))
    }

    #[allow(clippy::type_complexity)]
    async fn connect(
        &self,
    ) -> Result<(
        MultiplexedConnection,
        Option<deadpool_redis::Connection>,
        Option<(String, u64)>,
    )> {
        match &self.source {
            StandaloneSource::Client { client, config } => {
                let conn = client
                    .get_multiplexed_async_connection_with_config(config)
                    .await
                    .map_err(connect_error)?;
                Ok((conn, None, None))
            }
            StandaloneSource::Pool(pool) => {
                let checkout = pool.get().await.map_err(connect_error)?;
                let conn: MultiplexedConnection = (*checkout).clone();
                Ok((conn, Some(checkout), None))
            }
            StandaloneSource::Fixed(conn) => Ok((conn.clone(), None, None)),
            StandaloneSource::Sentinel(discovery) => {
                let (primary, conn) = discovery.discover().await?;
                Ok((conn, None, Some((primary.addr.clone(), primary.epoch))))
            }
        }
    }

    /// A call on `checkout` got a reply.
    pub(crate) fn succeeded(&self, checkout: Checkout) {
        let Some(generation) = checkout.generation else { return };
        if self.timeouts_in_a_row.load(Ordering::Relaxed) == 0 {
            return;
        }
        let current = self.current();
        if current.as_ref().is_some_and(|c| c.generation == generation) {
            self.timeouts_in_a_row.store(0, Ordering::Relaxed);
        }
    }

    /// A call on `checkout` failed with `error` (`None`: our own timeout).
    /// Drops the connection when it cannot recover, so the next call
    /// reconnects.
    pub(crate) fn failed(&self, checkout: Checkout, error: Option<&RedisError>) {
        let Some(generation) = checkout.generation else { return };
        let mut current = self.current();
        if current.as_ref().is_none_or(|c| c.generation != generation) {
            return;
        }
        let sentinel = match &self.source {
            StandaloneSource::Sentinel(d) => Some(d),
            _ => None,
        };
        let drop_it = match error {
            // A demoted primary: find the new one (through Sentinel).
            Some(e) if sentinel.is_some() && e.code() == Some("READONLY") => true,
            Some(e) if e.code().is_some() => false, // the server answered
            Some(e) if e.is_unrecoverable_error() || e.is_connection_dropped() => true,
            Some(e) if !e.is_timeout() => false,
            _ => {
                // Updated under the mutex: only loads happen outside it.
                let timeouts = self.timeouts_in_a_row.load(Ordering::Relaxed) + 1;
                self.timeouts_in_a_row.store(timeouts, Ordering::Relaxed);
                timeouts >= TIMEOUTS_BEFORE_RECONNECT
            }
        };
        if drop_it {
            tracing::debug!(
                generation,
                "dropping the shared Redis connection; the next call reconnects"
            );
            if let (Some(discovery), Some((primary, _))) = (sentinel, current.as_ref().and_then(|c| c.primary.as_ref()))
            {
                discovery.forget(primary);
            }
            *current = None;
        }
    }
}

/// The shared connection of either topology.
pub(crate) enum Shared {
    Standalone(Box<SharedStandalone>),
    /// A cluster connection reconnects to each node by itself.
    Cluster(ClusterConnection),
}

impl Shared {
    pub(crate) async fn get(&self) -> Result<(Checkout, Conn)> {
        match self {
            Shared::Standalone(s) => s.get().await.map(|(checkout, c)| (checkout, Conn::Single(c))),
            Shared::Cluster(c) => Ok((Checkout { generation: None }, Conn::Cluster(c.clone()))),
        }
    }

    /// Whether the connection applies the response timeout to each request
    /// itself: true when we built it from a URL with our settings; an
    /// application's pool or connection may have none, and the cluster
    /// client retries (redirects, reconnects) past one request's timeout.
    pub(crate) fn bounds_each_request(&self) -> bool {
        matches!(self, Shared::Standalone(s)
            if matches!(s.source, StandaloneSource::Client { .. } | StandaloneSource::Sentinel(_)))
    }

    /// Whether the primary is found through Sentinel (and found again
    /// after a `READONLY` reply).
    pub(crate) fn follows_primary(&self) -> bool {
        matches!(self, Shared::Standalone(s) if matches!(s.source, StandaloneSource::Sentinel(_)))
    }

    pub(crate) fn succeeded(&self, checkout: Checkout) {
        if let Shared::Standalone(s) = self {
            s.succeeded(checkout);
        }
    }

    pub(crate) fn failed(&self, checkout: Checkout, error: Option<&RedisError>) {
        if let Shared::Standalone(s) = self {
            s.failed(checkout, error);
        }
    }
}

/// Pools of dedicated connections for write + WAIT.
pub(crate) enum Dedicated {
    Standalone(deadpool_redis::Pool),
    Cluster(deadpool_redis::cluster::Pool),
    /// The pool of the primary found through Sentinel.
    Sentinel(Arc<Discovery>),
}

impl std::fmt::Debug for Dedicated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, status) = match self {
            Dedicated::Standalone(p) => ("standalone", p.status()),
            Dedicated::Cluster(p) => ("cluster", p.status()),
            Dedicated::Sentinel(d) => return f.debug_tuple("Dedicated").field(d).finish(),
        };
        f.debug_struct("Dedicated")
            .field("kind", &kind)
            .field("size", &status.size)
            .field("max_size", &status.max_size)
            .finish_non_exhaustive()
    }
}

/// Any error that a pool checkout can produce, without credentials.
pub(crate) fn pool_error<E: std::fmt::Display>(e: E) -> Error {
    connect_error(e)
}
