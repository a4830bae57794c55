//! The whole conformance suite against real servers with the Tair module:
//! one server (plain, with fencing tokens, with the PTTL retry hint), a
//! primary + replica pair with replica acknowledgement, and a 3-master
//! cluster (with and without fencing tokens).
//!
//! The module is this workspace's `tair-module`, or any TairString-compatible
//! module named by `VERROU_TAIR_MODULE`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use lock_tair::ReplicaAck;
use lock_testkit::server::ReplicatedPair;
use lock_testkit::{LockSuite, VersionedSuite};
use tokio::sync::OnceCell;

mod single {
    use super::*;

    async fn lock_suite() -> LockSuite {
        let server = common::tair_server().await;
        let url = server.url();
        LockSuite::new(move || common::connect(common::builder(&url)))
            .reserved_prefixes(["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX])
            .keep_alive(server)
    }

    async fn versioned_suite() -> VersionedSuite {
        let server = common::tair_server().await;
        let url = server.url();
        VersionedSuite::new(move || common::connect(common::builder(&url))).keep_alive(server)
    }

    lock_testkit::lock_conformance!(real, lock_suite());

    mod fair {
        use super::*;
        lock_testkit::fair_conformance!(real, lock_suite());
    }

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
        LockSuite::new(move || common::connect(common::builder(&url).fencing(true)))
            .reserved_prefixes(["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX])
            .keep_alive(server)
    }

    lock_testkit::lock_conformance!(real, lock_suite());
}

mod cluster {
    use super::*;

    async fn lock_suite() -> LockSuite {
        let cluster = common::shared_cluster().await;
        let url = common::cluster_url(&cluster);
        LockSuite::new(move || common::connect(common::builder(&url).fencing(true)))
            .reserved_prefixes(["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX])
            .keep_alive(cluster)
    }

    async fn versioned_suite() -> VersionedSuite {
        let cluster = common::shared_cluster().await;
        let url = common::cluster_url(&cluster);
        VersionedSuite::new(move || common::connect(common::builder(&url))).keep_alive(cluster)
    }

    lock_testkit::lock_conformance!(real, lock_suite());

    /// No fair queue on a cluster: each case checks the typed refusal.
    mod fair {
        use super::*;
        lock_testkit::fair_conformance!(real, lock_suite());
    }

    mod versioned {
        use super::*;
        lock_testkit::versioned_conformance!(real, versioned_suite());
    }
}

mod single_hinted {
    use super::*;

    async fn lock_suite() -> LockSuite {
        let server = common::tair_server().await;
        let url = server.url();
        LockSuite::new(move || common::connect(common::builder(&url).retry_after_hint(true)))
            .reserved_prefixes(["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX])
            .keep_alive(server)
    }

    lock_testkit::lock_conformance!(real, lock_suite());
}

mod cluster_unfenced {
    use super::*;

    async fn lock_suite() -> LockSuite {
        let cluster = common::shared_cluster().await;
        let url = common::cluster_url(&cluster);
        LockSuite::new(move || common::connect(common::builder(&url)))
            .reserved_prefixes(["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX])
            .keep_alive(cluster)
    }

    lock_testkit::lock_conformance!(real, lock_suite());
}

mod replica_ack {
    use super::*;

    /// One primary + replica pair (both with the module) for these cases.
    async fn primary_url() -> String {
        static PAIR: OnceCell<ReplicatedPair> = OnceCell::const_new();
        PAIR.get_or_init(|| async { ReplicatedPair::start(common::tair()).await.expect("start a pair") })
            .await
            .primary()
            .url()
    }

    fn acked(url: &str) -> lock_tair::TairBuilder {
        // WAIT answers at once here; the timeout only bounds a stall.
        common::builder(url)
            .fencing(true)
            .replica_ack(ReplicaAck::new(1, Duration::from_secs(2)))
    }

    async fn lock_suite() -> LockSuite {
        let url = primary_url().await;
        LockSuite::new(move || common::connect(acked(&url)))
            .reserved_prefixes(["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX])
    }

    async fn versioned_suite() -> VersionedSuite {
        let url = primary_url().await;
        VersionedSuite::new(move || common::connect(acked(&url)))
    }

    lock_testkit::lock_conformance!(real, lock_suite());

    mod versioned {
        use super::*;
        lock_testkit::versioned_conformance!(real, versioned_suite());
    }
}
