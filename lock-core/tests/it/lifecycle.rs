//! Manager, guard and renewer behaviour under faults, on the memory backend
//! behind the fault-injecting wrapper, in paused time.

#![allow(clippy::expect_used)] // test helpers

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Error, LockBackend, LockManager, LockOptions, LossReason, Renewal};

use lock_core::ReleaseOutcome;
use lock_memory::MemoryBackend;
use lock_testkit::{Fault, FaultControl, FaultyBackend};

const TTL: Duration = Duration::from_secs(3);

fn faulty(memory: &MemoryBackend) -> (Arc<dyn LockBackend>, FaultControl) {
    let (backend, control) = FaultyBackend::new(Arc::new(memory.clone()));
    (Arc::new(backend), control)
}

fn manager(backend: Arc<dyn LockBackend>, options: LockOptions) -> LockManager {
    LockManager::from_arc(backend, options).expect("valid options")
}

#[tokio::test(start_paused = true)]
async fn transient_renew_failures_shorter_than_validity_keep_the_lock() {
    let memory = MemoryBackend::new();
    let (backend, control) = faulty(&memory);
    let locks = manager(backend, LockOptions::with_ttl(TTL));
    let guard = locks.lock("k").await.expect("lock");
    // Renewals fail for most of a TTL window, then recover before the deadline.
    tokio::time::sleep(TTL / 3 - Duration::from_millis(10)).await;
    control.set(Fault::Fail);
    tokio::time::sleep(TTL / 2).await;
    assert!(!guard.is_lost());
    control.heal();
    tokio::time::sleep(TTL * 3).await;
    assert!(
        !guard.is_lost(),
        "a renewal that succeeds before the deadline keeps the lease"
    );
    assert!(
        control.counts().renew >= 5,
        "the renewer retried: {:?}",
        control.counts()
    );
    assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Released);
}

#[tokio::test(start_paused = true)]
async fn renewals_timing_out_until_the_deadline_lose_the_lease() {
    let memory = MemoryBackend::new();
    let (backend, control) = faulty(&memory);
    let locks = manager(backend, LockOptions::with_ttl(TTL));
    let guard = locks.lock("k").await.expect("lock");
    let deadline = guard.deadline();
    control.set(Fault::Hang);
    let reason = guard.lost().await;
    assert_eq!(reason, LossReason::DeadlinePassed);
    assert_eq!(
        tokio::time::Instant::now(),
        deadline,
        "paused clock: fired exactly at the deadline"
    );
    // The server-side key still has the drift allowance left: nobody else
    // could have acquired before we knew.
    assert!(memory.lock_ttl("k").is_some_and(|t| t > Duration::ZERO));
}

