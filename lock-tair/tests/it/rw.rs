//! The read-write lock conformance suite against real servers with the Tair
//! module (the shared Lua scripts): one server and a 3-master cluster.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use lock_testkit::RwSuite;

mod single {
    use super::*;

    async fn suite() -> RwSuite {
        let server = common::tair_server().await;
        let url = server.url();
        RwSuite::new(move || common::connect(common::builder(&url)))
            .reserved_prefixes(["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX])
            .keep_alive(server)
    }

    lock_testkit::rw_conformance!(real, suite());
}

mod cluster {
    use super::*;

    async fn suite() -> RwSuite {
        let cluster = common::shared_cluster().await;
        let url = common::cluster_url(&cluster);
        RwSuite::new(move || common::connect(common::builder(&url)))
            .reserved_prefixes(["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX])
            .keep_alive(cluster)
    }

    lock_testkit::rw_conformance!(real, suite());
}
