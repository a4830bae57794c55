//! The leader-election conformance suite on real servers: one redis-server
//! and a 3-master cluster.
#![allow(clippy::expect_used, missing_docs)]

use lock_redis_lua::RedisLuaBackend;
use lock_testkit::ElectionSuite;
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

mod single {
    use super::*;

    async fn suite() -> ElectionSuite {
        let url = server_url().await;
        ElectionSuite::new(move || {
            let url = url.clone();
            async move { RedisLuaBackend::builder_url(url).build().await.expect("connect") }
        })
    }

    lock_testkit::election_conformance!(real, suite());
}

mod cluster {
    use super::*;

    async fn suite() -> ElectionSuite {
        let urls = seed_urls().await;
        ElectionSuite::new(move || {
            let urls = urls.clone();
            async move {
                RedisLuaBackend::builder_cluster(urls)
                    .build()
                    .await
                    .expect("connect to the cluster")
            }
        })
    }

    lock_testkit::election_conformance!(real, suite());
}