#[tokio::test(start_paused = true)]
async fn no_renewals_after_release_or_drop() {
    let memory = MemoryBackend::new();
    let (backend, control) = faulty(&memory);
    let locks = manager(backend, LockOptions::with_ttl(TTL));
    let released = locks.lock("a").await.expect("lock");
    let dropped = locks.lock("b").await.expect("lock");
    tokio::time::sleep(TTL).await;
    let renews = control.counts().renew;
    assert!(renews >= 4, "both renewed while held");
    released.release().await.expect("release");
    drop(dropped);
    tokio::time::sleep(TTL * 10).await;
    assert_eq!(control.counts().renew, renews, "no orphan renewals");
    assert_eq!(memory.lock_ttl("a"), None);
    assert_eq!(memory.lock_ttl("b"), None, "drop released the key");
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_acquire_leaves_no_lock_behind() {
    let memory = MemoryBackend::new();
    let (backend, control) = faulty(&memory);
    let locks = manager(backend, LockOptions::with_ttl(Duration::from_secs(60)));
    control.set(Fault::ApplyThenHang); // the SET lands, the reply never comes
    let cancelled = tokio::time::timeout(Duration::from_millis(50), locks.lock("k")).await;
    assert!(cancelled.is_err(), "the acquire was cancelled");
    control.heal();
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(memory.lock_ttl("k"), None, "the dropped acquire's token was released");
}

#[tokio::test(start_paused = true)]
async fn an_acquire_timing_out_on_a_hung_backend_is_unknown_and_cleaned_up() {
    let memory = MemoryBackend::new();
    let (backend, control) = faulty(&memory);
    let options = LockOptions::with_ttl(Duration::from_secs(60)).op_timeout(Duration::from_millis(100));
    let locks = manager(backend, options);
    control.set(Fault::ApplyThenHang);
    let err = locks.try_lock("k").await.expect_err("times out");
    assert!(err.is_outcome_unknown(), "{err}");
    assert!(err.to_string().contains("outcome unknown"), "{err}");
    control.heal();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(memory.lock_ttl("k"), None);
}

#[tokio::test(start_paused = true)]
async fn lock_reports_the_backend_error_when_the_backend_keeps_failing() {
    let memory = MemoryBackend::new();
    let (backend, control) = faulty(&memory);
    let options = LockOptions::with_ttl(TTL).acquire_timeout(Duration::from_secs(1));
    let locks = manager(backend, options);
    control.set(Fault::Fail);
    let err = locks.lock("k").await.expect_err("backend down");
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    assert!(control.counts().acquire > 1, "retried within the acquire timeout");
}

#[tokio::test(start_paused = true)]
async fn manual_renewal_never_renews() {
    let memory = MemoryBackend::new();
    let (backend, control) = faulty(&memory);
    let locks = manager(backend, LockOptions::with_ttl(TTL).renewal(Renewal::Manual));
    let guard = locks.lock("k").await.expect("lock");
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(control.counts().renew, 0);
    assert!(guard.is_lost());
    let err = guard.extend(TTL).await.expect_err("lost");
    assert!(matches!(err, Error::NotHeld { .. }));
}

#[tokio::test(start_paused = true)]
async fn waiters_are_woken_by_release_not_by_polling() {
    let memory = MemoryBackend::new();
    let (backend, control) = faulty(&memory);
    let locks = manager(backend, LockOptions::with_ttl(Duration::from_secs(60)));
    let holder = locks.lock("k").await.expect("lock");
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock("k").await.map(|g| (g, tokio::time::Instant::now())) })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let attempts_while_held = control.counts().acquire;
    let released_at = tokio::time::Instant::now();
    holder.release().await.expect("release");
    let (guard, acquired_at) = waiter.await.expect("task").expect("waiter acquires");
    assert_eq!(acquired_at, released_at, "woken at the release, not at the next poll");
    // Backoff caps at 200 ms, so 2 s of waiting is at most ~a dozen attempts.
    assert!(
        attempts_while_held < 40,
        "{attempts_while_held} attempts: polling too hard"
    );
    drop(guard);
}

#[test]
fn dropping_a_guard_outside_a_runtime_does_not_panic() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let memory = MemoryBackend::new();
    let guard = runtime.block_on(async {
        let locks = LockManager::new(memory.clone()).expect("manager");
        locks.lock("k").await.expect("lock")
    });
    drop(runtime);
    // No runtime to hand the release to: a backend that answers at once
    // releases right away (a server's key would wait for its TTL).
    drop(guard);
    assert!(
        memory.lock_ttl("k").is_none(),
        "the memory backend's key is released by a drop outside a runtime"
    );
}

#[tokio::test(start_paused = true)]
async fn release_future_dropped_mid_flight_still_releases() {
    let memory = MemoryBackend::new();
    let (backend, control) = faulty(&memory);
    let locks = manager(backend, LockOptions::with_ttl(Duration::from_secs(60)));
    let guard = locks.lock("k").await.expect("lock");
    control.set_latency(Duration::from_millis(100));
    let cancelled = tokio::time::timeout(Duration::from_millis(10), guard.release()).await;
    assert!(cancelled.is_err());
    control.heal();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(memory.lock_ttl("k"), None, "the guard's drop re-scheduled the release");
}

