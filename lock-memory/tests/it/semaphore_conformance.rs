//! The semaphore conformance suite against the memory backend, under tokio's
//! paused clock.

use lock_memory::MemoryBackend;
use lock_testkit::SemaphoreSuite;

async fn suite() -> SemaphoreSuite {
    let shared = MemoryBackend::new();
    SemaphoreSuite::new(move || {
        let b = shared.clone();
        async move { b }
    })
}

lock_testkit::semaphore_conformance!(paused, suite());
