//! The leader-election conformance suite against real servers with the Tair
//! module (the shared Lua scripts): one server and a 3-master cluster.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use lock_testkit::ElectionSuite;

mod single {
    use super::*;

    async fn suite() -> ElectionSuite {
        let server = common::tair_server().await;
        let url = server.url();
        ElectionSuite::new(move || common::connect(common::builder(&url)))
            .reserved_prefixes(["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX])
            .keep_alive(server)
    }

    lock_testkit::election_conformance!(real, suite());
}

mod cluster {
    use super::*;

    async fn suite() -> ElectionSuite {
        let cluster = common::shared_cluster().await;
        let url = common::cluster_url(&cluster);
        ElectionSuite::new(move || common::connect(common::builder(&url)))
            .reserved_prefixes(["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX])
            .keep_alive(cluster)
    }

    lock_testkit::election_conformance!(real, suite());
}