#[tokio::test(start_paused = true)]
async fn waiters_of_one_manager_are_served_in_arrival_order() {
    let memory = MemoryBackend::new();
    let (backend, control) = faulty(&memory);
    let locks = manager(backend, LockOptions::with_ttl(Duration::from_secs(60)));
    let holder = locks.lock("k").await.expect("lock");
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for id in 0..6 {
        let (locks, order) = (locks.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let guard = locks.lock("k").await.expect("lock");
            order.lock().expect("order").push(id);
            tokio::time::sleep(Duration::from_millis(1)).await;
            guard.release().await.expect("release");
        }));
        tokio::time::sleep(Duration::from_millis(3)).await; // fixes the arrival order
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let polls_while_held = control.counts().acquire;
    holder.release().await.expect("release");
    for w in waiters {
        w.await.expect("waiter");
    }
    assert_eq!(
        *order.lock().expect("order"),
        vec![0, 1, 2, 3, 4, 5],
        "local FIFO hand-off"
    );
    // Only the head of the line polls the backend while the key is held.
    assert!(polls_while_held < 25, "{polls_while_held} polls: waiters are herding");
}

#[tokio::test(start_paused = true)]
async fn renewals_due_together_share_one_backend_call() {
    let memory = MemoryBackend::new();
    let (backend, control) = faulty(&memory);
    let locks = manager(backend, LockOptions::with_ttl(TTL));
    let mut guards = Vec::new();
    for i in 0..50 {
        guards.push(locks.lock(&format!("k{i}")).await.expect("lock"));
    }
    tokio::time::sleep(TTL * 2).await;
    let counts = control.counts();
    assert!(counts.renew >= 100, "every lease renewed: {counts:?}");
    assert!(
        counts.renew_batches * 10 <= counts.renew,
        "renewals were not batched: {counts:?}"
    );
    assert!(guards.iter().all(|g| !g.is_lost()));
}

#[tokio::test(start_paused = true)]
async fn release_is_not_capped_by_the_remaining_validity() {
    let memory = MemoryBackend::new();
    let (backend, control) = faulty(&memory);
    // 1 s on the server, ≈ 0.6 s of local validity.
    let options = LockOptions::with_ttl(Duration::from_secs(1))
        .renewal(Renewal::Manual)
        .drift_factor(0.4);
    let locks = manager(backend, options);
    let guard = locks.lock("k").await.expect("lock");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(guard.remaining() < Duration::from_millis(150));
    // Slower than the remaining validity, faster than op_timeout (2 s) and
    // than the server's TTL: the release still lands and says so.
    control.set_latency(Duration::from_millis(300));
    assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Released);
    assert_eq!(memory.lock_ttl("k"), None);
}

/// A backend that answers `Held` without the holder's remaining TTL.
struct NoHint(MemoryBackend);

#[async_trait::async_trait]
impl LockBackend for NoHint {
    fn capabilities(&self) -> lock_core::Capabilities {
        self.0.capabilities()
    }
    async fn try_acquire(
        &self,
        key: &str,
        token: &lock_core::LockToken,
        ttl: Duration,
    ) -> lock_core::Result<lock_core::AcquireOutcome> {
        match self.0.try_acquire(key, token, ttl).await? {
            lock_core::AcquireOutcome::Held { .. } => Ok(lock_core::AcquireOutcome::Held { retry_after: None }),
            other => Ok(other),
        }
    }
    async fn release(&self, key: &str, token: &lock_core::LockToken) -> lock_core::Result<ReleaseOutcome> {
        self.0.release(key, token).await
    }
    async fn renew(
        &self,
        key: &str,
        token: &lock_core::LockToken,
        ttl: Duration,
    ) -> lock_core::Result<lock_core::RenewOutcome> {
        self.0.renew(key, token, ttl).await
    }
    async fn wait_for_release(&self, key: &str, max_wait: Duration) {
        self.0.wait_for_release(key, max_wait).await;
    }
}

