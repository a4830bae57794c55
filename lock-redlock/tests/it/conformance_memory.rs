//! The whole lock conformance suite against Redlock over 3 and over 5
//! in-process nodes, under tokio's paused clock. Every "client" the suite
//! asks for is its own Redlock over clones of the same N memory backends.

#![allow(clippy::expect_used)] // test set-up

use std::sync::Arc;

use lock_core::LockBackend;
use lock_memory::MemoryBackend;
use lock_redlock::Redlock;
use lock_testkit::LockSuite;

fn suite(nodes: usize) -> LockSuite {
    let shared: Vec<MemoryBackend> = (0..nodes).map(|_| MemoryBackend::new()).collect();
    LockSuite::new(move || {
        let nodes: Vec<Arc<dyn LockBackend>> = shared.iter().map(|m| Arc::new(m.clone()) as _).collect();
        async move { Redlock::new(nodes).expect("valid redlock") }
    })
    .counter(8, 25)
}

mod three_nodes {
    use super::*;
    lock_testkit::lock_conformance!(paused, async { suite(3) });
    mod fair {
        use super::*;
        lock_testkit::fair_conformance!(paused, async { suite(3) });
    }
}

mod five_nodes {
    use super::*;
    lock_testkit::lock_conformance!(paused, async { suite(5) });
}
