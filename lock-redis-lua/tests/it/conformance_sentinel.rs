//! The conformance suites through Redis Sentinel: a primary, two replicas
//! and three sentinels shared by the file's cases, the backend built from a
//! `redis+sentinel://` URL (the primary found through the sentinels, release
//! notifications on, fencing on); once plain and once with replica
//! acknowledgement (`replica_ack=1`). The failover itself:
//! sentinel_failover.rs.

use std::time::Duration;

use lock_redis_lua::RedisLuaBackend;
use lock_testkit::server::{RedisServer, SentinelGroup};
use lock_testkit::{ElectionSuite, LockSuite, MultiSuite, RwSuite, SemaphoreSuite, VersionedSuite};
use tokio::sync::OnceCell;

/// Longer than the harness's default: the group must not fail over because
/// a loaded machine answered late while the suites run.
const DOWN_AFTER: Duration = Duration::from_secs(10);

/// One group for the whole file (plain child processes).
async fn url(params: &str) -> String {
    static GROUP: OnceCell<SentinelGroup> = OnceCell::const_new();
    let group = GROUP
        .get_or_init(|| async {
            SentinelGroup::start_with(RedisServer::builder(), DOWN_AFTER)
                .await
                .expect("start a Sentinel group")
        })
        .await;
    format!("{}?fencing=true{params}", group.url("redis+sentinel"))
}

async fn plain() -> RedisLuaBackend {
    RedisLuaBackend::connect(&url("").await)
        .await
        .expect("connect through Sentinel")
}

async fn acked() -> RedisLuaBackend {
    RedisLuaBackend::connect(&url("&replica_ack=1&replica_ack_timeout=2s").await)
        .await
        .expect("connect through Sentinel")
}

/// The acknowledged suites' TTL (as kinds_conformance.rs).
const ACKED_TTL: Duration = Duration::from_millis(500);

macro_rules! every_suite {
    ($backend:ident, $ttl:expr) => {
        mod lock {
            use super::*;
            fn suite() -> LockSuite {
                let s = LockSuite::new($backend).reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX]);
                match $ttl {
                    Some(ttl) => s.ttl(ttl),
                    None => s,
                }
            }
            lock_testkit::lock_conformance!(real, async { suite() });
            mod fair {
                use super::*;
                lock_testkit::fair_conformance!(real, async { suite() });
            }
        }

        mod versioned {
            use super::*;
            lock_testkit::versioned_conformance!(real, async { VersionedSuite::new($backend) });
        }

        mod semaphore {
            use super::*;
            lock_testkit::semaphore_conformance!(real, async {
                let s = SemaphoreSuite::new($backend).reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX]);
                match $ttl {
                    Some(ttl) => s.ttl(ttl),
                    None => s,
                }
            });
        }

        mod multi {
            use super::*;
            lock_testkit::multi_conformance!(real, async {
                let s = MultiSuite::new($backend).reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX]);
                match $ttl {
                    Some(ttl) => s.ttl(ttl),
                    None => s,
                }
            });
        }

        mod rw {
            use super::*;
            lock_testkit::rw_conformance!(real, async {
                let s = RwSuite::new($backend).reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX]);
                match $ttl {
                    Some(ttl) => s.ttl(ttl),
                    None => s,
                }
            });
        }

        mod election {
            use super::*;
            lock_testkit::election_conformance!(real, async {
                let s = ElectionSuite::new($backend).reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX]);
                match $ttl {
                    Some(ttl) => s.ttl(ttl),
                    None => s,
                }
            });
        }
    };
}

mod through_sentinel {
    use super::*;
    every_suite!(plain, None::<Duration>);
}

mod through_sentinel_replica_ack {
    use super::*;
    every_suite!(acked, Some(ACKED_TTL));
}
