//! The conformance suites of the other lock kinds (semaphore, multi-key,
//! read-write, leader election) on real servers, all sharing one
//! redis-server and one 3-master cluster: single server plain (and with
//! fencing tokens or release notifications where they change the code path),
//! and the cluster with fencing on (each kind's keys share a slot); and every
//! suite again under replica acknowledgement, on a primary and its replica.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use lock_core::{Error, LockToken};

use lock_core::raw::MultiLockBackend;
use lock_redis_lua::{RedisLuaBackend, RedisLuaBuilder, ReplicaAck};
use lock_testkit::server::{RedisCluster, RedisServer, ReplicatedPair};
use lock_testkit::{ElectionSuite, MultiSuite, RwSuite, SemaphoreSuite};
use tokio::sync::OnceCell;

/// One server for the whole file (a plain child process).
async fn server_url() -> String {
    static SERVER: OnceCell<RedisServer> = OnceCell::const_new();
    SERVER
        .get_or_init(|| async { RedisServer::start().await.expect("start redis-server") })
        .await
        .url()
}

/// One 3-master cluster for the whole file.
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

/// A client of the single server; `full` turns fencing and release
/// notifications on.
async fn single(full: bool) -> RedisLuaBackend {
    RedisLuaBuilder::url(server_url().await)
        .fencing(full)
        .release_notifications(full)
        .build()
        .await
        .expect("connect")
}

/// One primary and its replica for the whole file.
async fn primary_url() -> String {
    static PAIR: OnceCell<ReplicatedPair> = OnceCell::const_new();
    PAIR.get_or_init(|| async {
        ReplicatedPair::start(RedisServer::builder())
            .await
            .expect("start a primary and a replica")
    })
    .await
    .primary()
    .url()
}

/// The acknowledged suites' TTL: the longest of the usual test TTLs, so
/// that a `WAIT` on a loaded machine leaves most of the lease to the timing
/// cases.
const ACKED_TTL: std::time::Duration = std::time::Duration::from_millis(500);

/// A client of the primary whose grants and renewals WAIT for the replica.
async fn acked() -> RedisLuaBackend {
    RedisLuaBuilder::url(primary_url().await)
        .replica_ack(ReplicaAck::new(1, std::time::Duration::from_secs(2)))
        .build()
        .await
        .expect("connect")
}

/// A client of the cluster, fencing on.
async fn cluster() -> RedisLuaBackend {
    RedisLuaBuilder::cluster(seed_urls().await)
        .fencing(true)
        .build()
        .await
        .expect("connect to the cluster")
}

mod semaphore {
    use super::*;

    mod plain {
        use super::*;
        lock_testkit::semaphore_conformance!(real, async {
            SemaphoreSuite::new(|| single(false)).reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX])
        });
    }

    mod fenced {
        use super::*;
        lock_testkit::semaphore_conformance!(real, async {
            SemaphoreSuite::new(|| single(true)).reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX])
        });
    }

    mod on_cluster {
        use super::*;
        lock_testkit::semaphore_conformance!(real, async {
            SemaphoreSuite::new(cluster).reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX])
        });
    }
}

mod multi {
    use super::*;

    mod single_server {
        use super::*;
        lock_testkit::multi_conformance!(real, async {
            MultiSuite::new(|| single(true)).reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX])
        });
    }

    mod on_cluster {
        use super::*;
        lock_testkit::multi_conformance!(real, async {
            MultiSuite::new(cluster).reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX])
        });
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn keys_in_several_cluster_slots_are_refused() {
        let backend = cluster().await;
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
}

mod rw {
    use super::*;

    mod single_server {
        use super::*;
        lock_testkit::rw_conformance!(real, async {
            RwSuite::new(|| single(false)).reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX])
        });
    }

    mod on_cluster {
        use super::*;
        lock_testkit::rw_conformance!(real, async {
            RwSuite::new(cluster).reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX])
        });
    }
}

mod election {
    use super::*;

    mod single_server {
        use super::*;
        lock_testkit::election_conformance!(real, async {
            ElectionSuite::new(|| single(false)).reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX])
        });
    }

    mod on_cluster {
        use super::*;
        lock_testkit::election_conformance!(real, async {
            ElectionSuite::new(cluster).reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX])
        });
    }
}

/// Every kind's suite with `ReplicaAck`: the grants and renewals WAIT, the
/// kinds' behaviour is the same.
mod under_replica_ack {
    use super::*;

    mod semaphore {
        use super::*;
        lock_testkit::semaphore_conformance!(real, async {
            SemaphoreSuite::new(acked)
                .reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX])
                .ttl(ACKED_TTL)
        });
    }

    mod multi {
        use super::*;
        lock_testkit::multi_conformance!(real, async {
            MultiSuite::new(acked)
                .reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX])
                .ttl(ACKED_TTL)
        });
    }

    mod rw {
        use super::*;
        lock_testkit::rw_conformance!(real, async {
            RwSuite::new(acked)
                .reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX])
                .ttl(ACKED_TTL)
        });
    }

    mod election {
        use super::*;
        lock_testkit::election_conformance!(real, async {
            ElectionSuite::new(acked)
                .reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX])
                .ttl(ACKED_TTL)
        });
    }
}

/// Issue 39 (guarantee 2): a kind's clean-up release that reached the
/// server before its own grant (across a reconnect) makes that late grant
/// fail, for the read-write lock, the election and the multi-key lock as
/// for the semaphore; sent in that order on purpose here.
mod late_grant {
    use super::*;
    use lock_testkit::conformance::late_grant_cases as cases;

    macro_rules! late_grant_cases {
        ($($setup:ident => $connect:expr),* $(,)?) => {$(
            mod $setup {
                use super::*;

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn rw_grant_after_its_clean_up_is_refused() {
                    cases::rw_grant_after_its_clean_up_is_refused(&RwSuite::new($connect).ttl(ACKED_TTL)).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn campaign_after_its_clean_up_is_refused() {
                    cases::campaign_after_its_clean_up_is_refused(&ElectionSuite::new($connect).ttl(ACKED_TTL)).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn multi_grant_after_its_clean_up_is_refused() {
                    cases::multi_grant_after_its_clean_up_is_refused(&MultiSuite::new($connect).ttl(ACKED_TTL))
                        .await;
                }
            }
        )*};
    }

    late_grant_cases!(
        plain => || single(false),
        with_notifications => || single(true),
        on_cluster => cluster,
        under_replica_ack => acked,
    );
}
