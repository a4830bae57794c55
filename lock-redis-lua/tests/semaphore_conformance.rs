//! The semaphore conformance suite on real servers: one redis-server (plain,
//! and with fencing tokens) and a 3-master cluster (fencing on; a
//! semaphore's keys share its name's slot).
#![allow(clippy::expect_used, missing_docs)]

use lock_redis_lua::RedisLuaBackend;
use lock_testkit::SemaphoreSuite;
use lock_testkit::server::{RedisCluster, RedisServer};
use tokio::sync::OnceCell;

async fn server_url() -> String {
    static SERVER: OnceCell<RedisServer> = OnceCell::const_new();
    SERVER
        .get_or_init(|| async { RedisServer::start().await.expect("start redis-server") })
        .await
        .url()
}

async fn seed_urls() -> Vec<String> {
    static CLUSTER: OnceCell<RedisCluster> = OnceCell::const_new();
    CLUSTER
        .get_or_init(|| async {
            RedisCluster::start(3, 0, RedisServer::builder())
                .await
                .expect("start a 3-master cluster")
        })
        .await
        .masters()
        .iter()
        .map(|m| m.url())
        .collect()
}

async fn single(url: String, fencing: bool) -> RedisLuaBackend {
    RedisLuaBackend::builder_url(url)
        .fencing(fencing)
        .build()
        .await
        .expect("connect")
}

mod plain {
    use super::*;

    async fn suite() -> SemaphoreSuite {
        let url = server_url().await;
        SemaphoreSuite::new(move || single(url.clone(), false))
    }

    lock_testkit::semaphore_conformance!(real, suite());
}

mod fenced {
    use super::*;

    async fn suite() -> SemaphoreSuite {
        let url = server_url().await;
        SemaphoreSuite::new(move || single(url.clone(), true))
    }

    lock_testkit::semaphore_conformance!(real, suite());
}

mod cluster {
    use super::*;

    async fn suite() -> SemaphoreSuite {
        let urls = seed_urls().await;
        SemaphoreSuite::new(move || {
            let urls = urls.clone();
            async move {
                RedisLuaBackend::builder_cluster(urls)
                    .fencing(true)
                    .build()
                    .await
                    .expect("connect to the cluster")
            }
        })
    }

    lock_testkit::semaphore_conformance!(real, suite());
}
