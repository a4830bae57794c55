//! The whole conformance suite on a real 3-master Redis Cluster (no
//! replicas), shared by every case of this file: with fencing tokens on (each
//! script is routed by its key, and the fence key shares its slot), and
//! without (acquire is the native `SET NX PX GET`, no script). Release
//! notifications need a standalone URL and are refused on a cluster
//! (`notifications_are_refused_on_a_cluster`).
#![allow(clippy::expect_used, missing_docs)]

use lock_redis_lua::{RedisLuaBackend, RedisLuaBuilder};
use lock_testkit::server::{RedisCluster, RedisServer};
use lock_testkit::{LockSuite, VersionedSuite};
use tokio::sync::OnceCell;

/// One cluster for the whole file (plain child processes: they need no task
/// of the runtime that started them).
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

async fn backend(urls: Vec<String>, fencing: bool) -> RedisLuaBackend {
    RedisLuaBuilder::cluster(urls)
        .fencing(fencing)
        .build()
        .await
        .expect("connect to the cluster")
}

async fn lock_suite() -> LockSuite {
    let urls = seed_urls().await;
    LockSuite::new(move || backend(urls.clone(), true)).reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX])
}

async fn versioned_suite() -> VersionedSuite {
    let urls = seed_urls().await;
    VersionedSuite::new(move || backend(urls.clone(), true))
}

lock_testkit::lock_conformance!(real, lock_suite());

mod versioned {
    use super::*;
    lock_testkit::versioned_conformance!(real, versioned_suite());
}

mod unfenced {
    use super::*;

    async fn lock_suite() -> LockSuite {
        let urls = seed_urls().await;
        LockSuite::new(move || backend(urls.clone(), false)).reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX])
    }

    lock_testkit::lock_conformance!(real, lock_suite());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_are_refused_on_a_cluster() {
    let urls = seed_urls().await;
    let err = RedisLuaBuilder::cluster(urls)
        .release_notifications(true)
        .build()
        .await
        .expect_err("pub/sub wake-ups need a standalone URL");
    assert!(
        matches!(&err, lock_core::Error::InvalidArgument(m) if m.contains("standalone")),
        "{err:?}"
    );
}
