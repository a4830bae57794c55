//! The semaphore, read-write and leader-election conformance suites on
//! a three-member etcd cluster, every member in the client's endpoint list (base TTL raised to the backend's
//! `Capabilities::min_ttl`, as the other suites).
#![allow(clippy::expect_used, missing_docs)]

use crate::common;

use lock_testkit::{ElectionSuite, RwSuite, SemaphoreSuite};

async fn semaphore_suite() -> SemaphoreSuite {
    common::suite_on!(SemaphoreSuite, common::three().await.endpoints())
}

async fn rw_suite() -> RwSuite {
    common::suite_on!(RwSuite, common::three().await.endpoints())
}

async fn election_suite() -> ElectionSuite {
    common::suite_on!(ElectionSuite, common::three().await.endpoints())
}

mod semaphore {
    use super::*;
    lock_testkit::semaphore_conformance!(real, semaphore_suite());
}

mod rw {
    use super::*;
    lock_testkit::rw_conformance!(real, rw_suite());
}

mod election {
    use super::*;
    lock_testkit::election_conformance!(real, election_suite());
}
