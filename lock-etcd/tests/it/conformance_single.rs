//! The lock, fair, versioned and multi-key conformance suites on one real etcd member. etcd
//! leases are whole seconds with a server minimum, so the suites' base TTL
//! is raised to the backend's `Capabilities::min_ttl` (1 s on the
//! harness's fast Raft timers).
#![allow(clippy::expect_used, missing_docs)]

use crate::common;

use lock_testkit::{LockSuite, MultiSuite, VersionedSuite};

async fn lock_suite() -> LockSuite {
    common::suite_on!(LockSuite, common::single().await.endpoints())
}

async fn versioned_suite() -> VersionedSuite {
    common::suite_on!(VersionedSuite, common::single().await.endpoints())
}

async fn multi_suite() -> MultiSuite {
    common::suite_on!(MultiSuite, common::single().await.endpoints())
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

mod multi {
    use super::*;
    lock_testkit::multi_conformance!(real, multi_suite());
}
