//! The lock and versioned conformance suites on a three-member etcd
//! cluster, every member in the client's endpoint list.
#![allow(clippy::expect_used, missing_docs)]

mod common;

use lock_testkit::{LockSuite, VersionedSuite};

async fn lock_suite() -> LockSuite {
    let endpoints = common::three().await.endpoints();
    let probe = common::connect(endpoints.clone()).await;
    let suite = LockSuite::new(move || common::connect(endpoints.clone()));
    let ttl = common::suite_ttl(&probe, suite.ttl);
    suite.ttl(ttl)
}

async fn versioned_suite() -> VersionedSuite {
    let endpoints = common::three().await.endpoints();
    let probe = common::connect(endpoints.clone()).await;
    let suite = VersionedSuite::new(move || common::connect(endpoints.clone()));
    let ttl = common::suite_ttl(&probe, suite.ttl);
    suite.ttl(ttl)
}

mod lock {
    use super::*;
    lock_testkit::lock_conformance!(real, lock_suite());
}

mod versioned {
    use super::*;
    lock_testkit::versioned_conformance!(real, versioned_suite());
}

mod fair {
    use super::*;
    lock_testkit::fair_conformance!(real, lock_suite());
}

mod multi {
    use super::*;
    use lock_testkit::MultiSuite;

    async fn multi_suite() -> MultiSuite {
        let endpoints = common::three().await.endpoints();
        let probe = common::connect(endpoints.clone()).await;
        let suite = MultiSuite::new(move || common::connect(endpoints.clone()));
        let ttl = common::suite_ttl(&probe, suite.ttl);
        suite.ttl(ttl)
    }

    lock_testkit::multi_conformance!(real, multi_suite());
}
