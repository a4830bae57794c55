//! The fair waiter's pace: behind others it polls once per third of its
//! claim (its entry must not expire); told it is next in line (a zero
//! `retry_after`, from a backend that does not wake its waiters) it polls on
//! the manager's backoff, restarted when it became the head.

#![allow(clippy::expect_used)] // test helpers

use std::sync::Mutex;
use std::time::Duration;

use lock_core::raw::FairWaiter;

use lock_core::{AcquireOutcome, Lease, ReleaseOutcome, RenewOutcome};
use lock_core::{Backoff, Capabilities, LockBackend, LockManager, LockOptions, LockToken, Result};
use tokio::time::Instant;

/// Held until `free_at`; a fair waiter is behind another until `head_at`,
/// then next in line. Records every wait the manager asks for.
struct Queue {
    start: Instant,
    head_at: Duration,
    free_at: Duration,
    waits: Mutex<Vec<(Duration, Duration)>>,
}

#[lock_core::raw::async_trait]
impl LockBackend for Queue {
    async fn try_acquire(&self, _: &str, _: &LockToken, _: Duration) -> Result<AcquireOutcome> {
        Ok(AcquireOutcome::Held { retry_after: None })
    }
    async fn release(&self, _: &str, _: &LockToken) -> Result<ReleaseOutcome> {
        Ok(ReleaseOutcome::Released)
    }
    async fn renew(&self, _: &str, _: &LockToken, _: Duration) -> Result<RenewOutcome> {
        Ok(RenewOutcome::Renewed)
    }
    async fn try_acquire_fair(&self, _: &str, _: &LockToken, _: Duration, _: &FairWaiter) -> Result<AcquireOutcome> {
        let now = self.start.elapsed();
        Ok(if now >= self.free_at {
            AcquireOutcome::Acquired(Lease::new())
        } else if now >= self.head_at {
            AcquireOutcome::Held {
                retry_after: Some(Duration::ZERO),
            }
        } else {
            AcquireOutcome::Held {
                retry_after: Some(self.free_at - now),
            }
        })
    }
    async fn wait_fair(&self, _: &str, _: &FairWaiter, max_wait: Duration) {
        self.waits
            .lock()
            .expect("not poisoned")
            .push((self.start.elapsed(), max_wait));
        tokio::time::sleep(max_wait).await;
    }
    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new("fair-queue");
        caps.fair_queue = true;
        caps
    }
}

#[tokio::test(start_paused = true)]
async fn the_head_polls_on_the_backoff_and_the_others_at_the_claims_pace() {
    let claim = Duration::from_secs(3);
    let backoff = Backoff::new(Duration::from_millis(5), Duration::from_millis(200));
    let backend = std::sync::Arc::new(Queue {
        start: Instant::now(),
        head_at: Duration::from_secs(4),
        free_at: Duration::from_secs(6),
        waits: Mutex::new(Vec::new()),
    });
    let options = LockOptions::with_ttl(Duration::from_secs(10))
        .fairness(lock_core::Fairness::Fifo { claim })
        .backoff(backoff)
        .acquire_timeout(Duration::from_secs(60));
    let locks = LockManager::with_options(backend.clone(), options).expect("options");
    let guard = locks.lock("k").await.expect("granted once free");
    let waits = backend.waits.lock().expect("not poisoned").clone();
    drop(guard);
    let (behind, head): (Vec<_>, Vec<_>) = waits.iter().partition(|(at, _)| *at < Duration::from_secs(4));
    assert!(!behind.is_empty() && !head.is_empty(), "{waits:?}");
    for (at, wait) in &behind {
        assert!(*wait <= claim / 3, "behind the head at {at:?}: {wait:?}");
        assert!(
            *wait >= Duration::from_secs(1) - Duration::from_millis(1),
            "behind the head at {at:?}: {wait:?} (no faster than the claim needs)"
        );
    }
    // Restarted at 5 ms, doubling to 200 ms (jittered below each ceiling).
    let ceilings = [5u64, 10, 20, 40, 80, 160].into_iter().chain(std::iter::repeat(200));
    for ((at, wait), ceiling) in head.iter().zip(ceilings) {
        assert!(
            *wait <= Duration::from_millis(ceiling),
            "the head at {at:?}: {wait:?} above {ceiling} ms"
        );
    }
    let last = head.last().map(|(at, _)| *at).unwrap_or_default();
    assert!(last < Duration::from_secs(6), "{head:?}");
    // Not every millisecond either (a zero hint is not "retry at once"):
    // about 20 polls in 2 s on this backoff.
    assert!(
        (8..100).contains(&head.len()),
        "the head polled {} times in 2 s",
        head.len()
    );
}
