//! The lock, fair (refused: typed `Unsupported`) and versioned conformance
//! suites on one real nats-server. Per-key TTLs are whole seconds, so the
//! suites' base TTL is raised to the backend's `Capabilities::min_ttl`
//! (1 s).
#![allow(clippy::expect_used, missing_docs)]

use crate::common;

use lock_testkit::{LockSuite, VersionedSuite};

async fn lock_suite() -> LockSuite {
    common::suite_on!(LockSuite, common::url(common::single().await, "single"))
}

async fn versioned_suite() -> VersionedSuite {
    common::suite_on!(VersionedSuite, common::url(common::single().await, "single"))
}

mod lock {
    use super::*;
    lock_testkit::lock_conformance!(real, lock_suite());
}

mod lock_current_thread {
    use super::*;
    lock_testkit::lock_conformance!(real, flavor = current_thread, lock_suite());
}

mod fair {
    use super::*;
    lock_testkit::fair_conformance!(real, lock_suite());
}

mod versioned {
    use super::*;
    lock_testkit::versioned_conformance!(real, versioned_suite());
}
