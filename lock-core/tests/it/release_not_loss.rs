//! A release ends a lease on purpose: it is never logged or reported as a
//! loss, even when a renewal sent before it answers after it.

#![allow(clippy::expect_used)] // test helpers

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::ReleaseOutcome;
use lock_core::{LockBackend, LockManager, LockOptions, LossReason};
use lock_memory::MemoryBackend;
use lock_testkit::FaultyBackend;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

/// Counts events at WARN or above.
#[derive(Clone, Default)]
struct Warnings(Arc<AtomicUsize>);

impl<S: Subscriber> Layer<S> for Warnings {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if *event.metadata().level() <= Level::WARN {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_release_with_a_renewal_in_flight_is_not_a_loss() {
    let warnings = Warnings::default();
    let _log = tracing::subscriber::set_default(tracing_subscriber::registry().with(warnings.clone()));
    let memory = MemoryBackend::new();
    let (faulty, control) = FaultyBackend::new(Arc::new(memory.clone()));
    let backend: Arc<dyn LockBackend> = Arc::new(faulty);
    let locks = LockManager::from_arc(backend, LockOptions::with_ttl(Duration::from_secs(3))).expect("options");
    let guard = locks.lock("k").await.expect("lock");
    let lease = guard.handle();
    // The first renewal (due within a second) sleeps a second before it
    // reaches the backend; the release goes straight through before it.
    tokio::time::sleep(Duration::from_millis(400)).await;
    control.set_latency(Duration::from_secs(1));
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(control.counts().renew > 0, "the renewal is in flight");
    control.heal();
    assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Released);
    // The renewal lands after the release and finds no key.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        lease.lost().await,
        LossReason::Released,
        "the lease ended by its release"
    );
    assert_eq!(
        warnings.0.load(Ordering::SeqCst),
        0,
        "a clean release was logged as a problem"
    );
}
