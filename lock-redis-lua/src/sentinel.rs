//! Redis Sentinel: the primary is found through the sentinels
//! (`SENTINEL get-master-addr-by-name`) and confirmed with `ROLE` on a new
//! connection before that connection serves anything. It is found again
//! whenever the shared connection is replaced — after a dropped connection
//! (a killed primary; a demoted one, whose clients the sentinels
//! disconnect), or a `READONLY` reply — never per operation: the hot path
//! uses the cached connection exactly as a standalone backend does. One
//! subscription to a sentinel's `+switch-master` forgets the primary when
//! the sentinels replace it ([`Discovery::follow_switches`]), so that a
//! client does not stay on a primary that was paused or cut off past a
//! failover and came back still answering as a primary.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures::StreamExt;

use deadpool_redis::redis::aio::MultiplexedConnection;
use deadpool_redis::redis::{self, AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, Value};
use lock_core::Result;

use crate::connection::pool_error;
use crate::error::connect_error;

/// How the dedicated write + `WAIT` connections of one primary are pooled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AckPool {
    pub(crate) max_size: usize,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) wait_timeout: Duration,
}

impl AckPool {
    /// A pool of connections to `info`.
    pub(crate) fn build(&self, info: ConnectionInfo, config: AsyncConnectionConfig) -> Result<deadpool_redis::Pool> {
        let (ct, rt, wait) = (self.connect_timeout, self.response_timeout, self.wait_timeout);
        // WAIT may block for its timeout: these connections wait that much
        // longer for a reply.
        let config = config.set_response_timeout(Some(rt.saturating_add(wait)));
        let manager = deadpool_redis::Manager::new_with_config(info, config).map_err(pool_error)?;
        deadpool_redis::Pool::builder(manager)
            .max_size(self.max_size)
            .runtime(deadpool_redis::Runtime::Tokio1)
            .wait_timeout(Some(ct.saturating_add(rt).saturating_add(wait)))
            .create_timeout(Some(ct))
            .recycle_timeout(Some(rt))
            .build()
            .map_err(pool_error)
    }
}

/// The primary found last.
pub(crate) struct Primary {
    /// `host:port`, as the sentinels name it.
    pub(crate) addr: String,
    pub(crate) client: redis::Client,
    /// Write + `WAIT` connections to it (with replica acknowledgement).
    pub(crate) pool: Option<deadpool_redis::Pool>,
    /// The discovery's epoch when it was found.
    pub(crate) epoch: u64,
}

/// Finds the primary through the sentinels.
pub(crate) struct Discovery {
    sentinels: Vec<redis::Client>,
    master_name: String,
    /// The data nodes' connection settings (credentials, database, TLS);
    /// the address is the primary's.
    node: ConnectionInfo,
    config: AsyncConnectionConfig,
    ack_pool: Option<AckPool>,
    current: Mutex<Option<Arc<Primary>>>,
    /// Bumped when the primary changes or is forgotten: the shared
    /// connection compares it (one atomic load per call) and reconnects
    /// when it moved, so a connection to a primary found gone by another
    /// path (a write + `WAIT` connection) is not used again.
    epoch: AtomicU64,
    /// One discovery at a time.
    discovering: tokio::sync::Mutex<()>,
    /// Bounds each connection to a sentinel of the `+switch-master` subscription.
    connect_timeout: Duration,
    /// The `+switch-master` subscription's task, stopped with the discovery.
    follower: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Drop for Discovery {
    fn drop(&mut self) {
        if let Some(task) = lock(&self.follower).take() {
            task.abort();
        }
    }
}

/// The channel on which sentinels announce a new primary.
const SWITCH_MASTER: &str = "+switch-master";
/// Pause before subscribing again after a sentinel's connection ended.
const RESUBSCRIBE: Duration = Duration::from_millis(500);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update is one assignment: a poisoned lock holds a consistent value.
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery")
            .field("sentinels", &self.sentinels.len())
            .field("master_name", &self.master_name)
            .field("primary", &self.current().as_ref().map(|p| p.addr.clone()))
            .finish_non_exhaustive()
    }
}

impl Discovery {
    pub(crate) fn new(
        sentinels: Vec<redis::Client>,
        master_name: String,
        node: ConnectionInfo,
        config: AsyncConnectionConfig,
        ack_pool: Option<AckPool>,
        connect_timeout: Duration,
    ) -> Self {
        Discovery {
            sentinels,
            master_name,
            node,
            config,
            ack_pool,
            current: Mutex::new(None),
            epoch: AtomicU64::new(0),
            discovering: tokio::sync::Mutex::new(()),
            connect_timeout,
            follower: Mutex::new(None),
        }
    }

