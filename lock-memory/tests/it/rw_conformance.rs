//! The read-write lock conformance suite against the memory backend, under
//! tokio's paused clock.

use lock_memory::MemoryBackend;
use lock_testkit::RwSuite;

async fn suite() -> RwSuite {
    let shared = MemoryBackend::new();
    RwSuite::new(move || {
        let b = shared.clone();
        async move { b }
    })
}

lock_testkit::rw_conformance!(paused, suite());
