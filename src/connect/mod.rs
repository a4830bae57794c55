//! One URL to a connected backend: [`connect`]. Each backend crate reads
//! its own URLs (its config type documents the grammar and parameters);
//! this module only maps a scheme to the crate compiled in.
//!
//! | URL | backend | config | feature |
//! |---|---|---|---|
//! | `memory://` | [`crate::memory`] (this process only) | `MemoryConfig` | `memory` |
//! | `redis://[user:pass@]host[:port][/db]`, `rediss://…`, `redis+cluster://h1,h2…`, `rediss+cluster://…` | [`crate::redis_lua`] | `RedisLuaConfig` | `redis-lua`, `redis-lua-tls` |
//! | `tair://…`, `tairs://…`, `tair+cluster://…`, `tairs+cluster://…` | [`crate::tair`] | `TairConfig` | `tair`, `tair-tls` |
//! | `redlock://?…` (nodes as other backends' URLs) | [`crate::redlock`] over any of the above | `RedlockConfig` | `redlock` |
//! | `postgres://user[:pass]@host[:port]/db`, `postgresql://…` | [`crate::postgres`] | `PostgresConfig` | `postgres`, `postgres-tls` |
//! | `etcd://[user:pass@]h1[:2379],h2…`, `etcds://…` | [`crate::etcd`] | `EtcdConfig` | `etcd`, `etcd-tls` |
//! | `nats://[user:pass@]h1[:4222],h2…`, `tls://…` (TLS) | [`crate::nats`] | `NatsConfig` | `nats` |
//!
//! Every unknown parameter, malformed host, or scheme whose feature is off is
//! an error saying what to write instead; passwords appear in no message and
//! no `Debug` output. [`check_url`] runs the same checks as [`connect`],
//! short of connecting.

mod backend;
#[cfg(feature = "serde")]
mod config;
mod dispatch;
mod table;

pub use backend::Backend;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use config::ConnectConfig;
pub use dispatch::{check_url, connect};
pub use table::schemes;
