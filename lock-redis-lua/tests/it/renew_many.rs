//! Batched renewal (`renew_many`): one renew-many script per chunk of keys
//! (per hash slot on a cluster), with the outcomes and TTLs of single renews
//! (the shared cases of `lock_testkit::renew_many_conformance!`).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use std::sync::Arc;

use lock_redis_lua::RedisLuaBuilder;
use lock_testkit::server::{RedisCluster, RedisServer};
use lock_testkit::{RenewManySuite, RenewManyTarget};

fn suite() -> RenewManySuite {
    RenewManySuite::new(
        "pexpire",
        || async { RedisServer::start().await.expect("start") },
        || async {
            let cluster = RedisCluster::start(3, 0, RedisServer::builder())
                .await
                .expect("start a 3-master cluster");
            Arc::new(cluster)
        },
        |target| async move {
            let builder = match target {
                RenewManyTarget::Server { url, response_timeout } => {
                    let builder = RedisLuaBuilder::url(url);
                    match response_timeout {
                        Some(timeout) => builder.response_timeout(timeout),
                        None => builder,
                    }
                }
                RenewManyTarget::Cluster(cluster) => RedisLuaBuilder::cluster([cluster.seed_url()]),
            };
            builder.build().await.expect("connect")
        },
    )
}

lock_testkit::renew_many_conformance!(real, async { suite() });
