//! The backends a client builds for itself: its own connections, as a
//! separate process would have.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockBackend, ReplicaAck, VersionedStore};
use lock_memory::MemoryBackend;
use lock_redis_lua::{RedisLuaBackend, RedisLuaBuilder};
use lock_redlock::{LazyNode, Redlock, RedlockOptions};
use lock_tair::{TairBackend, TairBuilder};

/// How one client reaches its backend.
#[derive(Clone)]
pub enum Spec {
    /// The shared in-process backend (clones share state).
    Memory(MemoryBackend),
    /// Lua scripts on Redis at this URL, fencing on.
    Lua {
        /// Server (or proxy) URL, or a `redis+sentinel://` one.
        url: String,
        /// Replica acknowledgement.
        ack: Option<ReplicaAck>,
    },
    /// Tair commands at this URL, fencing on.
    Tair {
        /// Server (or proxy) URL, or a `tair+sentinel://` one.
        url: String,
        /// Replica acknowledgement.
        ack: Option<ReplicaAck>,
    },
    /// Redlock over Lua backends at these URLs (no fencing: Redlock has none).
    Redlock {
        /// One URL per node.
        urls: Vec<String>,
    },
    /// PostgreSQL at this URL (fencing always on).
    Postgres {
        /// Server (or proxy) URL.
        url: String,
        /// Locks in the advisory mode (fencing on); the counter still on
        /// the lease mode's versioned store.
        advisory: bool,
    },
    /// Another spec, built inside a network-namespace host.
    Net(Box<crate::netrows::NetSpec>),
    /// etcd members (`host:port`, comma-separated; fencing always on).
    Etcd {
        /// Endpoints.
        endpoints: String,
    },
    /// A NATS URL (`nats://h1,h2,h3?bucket=…&replicas=3`; fencing always on).
    Nats {
        /// URL.
        url: String,
    },
}

/// A client's lock backend and, where the backend has one, its versioned store.
pub struct Built {
    /// For the lock manager.
    pub lock: Arc<dyn LockBackend>,
    /// For the counter increments.
    pub store: Option<Arc<dyn VersionedStore>>,
}

/// Build the backend of `spec`; `timeout` bounds each reply (a timed-out
/// write is reported as outcome unknown by the backends).
///
/// # Errors
/// The backend's connect errors.
pub async fn build(spec: &Spec, timeout: Duration) -> lock_core::Result<Built> {
    Ok(match spec {
        Spec::Net(net) => return crate::netrows::build_in(net, timeout).await,
        Spec::Memory(m) => {
            let b = Arc::new(m.clone());
            Built {
                lock: b.clone(),
                store: Some(b),
            }
        }
        Spec::Lua { url, ack } => {
            // A `redis+sentinel://` URL goes through the URL grammar.
            let builder = if url.contains("+sentinel://") {
                RedisLuaBackend::builder(url)?
            } else {
                RedisLuaBuilder::url(url.clone())
            };
            let mut builder = builder.fencing(true).connect_timeout(timeout).response_timeout(timeout);
            if let Some(ack) = ack {
                builder = builder.replica_ack(*ack);
            }
            let b = Arc::new(builder.build().await?);
            Built {
                lock: b.clone(),
                store: Some(b),
            }
        }
        Spec::Tair { url, ack } => {
            let builder = if url.contains("+sentinel://") {
                TairBackend::builder(url)?
            } else {
                TairBuilder::url(url.clone())
            };
            let mut builder = builder.fencing(true).connect_timeout(timeout).response_timeout(timeout);
            if let Some(ack) = ack {
                builder = builder.replica_ack(*ack);
            }
            let b = Arc::new(builder.build().await?);
            Built {
                lock: b.clone(),
                store: Some(b),
            }
        }
        Spec::Postgres { url, advisory } => {
            let b = lock_postgres::PostgresBackend::builder(url)?
                .connect_timeout(timeout)
                .response_timeout(timeout)
                .build()
                .await?;
            let b = Arc::new(b);
            let lock: Arc<dyn LockBackend> = if *advisory {
                Arc::new(
                    lock_postgres::AdvisoryBackend::builder(url)?
                        .fencing(true)
                        .connect_timeout(timeout)
                        .response_timeout(timeout)
                        .build()
                        .await?,
                )
            } else {
                b.clone()
            };
            Built { lock, store: Some(b) }
        }
        Spec::Etcd { endpoints } => {
            let b = lock_etcd::EtcdBuilder::new(endpoints.split(',').map(str::to_owned))
                .connect_timeout(timeout)
                .response_timeout(timeout)
                .build()
                .await?;
            let b = Arc::new(b);
            Built {
                lock: b.clone(),
                store: Some(b),
            }
        }
        Spec::Nats { url } => {
            let b = lock_nats::NatsBackend::builder(url)?
                .connect_timeout(timeout)
                .response_timeout(timeout)
                .build()
                .await?;
            let b = Arc::new(b);
            Built {
                lock: b.clone(),
                store: Some(b),
            }
        }
        Spec::Redlock { urls } => {
            // Nodes down when the client starts connect in the background.
            let mut nodes = Vec::with_capacity(urls.len());
            for url in urls {
                let url = url.clone();
                nodes.push(LazyNode::spawn(url.clone(), move || {
                    RedisLuaBuilder::url(url.clone())
                        .connect_timeout(timeout)
                        .response_timeout(timeout)
                        .build()
                })?);
            }
            Built {
                lock: Arc::new(Redlock::connect(nodes, RedlockOptions::default()).await?),
                store: None,
            }
        }
    })
}
