//! Redlock safety rules (issue 11): quorums that give no exclusion are
//! refused, and a release leaves no key on any node, even with a renewal in
//! flight. Memory nodes, tokio's paused clock.

#![allow(clippy::expect_used, clippy::panic)] // test helpers

use std::sync::Arc;

use lock_core::{Error, LockBackend};
use lock_memory::MemoryBackend;
use lock_redlock::{Redlock, RedlockOptions};

fn memory_nodes(n: usize) -> Vec<Arc<dyn LockBackend>> {
    (0..n).map(|_| Arc::new(MemoryBackend::new()) as Arc<dyn LockBackend>).collect()
}

#[test]
fn a_quorum_of_two_of_five_is_refused() {
    let err = Redlock::with_options(memory_nodes(5), RedlockOptions::default().quorum(2))
        .expect_err("quorum 2 of 5 lets two clients hold disjoint pairs");
    match err {
        Error::InvalidArgument(message) => assert!(message.contains("2M > N"), "{message}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    for (nodes, quorum) in [(4, 2), (6, 3), (2, 1), (3, 1)] {
        assert!(
            matches!(
                Redlock::with_options(memory_nodes(nodes), RedlockOptions::default().quorum(quorum)),
                Err(Error::InvalidArgument(_))
            ),
            "quorum {quorum} of {nodes} must be refused"
        );
    }
    for (nodes, quorum) in [(5, 3), (5, 5), (4, 3), (2, 2)] {
        let redlock = Redlock::with_options(memory_nodes(nodes), RedlockOptions::default().quorum(quorum))
            .unwrap_or_else(|e| panic!("quorum {quorum} of {nodes} is a majority: {e}"));
        assert_eq!(redlock.quorum(), quorum);
    }
}

#[test]
fn the_default_quorum_is_a_majority() {
    for nodes in 2..=9 {
        let redlock = Redlock::new(memory_nodes(nodes)).expect("valid redlock");
        let quorum = redlock.quorum();
        assert!(2 * quorum > nodes, "{quorum} of {nodes}");
        assert!(2 * (quorum - 1) <= nodes, "{quorum} of {nodes} is more than the smallest majority");
    }
}
