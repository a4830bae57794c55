//! The lock, fair (refused) and versioned conformance suites on a
//! three-node JetStream cluster, the bucket with three replicas (R3) and
//! every node in the client's server list.
#![allow(clippy::expect_used, missing_docs)]

use crate::common;

use lock_testkit::{LockSuite, VersionedSuite};

async fn lock_suite() -> LockSuite {
    common::suite_on!(LockSuite, common::url(common::three().await, "r3"))
}

async fn versioned_suite() -> VersionedSuite {
    common::suite_on!(VersionedSuite, common::url(common::three().await, "r3"))
}

mod lock {
    use super::*;
    lock_testkit::lock_conformance!(real, lock_suite());
}

mod fair {
    use super::*;
    lock_testkit::fair_conformance!(real, lock_suite());
}

mod versioned {
    use super::*;
    lock_testkit::versioned_conformance!(real, versioned_suite());
}
