//! The leader-election conformance suite against the memory backend, under
//! tokio's paused clock.

use lock_memory::MemoryBackend;
use lock_testkit::ElectionSuite;

async fn suite() -> ElectionSuite {
    let shared = MemoryBackend::new();
    ElectionSuite::new(move || {
        let b = shared.clone();
        async move { b }
    })
}

lock_testkit::election_conformance!(paused, suite());
