//! The multi-key lock conformance suite against the memory backend, under
//! tokio's paused clock.

use lock_memory::MemoryBackend;
use lock_testkit::MultiSuite;

async fn suite() -> MultiSuite {
    let shared = MemoryBackend::new();
    MultiSuite::new(move || {
        let b = shared.clone();
        async move { b }
    })
}

lock_testkit::multi_conformance!(paused, suite());