/// How late after the holder's expiry a waiter gets the key, in `rounds`
/// crashed-holder rounds (paused clock: exact).
async fn lateness_after_expiry(memory: &MemoryBackend, waiter: &LockManager, rounds: usize) -> Vec<Duration> {
    let mut lateness = Vec::new();
    for round in 0..rounds {
        let key = format!("crash-{round}");
        // A crashed holder: acquired, then neither renewed nor released.
        let crashed = lock_core::LockToken::generate().expect("token");
        let acquired = memory
            .try_acquire(&key, &crashed, Duration::from_millis(150))
            .await
            .expect("acquire");
        assert!(matches!(acquired, lock_core::AcquireOutcome::Acquired(_)));
        let expires = tokio::time::Instant::now() + memory.lock_ttl(&key).expect("held");
        let guard = waiter.lock(&key).await.expect("waiter acquires after expiry");
        lateness.push(tokio::time::Instant::now().saturating_duration_since(expires));
        guard.release().await.expect("release");
    }
    lateness
}

/// README: waiting is capped by the holder's remaining TTL. With the hint a
/// waiter retries right at the expiry of a crashed holder; without it, it
/// sleeps its jittered backoff (up to 200 ms) past it — which shows this
/// test can fail.
#[tokio::test(start_paused = true)]
async fn waiting_is_capped_by_the_holders_remaining_ttl() {
    let memory = MemoryBackend::new();
    let options = LockOptions::with_ttl(TTL).acquire_timeout(Duration::from_secs(5));
    let hinted = manager(Arc::new(memory.clone()), options.clone());
    let lateness = lateness_after_expiry(&memory, &hinted, 10).await;
    assert!(
        lateness.iter().all(|l| *l <= Duration::from_millis(2)),
        "the waiter must retry at the holder's expiry: {lateness:?}"
    );
    let blind = manager(Arc::new(NoHint(memory.clone())), options);
    let lateness = lateness_after_expiry(&memory, &blind, 10).await;
    assert!(
        lateness.iter().any(|l| *l > Duration::from_millis(2)),
        "without the hint the backoff overshoots: {lateness:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_stops_every_renewal_including_later_guards() {
    let memory = MemoryBackend::new();
    let (backend, control) = faulty(&memory);
    let locks = manager(backend, LockOptions::with_ttl(TTL));
    let before = locks.lock("before").await.expect("lock");
    tokio::time::sleep(TTL).await;
    assert!(control.counts().renew >= 2, "renewed while held");
    locks.shutdown();
    let after = locks.lock("after").await.expect("lock");
    let renews = control.counts().renew;
    tokio::time::sleep(TTL * 3).await;
    assert_eq!(control.counts().renew, renews, "no renewal after shutdown");
    assert_eq!(before.lost().await, LossReason::DeadlinePassed);
    assert_eq!(after.lost().await, LossReason::DeadlinePassed);
}

#[tokio::test(start_paused = true)]
async fn many_short_held_guards_leave_only_the_held_leases_renewed() {
    let memory = MemoryBackend::new();
    let (backend, control) = faulty(&memory);
    let locks = manager(backend, LockOptions::with_ttl(TTL));
    for i in 0..1_000 {
        locks
            .lock(&format!("short{i}"))
            .await
            .expect("lock")
            .release()
            .await
            .expect("release");
    }
    let held = locks.lock("held").await.expect("lock");
    tokio::time::sleep(TTL * 2).await;
    let counts = control.counts();
    assert!(
        (4..=8).contains(&counts.renew),
        "only the held lease is renewed, about every TTL / 3: {counts:?}"
    );
    assert!(!held.is_lost());
}
