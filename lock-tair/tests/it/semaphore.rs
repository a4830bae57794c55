//! The semaphore conformance suite against real servers with the Tair
//! module (the shared Lua scripts): one server (plain and with fencing
//! tokens) and a 3-master cluster; a server paused past the TTL (replica
//! acknowledgement: `kinds_replica_ack.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use lock_core::{LockOptions, SemaphoreManager};
use lock_testkit::SemaphoreSuite;
use lock_testkit::conformance::paused_server::semaphore_loss_by_the_local_deadline;

mod single {
    use super::*;

    async fn suite() -> SemaphoreSuite {
        let server = common::tair_server().await;
        let url = server.url();
        SemaphoreSuite::new(move || common::connect(common::builder(&url)))
            .reserved_prefixes(["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX])
            .keep_alive(server)
    }

    lock_testkit::semaphore_conformance!(real, suite());
}

mod single_fenced {
    use super::*;

    async fn suite() -> SemaphoreSuite {
        let server = common::tair_server().await;
        let url = server.url();
        SemaphoreSuite::new(move || common::connect(common::builder(&url).fencing(true)))
            .reserved_prefixes(["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX])
            .keep_alive(server)
    }

    lock_testkit::semaphore_conformance!(real, suite());
}

mod cluster {
    use super::*;

    async fn suite() -> SemaphoreSuite {
        let cluster = common::shared_cluster().await;
        let url = common::cluster_url(&cluster);
        SemaphoreSuite::new(move || common::connect(common::builder(&url).fencing(true)))
            .reserved_prefixes(["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX])
            .keep_alive(cluster)
    }

    lock_testkit::semaphore_conformance!(real, suite());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_past_the_ttl_signals_loss_by_the_local_deadline() {
    let ttl = Duration::from_millis(500);
    let server = common::tair_server().await;
    let backend = common::connect(common::builder(&server.url())).await;
    let sems = SemaphoreManager::with_options(backend, LockOptions::with_ttl(ttl).acquire_timeout(ttl)).unwrap();
    semaphore_loss_by_the_local_deadline(&server, &sems, ttl).await;
}
