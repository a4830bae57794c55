//! The dispatch table: each scheme, the Cargo feature that serves it, and
//! that backend crate's connector when the feature is compiled in. Adding a
//! backend adds its rows here and its feature in Cargo.toml; its URL
//! grammar stays in its own crate.

use std::sync::LazyLock;

use lock_core::raw::{SchemeEntry, SchemeTable};

/// `Some(connector)` when `$feature` is compiled in.
macro_rules! compiled {
    ($feature:literal, $connector:expr) => {{
        #[cfg(feature = $feature)]
        let connector: Option<&'static dyn lock_core::raw::Connector> = Some(&$connector);
        #[cfg(not(feature = $feature))]
        let connector: Option<&'static dyn lock_core::raw::Connector> = None;
        connector
    }};
}

fn entry(
    scheme: &'static str,
    feature: &'static str,
    connector: Option<&'static dyn lock_core::raw::Connector>,
) -> SchemeEntry {
    SchemeEntry {
        scheme,
        feature,
        connector,
    }
}

pub(super) static TABLE: LazyLock<SchemeTable> = LazyLock::new(|| {
    let memory = compiled!("memory", lock_memory::MemoryConnector);
    let lua = compiled!("redis-lua", lock_redis_lua::RedisLuaConnector);
    let lua_tls = compiled!("redis-lua-tls", lock_redis_lua::RedisLuaConnector);
    let tair = compiled!("tair", lock_tair::TairConnector);
    let tair_tls = compiled!("tair-tls", lock_tair::TairConnector);
    let redlock = compiled!("redlock", lock_redlock::RedlockConnector);
    let postgres = compiled!("postgres", lock_postgres::PostgresConnector);
    let etcd = compiled!("etcd", lock_etcd::EtcdConnector);
    let etcd_tls = compiled!("etcd-tls", lock_etcd::EtcdConnector);
    let nats = compiled!("nats", lock_nats::NatsConnector);
    SchemeTable::new(
        "verrou",
        vec![
            entry("memory", "memory", memory),
            entry("redis", "redis-lua", lua),
            entry("rediss", "redis-lua-tls", lua_tls),
            entry("redis+cluster", "redis-lua", lua),
            entry("rediss+cluster", "redis-lua-tls", lua_tls),
            entry("redis+sentinel", "redis-lua", lua),
            entry("rediss+sentinel", "redis-lua-tls", lua_tls),
            entry("tair", "tair", tair),
            entry("tairs", "tair-tls", tair_tls),
            entry("tair+cluster", "tair", tair),
            entry("tairs+cluster", "tair-tls", tair_tls),
            entry("tair+sentinel", "tair", tair),
            entry("tairs+sentinel", "tair-tls", tair_tls),
            entry("redlock", "redlock", redlock),
            entry("postgres", "postgres", postgres),
            entry("postgresql", "postgres", postgres),
            entry("etcd", "etcd", etcd),
            entry("etcds", "etcd-tls", etcd_tls),
            entry("nats", "nats", nats),
            entry("tls", "nats", nats),
        ],
    )
});

/// Every scheme [`crate::connect()`] knows, as `a://, b://, …` (whether
/// or not its feature is compiled in).
pub fn schemes() -> String {
    TABLE.schemes()
}
