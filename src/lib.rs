#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// The tour past the first example: what every lock promises, the API,
/// `connect` URLs and parameters, fair mode, every lock kind,
/// observability and the defaults.
#[doc = include_str!("../docs/guide.md")]
pub mod guide {}

// What an application uses, at the root; what a backend author needs, under
// `raw` only. One path per item.
pub use lock_core::{
    AcquireOutcome, Backoff, BoxError, Capabilities, CasOutcome, CreateOutcome, DeleteOutcome, ElectionManager, Error,
    Expiry, Fairness, FencingToken, Inspection, KeySet, KindGuard, Lead, LeaderInfo, Leadership, Lease, LeaseHandle,
    LockBackend, LockGuard, LockInfo, LockManager, LockOptions, LockToken, LossReason, MultiLockGuard,
    MultiLockManager, NodeOutcome, NodeReports, NotHeldReason, OnShortfall, Permit, Permits, PermitsInfo,
    RefusalReason, ReleaseOutcome, RenewOutcome, Renewal, ReplicaAck, Replication, Result, RwHold, RwInfo, RwLockGuard,
    RwLockManager, RwMode, Semaphore, SemaphoreManager, UpdateOptions, Versioned, VersionedStore, VersionedStoreExt,
};
pub use lock_core::{layers, observe, raw, wait_for_background_releases};

pub mod connect;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use connect::ConnectConfig;
pub use connect::{Backend, connect};

/// The in-process backend (feature `memory`).
#[cfg(feature = "memory")]
#[cfg_attr(docsrs, doc(cfg(feature = "memory")))]
pub use lock_memory as memory;

/// The Lua-on-Redis/Valkey backend (feature `redis-lua`).
#[cfg(feature = "redis-lua")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis-lua")))]
pub use lock_redis_lua as redis_lua;

/// The Tair backend: native CAD/CAS and exString (feature `tair`).
#[cfg(feature = "tair")]
#[cfg_attr(docsrs, doc(cfg(feature = "tair")))]
pub use lock_tair as tair;

/// Redlock quorum over N independent backends (feature `redlock`).
#[cfg(feature = "redlock")]
#[cfg_attr(docsrs, doc(cfg(feature = "redlock")))]
pub use lock_redlock as redlock;

/// The etcd backend: linearizable locks on a Raft cluster (feature `etcd`).
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub use lock_etcd as etcd;
/// The NATS backend: a JetStream key-value bucket (feature `nats`).
#[cfg(feature = "nats")]
#[cfg_attr(docsrs, doc(cfg(feature = "nats")))]
pub use lock_nats as nats;
/// The PostgreSQL backend: leases in a table (feature `postgres`).
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use lock_postgres as postgres;
