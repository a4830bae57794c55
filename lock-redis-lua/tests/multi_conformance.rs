//! The multi-key lock conformance suite on real servers: one redis-server
//! and a 3-master cluster (keys with a common hash tag); keys in several
//! slots are refused on the cluster.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use lock_core::{Error, LockToken, MultiLockBackend};
use lock_redis_lua::RedisLuaBackend;
use lock_testkit::MultiSuite;
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

async fn cluster_backend() -> RedisLuaBackend {
    RedisLuaBackend::builder_cluster(seed_urls().await)
        .build()
        .await
        .expect("connect to the cluster")
}

mod single {
    use super::*;

    async fn suite() -> MultiSuite {
        let url = server_url().await;
        MultiSuite::new(move || {
            let url = url.clone();
            async move {
                RedisLuaBackend::builder_url(url)
                    .release_notifications(true)
                    .build()
                    .await
                    .expect("connect")
            }
        })
    }

    lock_testkit::multi_conformance!(real, suite());
}

mod cluster {
    use super::*;

    async fn suite() -> MultiSuite {
        seed_urls().await;
        MultiSuite::new(cluster_backend)
    }

    lock_testkit::multi_conformance!(real, suite());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_in_several_cluster_slots_are_refused() {
    let backend = cluster_backend().await;
    let token = LockToken::generate().expect("token");
    // "a" and "b" hash to different slots (15495 and 3300).
    match backend
        .try_acquire_all(&["a", "b"], &token, std::time::Duration::from_secs(1))
        .await
    {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("hash tag"), "{msg}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}
