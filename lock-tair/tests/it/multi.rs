//! The multi-key lock conformance suite against real servers with the Tair
//! module (the shared Lua scripts): one server and a 3-master cluster; keys
//! in several slots refused (replica acknowledgement: `kinds_replica_ack.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use lock_core::{Error, LockToken};

use lock_core::raw::MultiLockBackend;
use lock_testkit::MultiSuite;

mod single {
    use super::*;

    async fn suite() -> MultiSuite {
        let server = common::tair_server().await;
        let url = server.url();
        MultiSuite::new(move || common::connect(common::builder(&url)))
            .reserved_prefixes(["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX])
            .keep_alive(server)
    }

    lock_testkit::multi_conformance!(real, suite());
}

mod cluster {
    use super::*;

    async fn suite() -> MultiSuite {
        let cluster = common::shared_cluster().await;
        let url = common::cluster_url(&cluster);
        MultiSuite::new(move || common::connect(common::builder(&url)))
            .reserved_prefixes(["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX])
            .keep_alive(cluster)
    }

    lock_testkit::multi_conformance!(real, suite());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_in_several_cluster_slots_are_refused() {
    let cluster = common::shared_cluster().await;
    let backend = common::connect(common::builder(&common::cluster_url(&cluster))).await;
    let token = LockToken::generate().unwrap();
    match backend
        .try_acquire_all(&["a", "b"], &token, Duration::from_secs(1))
        .await
    {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("hash tag"), "{msg}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}
