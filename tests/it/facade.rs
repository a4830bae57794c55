//! The facade: the memory backend reached through `verrou`, as an application
//! would swap it in for tests.

use lock_testkit::{LockSuite, VersionedSuite};
use verrou::memory::MemoryBackend;

async fn lock_suite() -> LockSuite {
    let shared = MemoryBackend::new();
    LockSuite::new(move || {
        let b = shared.clone();
        async move { b }
    })
}

async fn versioned_suite() -> VersionedSuite {
    let shared = MemoryBackend::new();
    VersionedSuite::new(move || {
        let b = shared.clone();
        async move { b }
    })
}

lock_testkit::lock_conformance!(paused, lock_suite());

mod versioned {
    use super::*;
    lock_testkit::versioned_conformance!(paused, versioned_suite());
}
