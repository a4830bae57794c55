//! The whole conformance suite against real servers with the Tair module:
//! one server (plain and with fencing tokens) and a 3-master cluster.
//!
//! The module is this workspace's `tair-module`, or any TairString-compatible
//! module named by `VERROU_TAIR_MODULE`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use lock_testkit::{LockSuite, VersionedSuite};

mod single {
    use super::*;

    async fn lock_suite() -> LockSuite {
        let server = common::tair_server().await;
        let url = server.url();
        LockSuite::new(move || common::connect(common::builder(&url))).keep_alive(server)
    }

    async fn versioned_suite() -> VersionedSuite {
        let server = common::tair_server().await;
        let url = server.url();
        VersionedSuite::new(move || common::connect(common::builder(&url))).keep_alive(server)
    }

    lock_testkit::lock_conformance!(real, lock_suite());

    mod versioned {
        use super::*;
        lock_testkit::versioned_conformance!(real, versioned_suite());
    }
}

mod single_fenced {
    use super::*;

    async fn lock_suite() -> LockSuite {
        let server = common::tair_server().await;
        let url = server.url();
        LockSuite::new(move || common::connect(common::builder(&url).fencing(true))).keep_alive(server)
    }

    lock_testkit::lock_conformance!(real, lock_suite());
}

mod cluster {
    use super::*;

    async fn lock_suite() -> LockSuite {
        let cluster = common::shared_cluster().await;
        let url = common::cluster_url(&cluster);
        LockSuite::new(move || common::connect(common::builder(&url).fencing(true))).keep_alive(cluster)
    }

    async fn versioned_suite() -> VersionedSuite {
        let cluster = common::shared_cluster().await;
        let url = common::cluster_url(&cluster);
        VersionedSuite::new(move || common::connect(common::builder(&url))).keep_alive(cluster)
    }

    lock_testkit::lock_conformance!(real, lock_suite());

    mod versioned {
        use super::*;
        lock_testkit::versioned_conformance!(real, versioned_suite());
    }
}
