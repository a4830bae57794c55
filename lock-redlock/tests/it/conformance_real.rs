//! The lock conformance suite against Redlock over real `redis-server`
//! processes: 5 instances with the Lua backend, and 3 instances with the
//! Tair module and the Tair backend. The instances of each topology are
//! shared by every case of this file (keys are namespaced per case); they are
//! plain child processes, killed by the kernel when the test process exits.

#![allow(clippy::expect_used)] // test set-up

use std::sync::Arc;
use std::time::Duration;

use lock_core::LockBackend;
use lock_memory::MemoryBackend;
use lock_redis_lua::RedisLuaBuilder;
use lock_redlock::{Redlock, RedlockOptions};
use lock_tair::TairBuilder;
use lock_testkit::LockSuite;
use lock_testkit::server::{Instances, RedisServer};
use tokio::sync::OnceCell;

/// Generous for a loaded 2-core machine, still a quarter of the suite's
/// 400 ms TTL.
const NODE_TIMEOUT: Duration = Duration::from_millis(100);

fn options() -> RedlockOptions {
    RedlockOptions::default().node_timeout(NODE_TIMEOUT)
}

mod lua_five_nodes {
    use super::*;

    pub(super) async fn urls() -> Vec<String> {
        static SERVERS: OnceCell<Instances> = OnceCell::const_new();
        SERVERS
            .get_or_init(|| async {
                Instances::start(5, RedisServer::builder())
                    .await
                    .expect("start 5 redis-servers")
            })
            .await
            .urls()
    }

    async fn client(urls: Vec<String>) -> Redlock {
        let mut nodes: Vec<Arc<dyn LockBackend>> = Vec::new();
        for url in urls {
            let node = RedisLuaBuilder::url(url).build().await.expect("connect");
            nodes.push(Arc::new(node));
        }
        Redlock::with_options(nodes, options()).expect("valid redlock")
    }

    async fn suite() -> LockSuite {
        let urls = urls().await;
        LockSuite::new(move || client(urls.clone())).reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX])
    }

    lock_testkit::lock_conformance!(real, suite());
}

mod tair_three_nodes {
    use super::*;

    pub(super) async fn urls() -> Vec<String> {
        static SERVERS: OnceCell<Instances> = OnceCell::const_new();
        SERVERS
            .get_or_init(|| async {
                Instances::start(3, RedisServer::builder().tair_module())
                    .await
                    .expect("start 3 redis-servers with the Tair module")
            })
            .await
            .urls()
    }

    async fn client(urls: Vec<String>) -> Redlock {
        let mut nodes: Vec<Arc<dyn LockBackend>> = Vec::new();
        for url in urls {
            let node = TairBuilder::url(url).build().await.expect("connect");
            nodes.push(Arc::new(node));
        }
        Redlock::with_options(nodes, options()).expect("valid redlock")
    }

    async fn suite() -> LockSuite {
        let urls = urls().await;
        LockSuite::new(move || client(urls.clone()))
            .reserved_prefixes(["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX])
    }

    lock_testkit::lock_conformance!(real, suite());
}

mod mixed_three_nodes {
    use super::*;

    async fn client(lua: String, tair: String, memory: MemoryBackend) -> Redlock {
        let nodes: Vec<Arc<dyn LockBackend>> = vec![
            Arc::new(RedisLuaBuilder::url(lua).build().await.expect("connect")),
            Arc::new(TairBuilder::url(tair).build().await.expect("connect")),
            Arc::new(memory),
        ];
        Redlock::with_options(nodes, options()).expect("valid redlock")
    }

    async fn suite() -> LockSuite {
        let lua = lua_five_nodes::urls().await.swap_remove(0);
        let tair = tair_three_nodes::urls().await.swap_remove(0);
        let memory = MemoryBackend::new();
        LockSuite::new(move || client(lua.clone(), tair.clone(), memory.clone()))
    }

    lock_testkit::lock_conformance!(real, suite());
}
