//! The whole conformance suite on one real redis-server, shared by every
//! case of this file: once plain (no fencing, no release notifications) on a
//! current-thread runtime, once with fencing tokens and release notifications
//! on; and on a primary with one replica, with replica acknowledgement
//! (`WAIT`) on every write. The other modules run on the multi-threaded
//! runtime, so the backend is proven on both flavours.
#![allow(clippy::expect_used, missing_docs)]

use std::time::Duration;

use lock_redis_lua::{RedisLuaBackend, RedisLuaBuilder, ReplicaAck};
use lock_testkit::server::{RedisServer, ReplicatedPair};
use lock_testkit::{LockSuite, VersionedSuite};
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::OnceCell;

/// One server for the whole file. It is started on the first case's
/// runtime but needs none of its tasks afterwards (a plain child process);
/// the kernel kills it when the test process exits.
async fn server_url() -> String {
    static SERVER: OnceCell<RedisServer> = OnceCell::const_new();
    SERVER
        .get_or_init(|| async { RedisServer::start().await.expect("start redis-server") })
        .await
        .url()
}

/// The suites check the runtime the macro gave their cases.
fn assert_runtime(flavor: RuntimeFlavor) {
    assert_eq!(Handle::current().runtime_flavor(), flavor, "the case's runtime");
}

async fn backend(url: String, full: bool) -> RedisLuaBackend {
    RedisLuaBuilder::url(url)
        .fencing(full)
        .release_notifications(full)
        .build()
        .await
        .expect("connect")
}

mod plain {
    use super::*;

    async fn lock_suite() -> LockSuite {
        assert_runtime(RuntimeFlavor::CurrentThread);
        let url = server_url().await;
        LockSuite::new(move || backend(url.clone(), false)).reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX])
    }

    async fn versioned_suite() -> VersionedSuite {
        assert_runtime(RuntimeFlavor::CurrentThread);
        let url = server_url().await;
        VersionedSuite::new(move || backend(url.clone(), false))
    }

    lock_testkit::lock_conformance!(real, flavor = current_thread, lock_suite());

    mod fair {
        use super::*;
        lock_testkit::fair_conformance!(real, flavor = current_thread, lock_suite());
    }

    mod versioned {
        use super::*;
        lock_testkit::versioned_conformance!(real, flavor = current_thread, versioned_suite());
    }
}

mod fenced_notified {
    use super::*;

    async fn lock_suite() -> LockSuite {
        assert_runtime(RuntimeFlavor::MultiThread);
        let url = server_url().await;
        LockSuite::new(move || backend(url.clone(), true)).reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX])
    }

    lock_testkit::lock_conformance!(real, lock_suite());

    mod fair {
        use super::*;
        lock_testkit::fair_conformance!(real, lock_suite());
    }
}

mod replica_ack {
    use super::*;

    /// One primary + replica pair for the module's cases.
    async fn primary_url() -> String {
        static PAIR: OnceCell<ReplicatedPair> = OnceCell::const_new();
        PAIR.get_or_init(|| async {
            ReplicatedPair::start(RedisServer::builder())
                .await
                .expect("start a pair")
        })
        .await
        .primary()
        .url()
    }

    async fn acked(url: String) -> RedisLuaBackend {
        RedisLuaBuilder::url(url)
            .fencing(true)
            // WAIT normally answers in well under a millisecond here; the
            // timeout only bounds a stall.
            .replica_ack(ReplicaAck::new(1, Duration::from_secs(2)))
            .build()
            .await
            .expect("connect")
    }

    async fn lock_suite() -> LockSuite {
        let url = primary_url().await;
        LockSuite::new(move || acked(url.clone())).reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX])
    }

    async fn versioned_suite() -> VersionedSuite {
        let url = primary_url().await;
        VersionedSuite::new(move || acked(url.clone()))
    }

    lock_testkit::lock_conformance!(real, lock_suite());

    mod versioned {
        use super::*;
        lock_testkit::versioned_conformance!(real, versioned_suite());
    }
}

/// The acquire script path of servers without `SET NX GET` (Redis < 7.0),
/// forced on the installed server by hiding its version (`HELLO` renamed
/// away; round_trips.rs shows the acquire is then the script).
mod script_acquire {
    use super::*;

    async fn url() -> String {
        static SERVER: OnceCell<RedisServer> = OnceCell::const_new();
        SERVER
            .get_or_init(|| async {
                RedisServer::builder()
                    .args(["--rename-command", "HELLO", ""])
                    .start()
                    .await
                    .expect("start redis-server")
            })
            .await
            .url()
    }

    async fn lock_suite() -> LockSuite {
        let url = url().await;
        LockSuite::new(move || backend(url.clone(), false)).reserved_prefixes([lock_redis_lua::RESERVED_KEY_PREFIX])
    }

    lock_testkit::lock_conformance!(real, lock_suite());
}