    fn current(&self) -> MutexGuard<'_, Option<Arc<Primary>>> {
        lock(&self.current)
    }

    /// Subscribes to `+switch-master` on the first sentinel that takes the
    /// subscription (the next one when its connection ends) in a task of
    /// its own, which holds the discovery weakly and is stopped when it is
    /// dropped. When the sentinels announce a new primary for this master,
    /// the primary found last is forgotten unless it is that one: the next
    /// call finds the new primary. Without it a client would keep a
    /// primary that was paused (or cut off) past a failover and came back:
    /// it answers as a primary until the sentinels demote it, which they
    /// do only seconds after they see it again; meanwhile every write
    /// there fails its replica acknowledgement, and without one is lost.
    pub(crate) fn follow_switches(self: &Arc<Self>) {
        let task = tokio::spawn(follow(
            Arc::downgrade(self),
            self.sentinels.clone(),
            self.master_name.clone(),
            self.connect_timeout,
        ));
        *lock(&self.follower) = Some(task.abort_handle());
    }

    /// The sentinels announced `addr` as the primary: forget the one found
    /// last if it is another.
    fn switched(&self, addr: &str) {
        let mut current = self.current();
        if let Some(old) = current.as_ref().filter(|p| p.addr != addr) {
            tracing::info!(old = %old.addr, new = %addr, "the sentinels announced a new primary");
            *current = None;
            self.epoch.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The primary found last, or a new discovery when there is none.
    pub(crate) async fn primary(&self) -> Result<Arc<Primary>> {
        if let Some(p) = self.current().clone() {
            return Ok(p);
        }
        let _one = self.discovering.lock().await;
        if let Some(p) = self.current().clone() {
            return Ok(p);
        }
        self.discover_locked().await.map(|(p, _)| p)
    }

    /// A write + `WAIT` connection to the primary found last; when it
    /// cannot be had (the primary is gone), the primary is found again,
    /// once. Each checkout is bounded by `budget`.
    pub(crate) async fn ack_connection(&self, budget: Duration) -> Result<(deadpool_redis::Connection, Arc<Primary>)> {
        let mut last = None;
        for _ in 0..2 {
            let primary = self.primary().await?;
            let Some(pool) = &primary.pool else {
                return Err(pool_error("no pool of write + WAIT connections"));
            };
            match tokio::time::timeout(budget, pool.get()).await {
                Ok(Ok(conn)) => return Ok((conn, primary)),
                Ok(Err(e)) => last = Some(pool_error(e)),
                Err(_) => last = Some(pool_error("no dedicated connection within the connect timeout")),
            }
            self.forget(&primary.addr);
        }
        Err(last.unwrap_or_else(|| pool_error("no dedicated connection")))
    }

    /// Asks the sentinels for the primary, connects to it and checks its
    /// role; the primary is kept for [`Discovery::primary`].
    pub(crate) async fn discover(&self) -> Result<(Arc<Primary>, MultiplexedConnection)> {
        let _one = self.discovering.lock().await;
        self.discover_locked().await
    }

    async fn discover_locked(&self) -> Result<(Arc<Primary>, MultiplexedConnection)> {
        let mut failures = Vec::new();
        for (i, sentinel) in self.sentinels.iter().enumerate() {
            let found = match self.ask(sentinel).await {
                Ok(found) => found,
                Err(e) => {
                    failures.push(format!("sentinel {}: {e}", i + 1));
                    continue;
                }
            };
            match self.connect_checked(&found).await {
                Ok((client, conn)) => {
                    let addr = format!("{}:{}", found.0, found.1);
                    let mut current = self.current();
                    let primary = match current.as_ref() {
                        Some(p) if p.addr == addr => p.clone(),
                        _ => {
                            if let Some(old) = current.as_ref() {
                                tracing::info!(old = %old.addr, new = %addr, "Sentinel names a new primary");
                            }
                            let epoch = self.epoch.fetch_add(1, Ordering::Relaxed) + 1;
                            let pool = match &self.ack_pool {
                                Some(spec) => {
                                    Some(spec.build(client.get_connection_info().clone(), self.config.clone())?)
                                }
                                None => None,
                            };
                            Arc::new(Primary {
                                addr,
                                client,
                                pool,
                                epoch,
                            })
                        }
                    };
                    *current = Some(primary.clone());
                    return Ok((primary, conn));
                }
                Err(e) => failures.push(format!("sentinel {} names {}:{}: {e}", i + 1, found.0, found.1)),
            }
        }
        *self.current() = None;
        Err(connect_error(format!(
            "no primary named {} through the sentinels ({})",
            self.master_name,
            failures.join("; ")
        )))
    }

    /// Forgets the primary at `addr` (its connection failed, or it answered
    /// as a replica): the next call finds the primary again.
    pub(crate) fn forget(&self, addr: &str) {
        let mut current = self.current();
        if current.as_ref().is_some_and(|p| p.addr == addr) {
            *current = None;
            self.epoch.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Moves when the primary changes or is forgotten.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Relaxed)
    }

    /// The primary's address as one sentinel names it.
    async fn ask(&self, sentinel: &redis::Client) -> redis::RedisResult<(String, u16)> {
        let mut conn = sentinel
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.master_name)
            .query_async(&mut conn)
            .await?;
        reply.ok_or_else(|| {
            redis::RedisError::from(std::io::Error::other(format!(
                "it monitors no primary named {}",
                self.master_name
            )))
        })
    }

    /// A connection to the node at `host:port`, once `ROLE` says it is a
    /// primary (a sentinel may name a node that was demoted since).
    async fn connect_checked(&self, (host, port): &(String, u16)) -> Result<(redis::Client, MultiplexedConnection)> {
        let addr = match self.node.addr() {
            ConnectionAddr::TcpTls {
                insecure, tls_params, ..
            } => ConnectionAddr::TcpTls {
                host: host.clone(),
                port: *port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host.clone(), *port),
        };
        let client = redis::Client::open(self.node.clone().set_addr(addr)).map_err(connect_error)?;
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await
            .map_err(connect_error)?;
        let role: Value = redis::cmd("ROLE").query_async(&mut conn).await.map_err(connect_error)?;
        match role_name(&role) {
            Some("master") => Ok((client, conn)),
            other => Err(connect_error(format!(
                "ROLE says {}, not master",
                other.unwrap_or("something unexpected")
            ))),
        }
    }
}

