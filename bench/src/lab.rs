//! The servers of one run and the backends built on them.

use std::sync::Arc;

use lock_core::{LockBackend, VersionedStore};

use lock_core::raw::{ElectionBackend, MultiLockBackend, RwLockBackend, SemaphoreBackend};
use lock_memory::MemoryBackend;
use lock_redis_lua::{RedisLuaBackend, RedisLuaBuilder};
use lock_redlock::Redlock;
use lock_tair::{TairBackend, TairBuilder};
use lock_testkit::server::{Instances, RedisServer, RespValue};

use crate::BoxResult;
use crate::measure::Probe;
use crate::results::Kind;

/// The verrou backends the benchmark knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `lock-memory`, in process.
    Memory,
    /// `lock-redis-lua` on the main server, defaults (release notifications
    /// by pub/sub on).
    RedisLua,
    /// `lock-redis-lua` with release notifications off.
    RedisLuaQuiet,
    /// `lock-tair` on the main server (Tair module loaded), defaults
    /// (release notifications on).
    Tair,
    /// `lock-tair` with release notifications off (`CAD` releases).
    TairQuiet,
    /// `lock-redlock` over five Lua backends on five servers.
    Redlock,
    /// `lock-postgres` on the PostgreSQL server, defaults (release
    /// notifications on: `LISTEN`/`NOTIFY` when someone waits).
    Postgres,
    /// `lock-postgres` with release notifications off.
    PostgresQuiet,
    /// `lock-postgres`'s advisory mode (scenario 1 only: not in
    /// [`Lab::available`]).
    PostgresAdvisory,
    /// `lock-etcd` on one etcd member, defaults.
    Etcd,
    /// `lock-nats` on one nats-server (JetStream, `sync_interval: always`), defaults.
    Nats,
}

impl Backend {
    /// Row label.
    pub fn label(self) -> &'static str {
        match self {
            Backend::Memory => "verrou memory",
            Backend::RedisLua => "verrou redis-lua",
            Backend::RedisLuaQuiet => "verrou redis-lua, notifications off",
            Backend::Tair => "verrou tair",
            Backend::TairQuiet => "verrou tair, notifications off",
            Backend::Redlock => "verrou redlock ×5 (redis-lua)",
            Backend::Postgres => crate::pg::VERROU_PG,
            Backend::PostgresQuiet => crate::pg::VERROU_PG_QUIET,
            Backend::PostgresAdvisory => crate::pg::VERROU_PG_ADVISORY,
            Backend::Etcd => crate::etcd::VERROU_ETCD,
            Backend::Nats => crate::nats::VERROU_NATS,
        }
    }

    /// A default configuration (targets apply) or a variant (diagnostic).
    pub fn kind(self) -> Kind {
        match self {
            Backend::RedisLuaQuiet | Backend::TairQuiet | Backend::PostgresQuiet => Kind::Reference,
            _ => Kind::Verrou,
        }
    }

    /// Short key-safe name.
    pub fn slug(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::RedisLua => "lua",
            Backend::RedisLuaQuiet => "lua-quiet",
            Backend::Tair => "tair",
            Backend::TairQuiet => "tair-quiet",
            Backend::Redlock => "redlock",
            Backend::Postgres => "pg",
            Backend::PostgresQuiet => "pg-quiet",
            Backend::PostgresAdvisory => "pg-advisory",
            Backend::Etcd => "etcd",
            Backend::Nats => "nats",
        }
    }
}

/// A backend of every lock kind (a backend whose flags refuse a kind still
/// implements its trait, answering `Unsupported`).
pub trait AllKinds: SemaphoreBackend + RwLockBackend + MultiLockBackend + ElectionBackend {}

impl<B: SemaphoreBackend + RwLockBackend + MultiLockBackend + ElectionBackend> AllKinds for B {}

