//! The remote backends reached through the facade's features, as an
//! application uses them: the conformance suite on one real server each.
#![cfg(all(feature = "redis-lua", feature = "tair", feature = "redlock"))]
#![allow(clippy::expect_used, missing_docs)]

use lock_testkit::server::{Instances, RedisServer};
use lock_testkit::{LockSuite, VersionedSuite};
use tokio::sync::OnceCell;

async fn redis_url() -> String {
    static SERVER: OnceCell<RedisServer> = OnceCell::const_new();
    SERVER
        .get_or_init(|| async { RedisServer::start().await.expect("start redis-server") })
        .await
        .url()
}

async fn tair_url() -> String {
    static SERVER: OnceCell<RedisServer> = OnceCell::const_new();
    SERVER
        .get_or_init(|| async {
            RedisServer::builder()
                .tair_module()
                .start()
                .await
                .expect("start redis-server with the tair module")
        })
        .await
        .url()
}

async fn redlock_urls() -> Vec<String> {
    static SERVERS: OnceCell<Instances> = OnceCell::const_new();
    SERVERS
        .get_or_init(|| async {
            Instances::start(3, RedisServer::builder())
                .await
                .expect("start 3 redis-servers")
        })
        .await
        .urls()
}

async fn redis_lua(url: String) -> verrou::redis_lua::RedisLuaBackend {
    verrou::redis_lua::RedisLuaBackend::connect(&url)
        .await
        .expect("connect")
}

async fn tair(url: String) -> verrou::tair::TairBackend {
    verrou::tair::TairBackend::connect(&url).await.expect("connect")
}

async fn redlock(urls: Vec<String>) -> verrou::redlock::Redlock {
    let mut nodes: Vec<std::sync::Arc<dyn verrou::LockBackend>> = Vec::new();
    for url in urls {
        nodes.push(std::sync::Arc::new(redis_lua(url).await));
    }
    verrou::redlock::Redlock::new(nodes).expect("redlock")
}

mod redis_lua_locks {
    use super::*;
    async fn suite() -> LockSuite {
        let url = redis_url().await;
        LockSuite::new(move || redis_lua(url.clone())).reserved_prefixes([verrou::redis_lua::RESERVED_KEY_PREFIX])
    }
    lock_testkit::lock_conformance!(real, suite());
}

mod redis_lua_versioned {
    use super::*;
    async fn suite() -> VersionedSuite {
        let url = redis_url().await;
        VersionedSuite::new(move || redis_lua(url.clone()))
    }
    lock_testkit::versioned_conformance!(real, suite());
}

mod tair_locks {
    use super::*;
    async fn suite() -> LockSuite {
        let url = tair_url().await;
        LockSuite::new(move || tair(url.clone()))
            .reserved_prefixes([verrou::tair::RESERVED_KEY_PREFIX, verrou::tair::DEFAULT_FENCE_PREFIX])
    }
    lock_testkit::lock_conformance!(real, suite());
}

mod tair_versioned {
    use super::*;
    async fn suite() -> VersionedSuite {
        let url = tair_url().await;
        VersionedSuite::new(move || tair(url.clone()))
    }
    lock_testkit::versioned_conformance!(real, suite());
}

mod redlock_locks {
    use super::*;
    async fn suite() -> LockSuite {
        let urls = redlock_urls().await;
        LockSuite::new(move || redlock(urls.clone())).reserved_prefixes([verrou::redis_lua::RESERVED_KEY_PREFIX])
    }
    lock_testkit::lock_conformance!(real, suite());
}
