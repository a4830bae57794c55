//! The whole conformance suite against the memory backend, under tokio's
//! paused clock: once with the concrete type, once behind `Arc<dyn ...>`.

use std::sync::Arc;

use lock_core::{LockBackend, VersionedStore};
use lock_memory::MemoryBackend;
use lock_testkit::{LockSuite, VersionedSuite};

mod direct {
    use super::*;

    async fn lock_suite() -> LockSuite {
        let shared = MemoryBackend::new();
        LockSuite::new(move || {
            let b = shared.clone();
            async move { b }
        })
        .counter(8, 25)
    }

    async fn versioned_suite() -> VersionedSuite {
        let shared = MemoryBackend::new();
        VersionedSuite::new(move || {
            let b = shared.clone();
            async move { b }
        })
    }

    lock_testkit::lock_conformance!(paused, lock_suite());

    mod fair {
        use super::*;
        lock_testkit::fair_conformance!(paused, lock_suite());
    }

    mod versioned {
        use super::*;
        lock_testkit::versioned_conformance!(paused, versioned_suite());
    }
}

mod as_dyn {
    use super::*;

    async fn lock_suite() -> LockSuite {
        let shared: Arc<dyn LockBackend> = Arc::new(MemoryBackend::new());
        LockSuite::new(move || {
            let b = shared.clone();
            async move { b }
        })
    }

    async fn versioned_suite() -> VersionedSuite {
        let shared: Arc<dyn VersionedStore> = Arc::new(MemoryBackend::new());
        VersionedSuite::new(move || {
            let b = shared.clone();
            async move { b }
        })
    }

    lock_testkit::lock_conformance!(paused, lock_suite());

    mod fair {
        use super::*;
        lock_testkit::fair_conformance!(paused, lock_suite());
    }

    mod versioned {
        use super::*;
        lock_testkit::versioned_conformance!(paused, versioned_suite());
    }
}
