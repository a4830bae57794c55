//! Real `redis-server` processes for tests.
//!
//! - [`RedisServer`]: one server on a free 127.0.0.1 port, in its own
//!   temporary directory, persistence off unless asked; killed (SIGKILL),
//!   reaped and cleaned up on drop, also when a test panics. Faults: kill,
//!   pause/resume (SIGSTOP/SIGCONT), restart with or without its data.
//!   A server never dropped (a `static`, `std::process::exit`) is killed
//!   and its directory removed at process exit; the directories of a
//!   killed process are removed by the next process's first server (each
//!   directory's name carries its owner's pid and start time).
//! - [`ReplicatedPair`], [`Instances`], [`RedisCluster`]: topologies;
//!   [`SentinelGroup`]: a primary, two replicas and three sentinels.
//! - [`TcpProxy`]: latency, blackhole and connection cuts in front of a
//!   server.
//! - [`PostgresServer`] (feature `postgres`): `initdb` + `postgres` in a
//!   temporary directory, as the unprivileged [`PG_OS_USER`] when run as
//!   root; kill, pause, restart; [`PgBouncer`] in front, standbys.
//! - [`NatsCluster`]: `nats-server` with JetStream, one server or a three-node
//!   cluster (`sync_interval: always`); kill, pause, restart.
//! - [`RespClient`] / [`RespValue`]: a tiny RESP client for administration
//!   and byte-exact reply checks; [`Monitor`]: the commands clients send.
//!
//! The server binary is `$VERROU_REDIS_SERVER` or `redis-server` on `PATH`
//! (any Redis-compatible server works, Valkey included); the Tair module is
//! `$VERROU_TAIR_MODULE` or this workspace's
//! `target/release/libtair_module.so`. A missing binary or module is an
//! error saying what to install or build, never a skip.
//!
//! ```no_run
//! # async fn demo() -> Result<(), lock_testkit::server::HarnessError> {
//! use lock_testkit::server::{RedisServer, TcpProxy};
//! use std::time::Duration;
//!
//! let server = RedisServer::builder().persistence(true).start().await?;
//! server.cmd(&["SET", "k", "v"]).await?;
//! server.restart_keeping_data().await?;
//! assert_eq!(server.cmd(&["GET", "k"]).await?.as_str(), Some("v"));
//!
//! let proxy = TcpProxy::start(server.addr()).await?;
//! proxy.set_latency(Duration::from_millis(50));
//! let mut client = lock_testkit::server::RespClient::connect(proxy.addr()).await?;
//! assert_eq!(client.cmd_raw(&["GET", "missing"]).await?, b"$-1\r\n");
//! # Ok(())
//! # }
//! ```
//!
//! Use real time with these (never tokio's paused clock): the servers run in
//! real time.

mod error;
mod etcd;
mod monitor;
mod nats;
mod netns;
mod netns_cluster;
mod netns_host;
mod netns_redis;
mod netns_sentinel;
mod paths;
mod peer_proxy;
#[cfg(feature = "postgres")]
mod pg_paths;
#[cfg(feature = "postgres")]
mod pg_process;
#[cfg(feature = "postgres")]
mod pg_standby;
#[cfg(feature = "postgres")]
mod pgbouncer;
mod ports;
#[cfg(feature = "postgres")]
mod postgres;
mod process;
mod proxy;
mod redis_builder;
mod resp;
mod resp_client;
mod scratch;
mod sentinel;
mod spawn;
mod text;
mod topology;

pub use error::{HarnessError, HarnessResult};
pub use etcd::{ETCD_BIN_ENV, ETCD_START_TIMEOUT, EtcdCluster, MemberCounts, etcd_binary};
pub use monitor::Monitor;
pub use nats::{
    NATS_MIN_VERSION, NATS_SERVER_ENV, NATS_START_TIMEOUT, NET_NATS_PORT, NatsCluster, NetNatsServer, SyncInterval,
    nats_server_binary,
};
pub use netns::{NET_REDIS_PORT, NETNS_PREFIX, Network, clean_stale_namespaces, netem_available, netns_prerequisites};
pub use netns_cluster::NetCluster;
pub use netns_host::NetHost;
pub use netns_redis::{NetRedisServer, NetRedisServerBuilder};
pub use netns_sentinel::NetSentinelGroup;
pub use paths::{
    REDIS_CLI_ENV, REDIS_SENTINEL_ENV, REDIS_SERVER_ENV, TAIR_MODULE_ENV, build_tair_module_if_missing,
    redis_cli_binary, redis_sentinel_binary, redis_server_binary, tair_module_path,
};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use pg_paths::{PG_BIN_ENV, PG_OS_USER, PGBOUNCER_ENV, pg_bin_dir, pgbouncer_binary};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use pg_standby::PostgresPair;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use pgbouncer::{PGBOUNCER_POOL_SIZE, PgBouncer};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::{PG_LOG_FILE, PG_START_TIMEOUT, PG_USER, PostgresServer, PostgresServerBuilder};
pub use process::{DEFAULT_START_TIMEOUT, LOG_FILE, NODES_FILE, RedisServer, SENTINEL_CONFIG_FILE};
pub use proxy::TcpProxy;
pub use redis_builder::RedisServerBuilder;
pub use resp::{RespValue, encode_command, frame_len, parse_reply};
pub use resp_client::{DEFAULT_TIMEOUT, RespClient};
pub use sentinel::{
    SENTINEL_DOWN_AFTER, SENTINEL_FAILOVER_TIMEOUT, SENTINEL_MASTER_NAME, SENTINEL_QUORUM, SentinelGroup,
};
pub use topology::{CONVERGE_TIMEOUT, Instances, RedisCluster, ReplicatedPair};