/// The `+switch-master` subscription of a [`Discovery`] (see
/// [`Discovery::follow_switches`]): ends when the discovery is gone.
async fn follow(discovery: Weak<Discovery>, sentinels: Vec<redis::Client>, master: String, timeout: Duration) {
    let mut next = 0;
    while discovery.strong_count() > 0 {
        let Some(sentinel) = sentinels.get(next) else { return };
        next = (next + 1) % sentinels.len();
        if let Ok(Ok(pubsub)) = tokio::time::timeout(timeout, sentinel.get_async_pubsub()).await {
            let (mut sink, mut messages) = pubsub.split();
            if let Ok(Ok(())) = tokio::time::timeout(timeout, sink.subscribe(SWITCH_MASTER)).await {
                while let Some(msg) = messages.next().await {
                    let Some(d) = discovery.upgrade() else { return };
                    if let Some(addr) = msg.get_payload::<String>().ok().and_then(|p| switched_to(&p, &master)) {
                        d.switched(&addr);
                    }
                }
            }
        }
        tokio::time::sleep(RESUBSCRIBE).await;
    }
}

/// The new primary's `host:port` in a `+switch-master` payload
/// (`<name> <old-ip> <old-port> <new-ip> <new-port>`) about `master`.
fn switched_to(payload: &str, master: &str) -> Option<String> {
    match payload.split_whitespace().collect::<Vec<_>>().as_slice() {
        [name, _, _, ip, port] if *name == master => Some(format!("{ip}:{port}")),
        _ => None,
    }
}

/// The first element of a `ROLE` reply.
fn role_name(reply: &Value) -> Option<&str> {
    let Value::Array(items) = reply else { return None };
    match items.first()? {
        Value::BulkString(b) => std::str::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_names_the_new_primary_of_its_own_master_only() {
        let payload = "verrou 127.0.0.1 7001 127.0.0.1 7002";
        assert_eq!(switched_to(payload, "verrou").as_deref(), Some("127.0.0.1:7002"));
        assert_eq!(switched_to(payload, "other"), None);
        assert_eq!(switched_to("verrou 127.0.0.1 7001", "verrou"), None);
    }
}
