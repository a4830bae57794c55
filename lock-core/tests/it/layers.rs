//! Every layer keeps the backend contract: the conformance suite runs against
//! the memory backend behind each of them (paused clock), fair mode included,
//! and behind the fault-injecting wrapper of lock-testkit (no fault set),
//! plus what is particular to each layer.

#![allow(clippy::expect_used)] // test helpers

use lock_core::layers::{PrefixLayer, TracingLayer};
use lock_core::{LockBackend, LockManager, VersionedStore};
use lock_memory::MemoryBackend;
use lock_testkit::{LockSuite, VersionedSuite};

async fn lock_suite<B: LockBackend + Clone>(backend: B) -> LockSuite {
    LockSuite::new(move || {
        let b = backend.clone();
        async move { b }
    })
}

async fn versioned_suite<S: VersionedStore + Clone>(store: S) -> VersionedSuite {
    VersionedSuite::new(move || {
        let s = store.clone();
        async move { s }
    })
}

mod prefix {
    use super::*;
    fn backend() -> PrefixLayer<MemoryBackend> {
        PrefixLayer::new(MemoryBackend::new(), "tenant-a:")
    }
    lock_testkit::lock_conformance!(paused, lock_suite(backend()));
    mod fair {
        use super::*;
        lock_testkit::fair_conformance!(paused, lock_suite(backend()));
    }
    mod versioned {
        use super::*;
        lock_testkit::versioned_conformance!(paused, versioned_suite(backend()));
    }
}

mod tracing_layer {
    use super::*;
    fn backend() -> TracingLayer<MemoryBackend> {
        TracingLayer::new(MemoryBackend::new())
    }
    lock_testkit::lock_conformance!(paused, lock_suite(backend()));
    mod fair {
        use super::*;
        lock_testkit::fair_conformance!(paused, lock_suite(backend()));
    }
    mod versioned {
        use super::*;
        lock_testkit::versioned_conformance!(paused, versioned_suite(backend()));
    }
}

#[cfg(feature = "metrics")]
mod metrics_layer {
    use super::*;
    use lock_core::layers::MetricsLayer;
    fn backend() -> MetricsLayer<MemoryBackend> {
        MetricsLayer::new(MemoryBackend::new())
    }
    lock_testkit::lock_conformance!(paused, lock_suite(backend()));
    mod fair {
        use super::*;
        lock_testkit::fair_conformance!(paused, lock_suite(backend()));
    }
    mod versioned {
        use super::*;
        lock_testkit::versioned_conformance!(paused, versioned_suite(backend()));
    }
}

/// lock-testkit's fault injector with no fault set: a wrapper like the
/// layers, so the same contract, fair mode included.
mod faulty {
    use super::*;
    use lock_testkit::FaultyBackend;
    fn backend() -> std::sync::Arc<FaultyBackend> {
        std::sync::Arc::new(FaultyBackend::new(std::sync::Arc::new(MemoryBackend::new())).0)
    }
    lock_testkit::lock_conformance!(paused, lock_suite(backend()));
    mod fair {
        use super::*;
        lock_testkit::fair_conformance!(paused, lock_suite(backend()));
    }
}

/// The fair cases above take the `Unsupported` branch for a backend that
/// does not claim a fair queue: every wrapper of the memory backend claims
/// one, so they run the real cases.
#[test]
fn every_wrapper_claims_the_fair_queue_it_forwards() {
    assert!(MemoryBackend::new().capabilities().fair_queue);
    let wrapped = [
        PrefixLayer::new(MemoryBackend::new(), "tenant-a:").capabilities(),
        TracingLayer::new(MemoryBackend::new()).capabilities(),
        #[cfg(feature = "metrics")]
        lock_core::layers::MetricsLayer::new(MemoryBackend::new()).capabilities(),
        lock_testkit::FaultyBackend::new(std::sync::Arc::new(MemoryBackend::new()))
            .0
            .capabilities(),
    ];
    for caps in wrapped {
        assert!(caps.fair_queue, "{caps:?}");
    }
}

/// A fair lock through the fault injector takes its faults like any acquire.
#[tokio::test(start_paused = true)]
async fn fair_acquires_through_the_fault_injector_take_its_faults() {
    use lock_core::{Fairness, LockOptions};
    use lock_testkit::{Fault, FaultyBackend};
    let (faulty, control) = FaultyBackend::new(std::sync::Arc::new(MemoryBackend::new()));
    let fifo = LockOptions::default().fairness(Fairness::Fifo {
        claim: lock_core::Fairness::DEFAULT_CLAIM,
    });
    let locks = LockManager::with_options(faulty, fifo).expect("valid options");
    let guard = locks.try_lock("k").await.expect("fair try_lock").expect("free");
    assert_eq!(control.counts().acquire, 1, "the fair acquire went through the wrapper");
    guard.release().await.expect("release");
    control.set(Fault::Fail);
    let err = locks.try_lock("k").await.expect_err("injected failure");
    assert!(matches!(err, lock_core::Error::Backend { .. }), "{err}");
    control.heal();
    assert!(locks.try_lock("k").await.expect("healed").is_some());
}

#[tokio::test(start_paused = true)]
async fn prefixes_keep_tenants_apart_on_one_server() {
    let server = MemoryBackend::new();
    let a = LockManager::new(PrefixLayer::new(server.clone(), "a:")).expect("manager");
    let b = LockManager::new(PrefixLayer::new(server.clone(), "b:")).expect("manager");
    let held_by_a = a.lock("orders:1").await.expect("a locks");
    let held_by_b = b.try_lock("orders:1").await.expect("b tries");
    assert!(held_by_b.is_some(), "same key, other tenant: no contention");
    assert!(
        server.lock_ttl("a:orders:1").is_some(),
        "the server sees the prefixed key"
    );
    assert!(server.lock_ttl("orders:1").is_none());
    assert!(
        a.try_lock("orders:1").await.expect("a tries").is_none(),
        "same tenant contends"
    );
    drop(held_by_a);
}

#[tokio::test]
async fn prefix_refuses_an_empty_key() {
    let layer = PrefixLayer::new(MemoryBackend::new(), "a:");
    let token = lock_core::LockToken::generate().expect("token");
    let err = layer
        .try_acquire("", &token, std::time::Duration::from_secs(1))
        .await
        .expect_err("empty key");
    assert!(matches!(err, lock_core::Error::InvalidArgument(_)), "{err}");
    assert!(matches!(layer.get("").await, Err(lock_core::Error::InvalidArgument(_))));
}

/// A layer implements only the mutex (and the versioned store), so its
/// capabilities must not claim the kinds its inner backend has: a layered
/// backend cannot be handed to a `SemaphoreManager` and friends.
#[test]
fn layers_claim_no_lock_kinds_they_do_not_implement() {
    let inner = MemoryBackend::new().capabilities();
    assert!(inner.semaphores && inner.multi_key_locks && inner.rw_locks && inner.leader_election);
    let layered = [
        PrefixLayer::new(MemoryBackend::new(), "tenant-a:").capabilities(),
        TracingLayer::new(MemoryBackend::new()).capabilities(),
        #[cfg(feature = "metrics")]
        lock_core::layers::MetricsLayer::new(MemoryBackend::new()).capabilities(),
    ];
    for caps in layered {
        assert!(
            !(caps.semaphores || caps.multi_key_locks || caps.rw_locks || caps.leader_election),
            "{caps:?}"
        );
        assert!(
            caps.fencing_tokens,
            "the mutex's own capabilities pass through: {caps:?}"
        );
    }
}