/// Servers: one main server with the Tair module (every single-instance row
/// runs against it, rslock and the raw clients included), and five plain
/// instances for Redlock, started on first use.
pub struct Lab {
    /// The main server.
    pub main: RedisServer,
    redlock: Option<Instances>,
    memory: MemoryBackend,
    /// The PostgreSQL server, started on first use.
    pub pg: crate::pg::PgLab,
    /// The etcd member, started on first use.
    pub etcd: crate::etcd::EtcdLab,
    /// The NATS server, started on first use.
    pub nats: crate::nats::NatsLab,
    /// The Redis Sentinel group, started on first use.
    pub sentinel: crate::sentinel::SentinelLab,
}

/// Redlock's instance count.
pub const REDLOCK_N: usize = 5;

impl Lab {
    /// Start the main server (persistence off, Tair module loaded).
    pub async fn start() -> BoxResult<Self> {
        // From a clean clone the module is not built yet: build it.
        lock_testkit::server::build_tair_module_if_missing()?;
        let main = RedisServer::builder().tair_module().start().await?;
        Ok(Lab {
            main,
            redlock: None,
            memory: MemoryBackend::new(),
            pg: crate::pg::PgLab::default(),
            etcd: crate::etcd::EtcdLab::default(),
            nats: crate::nats::NatsLab::default(),
            sentinel: crate::sentinel::SentinelLab::default(),
        })
    }

    /// The main server's URL.
    pub fn url(&self) -> String {
        self.main.url()
    }

    /// The five Redlock instances, started on first call.
    pub async fn redlock_instances(&mut self) -> BoxResult<&Instances> {
        if self.redlock.is_none() {
            self.redlock = Some(Instances::start(REDLOCK_N, RedisServer::builder()).await?);
        }
        self.redlock.as_ref().ok_or_else(|| "redlock instances missing".into())
    }

    /// A Lua backend on the first Redlock instance (Redlock's single-instance baseline).
    pub async fn redlock_single(&mut self) -> BoxResult<Arc<dyn LockBackend>> {
        let url = self
            .redlock_instances()
            .await?
            .urls()
            .first()
            .cloned()
            .ok_or("no instance")?;
        Ok(Arc::new(RedisLuaBackend::connect(&url).await?))
    }

    /// Backends this build of the benchmark can run.
    pub fn available() -> Vec<Backend> {
        vec![
            Backend::Memory,
            Backend::RedisLua,
            Backend::RedisLuaQuiet,
            Backend::Tair,
            Backend::TairQuiet,
            Backend::Redlock,
            Backend::Postgres,
            Backend::PostgresQuiet,
            Backend::Etcd,
            Backend::Nats,
        ]
    }

    /// A new backend instance with its own connections (memory: a handle on
    /// the one shared in-process state).
    pub async fn lock_backend(&mut self, backend: Backend) -> BoxResult<Arc<dyn LockBackend>> {
        match backend {
            Backend::Memory => Ok(Arc::new(self.memory.clone())),
            Backend::RedisLua => Ok(Arc::new(RedisLuaBackend::connect(&self.url()).await?)),
            Backend::RedisLuaQuiet => Ok(Arc::new(
                RedisLuaBuilder::url(self.url())
                    .release_notifications(false)
                    .build()
                    .await?,
            )),
            Backend::Tair => Ok(Arc::new(TairBackend::connect(&self.url()).await?)),
            Backend::TairQuiet => Ok(Arc::new(
                TairBuilder::url(self.url())
                    .release_notifications(false)
                    .build()
                    .await?,
            )),
            Backend::Redlock => {
                let urls = self.redlock_instances().await?.urls();
                let mut nodes: Vec<Arc<dyn LockBackend>> = Vec::with_capacity(urls.len());
                for url in urls {
                    nodes.push(Arc::new(RedisLuaBackend::connect(&url).await?));
                }
                Ok(Arc::new(Redlock::new(nodes)?))
            }
            Backend::Postgres => Ok(Arc::new(self.pg.backend(true).await?)),
            Backend::PostgresQuiet => Ok(Arc::new(self.pg.backend(false).await?)),
            Backend::PostgresAdvisory => Ok(Arc::new(self.pg.advisory().await?)),
            Backend::Etcd => Ok(Arc::new(self.etcd.backend().await?)),
            Backend::Nats => Ok(Arc::new(self.nats.backend().await?)),
        }
    }

