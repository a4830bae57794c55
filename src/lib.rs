#![doc = include_str!("../README.md")]

pub use lock_core::*;

pub mod connect;
#[cfg(feature = "serde")]
pub use connect::ConnectConfig;
pub use connect::{Backend, connect};

/// The in-process backend (feature `memory`).
#[cfg(feature = "memory")]
pub use lock_memory as memory;

/// The Lua-on-Redis/Valkey backend (feature `redis-lua`).
#[cfg(feature = "redis-lua")]
pub use lock_redis_lua as redis_lua;

/// The Tair backend: native CAD/CAS and exString (feature `tair`).
#[cfg(feature = "tair")]
pub use lock_tair as tair;

/// Redlock quorum over N independent backends (feature `redlock`).
#[cfg(feature = "redlock")]
pub use lock_redlock as redlock;

/// The etcd backend: linearizable locks on a Raft cluster (feature `etcd`).
#[cfg(feature = "etcd")]
pub use lock_etcd as etcd;
/// The PostgreSQL backend: leases in a table (feature `postgres`).
#[cfg(feature = "postgres")]
pub use lock_postgres as postgres;