    /// A new backend instance for the lock kinds (scenario 8); the Lua
    /// backend without notifications is not one of them.
    pub async fn kinds_backend(&mut self, backend: Backend) -> BoxResult<Arc<dyn AllKinds>> {
        match backend {
            Backend::Memory => Ok(Arc::new(self.memory.clone())),
            Backend::RedisLua => Ok(Arc::new(RedisLuaBackend::connect(&self.url()).await?)),
            Backend::Tair => Ok(Arc::new(TairBackend::connect(&self.url()).await?)),
            Backend::Redlock => {
                let urls = self.redlock_instances().await?.urls();
                let mut nodes: Vec<Arc<dyn LockBackend>> = Vec::with_capacity(urls.len());
                for url in urls {
                    nodes.push(Arc::new(RedisLuaBackend::connect(&url).await?));
                }
                Ok(Arc::new(Redlock::new(nodes)?))
            }
            Backend::Postgres => Ok(Arc::new(self.pg.backend(true).await?)),
            Backend::RedisLuaQuiet
            | Backend::TairQuiet
            | Backend::PostgresQuiet
            | Backend::PostgresAdvisory
            | Backend::Etcd
            | Backend::Nats => Err("the lock kinds run on the default Lua, Tair and postgres backends only".into()),
        }
    }

    /// A new versioned store, where the backend has one.
    pub async fn store(&mut self, backend: Backend) -> BoxResult<Option<Arc<dyn VersionedStore>>> {
        match backend {
            Backend::Memory => Ok(Some(Arc::new(self.memory.clone()))),
            Backend::RedisLua => Ok(Some(Arc::new(RedisLuaBackend::connect(&self.url()).await?))),
            Backend::Tair => Ok(Some(Arc::new(TairBackend::connect(&self.url()).await?))),
            _ => Ok(None),
        }
    }

    /// A probe over the servers `backend` talks to.
    pub async fn probe(&mut self, backend: Backend) -> BoxResult<Probe> {
        match backend {
            // PostgreSQL's statistics are flushed about once a second: too
            // coarse for a window; its rows count client CPU only.
            // etcd's rows, likewise (its metrics are not read).
            Backend::Memory
            | Backend::Postgres
            | Backend::PostgresQuiet
            | Backend::PostgresAdvisory
            | Backend::Etcd
            | Backend::Nats => Ok(Probe::none()),
            Backend::RedisLua | Backend::RedisLuaQuiet | Backend::Tair | Backend::TairQuiet => {
                Probe::connect(&[&self.main]).await
            }
            Backend::Redlock => {
                let instances = self.redlock_instances().await?;
                Probe::connect(&instances.servers().iter().collect::<Vec<_>>()).await
            }
        }
    }

    /// A probe over the main server.
    pub async fn main_probe(&self) -> BoxResult<Probe> {
        Probe::connect(&[&self.main]).await
    }

    /// Empty every server, so no row sees another's keys.
    pub async fn flush(&self) -> BoxResult<()> {
        admin(&self.main, &["FLUSHALL"]).await?;
        if let Some(instances) = &self.redlock {
            for s in instances.servers() {
                admin(s, &["FLUSHALL"]).await?;
            }
        }
        self.sentinel.flush().await?;
        self.pg.end_peer_sessions().await
    }
}

/// Run an administrative command; an error reply is an error.
pub async fn admin(server: &RedisServer, args: &[&str]) -> BoxResult<RespValue> {
    match server.cmd(args).await? {
        RespValue::Error(e) => Err(format!("{}: {e}", args.join(" ")).into()),
        v => Ok(v),
    }
}
