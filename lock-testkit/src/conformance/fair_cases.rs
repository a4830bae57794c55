//! Fair-mode cases ([`lock_core::Fairness::Fifo`]): order across
//! independent managers, dead and cancelled waiters, mutual exclusion. A
//! backend without [`lock_core::Capabilities::fair_queue`] must refuse fair
//! locking with [`Error::Unsupported`].

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::raw::FairWaiter;
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{Capabilities, Error, Fairness, LockBackend, LockManager, LockOptions, LockToken, Result};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::LockSuite;

/// Counts the fair attempts that got an answer, so a case can wait until a
/// waiter is queued instead of sleeping.
pub(super) struct Counted {
    inner: Arc<dyn LockBackend>,
    answered: AtomicUsize,
    changed: Notify,
}

impl Counted {
    pub(super) async fn answered_at_least(&self, n: usize) {
        loop {
            let changed = self.changed.notified();
            if self.answered.load(Ordering::SeqCst) >= n {
                return;
            }
            changed.await;
        }
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)] // a wrapper forwards every method
impl LockBackend for Counted {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.inner.try_acquire(key, token, ttl).await
    }
    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.inner.release(key, token).await
    }
    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.inner.renew(key, token, ttl).await
    }
    async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        self.inner.renew_many(items, ttl).await
    }
    async fn wait_for_release(&self, key: &str, max_wait: Duration) {
        self.inner.wait_for_release(key, max_wait).await;
    }
    async fn wait_for_release_opts(&self, key: &str, options: &lock_core::raw::WaitOptions) {
        self.inner.wait_for_release_opts(key, options).await;
    }
    async fn try_acquire_fair(
        &self,
        key: &str,
        token: &LockToken,
        ttl: Duration,
        waiter: &FairWaiter,
    ) -> Result<AcquireOutcome> {
        let out = self.inner.try_acquire_fair(key, token, ttl, waiter).await;
        self.answered.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_waiters();
        out
    }
    async fn wait_fair(&self, key: &str, waiter: &FairWaiter, max_wait: Duration) {
        self.inner.wait_fair(key, waiter, max_wait).await;
    }
    async fn leave_queue(&self, key: &str, waiter: &FairWaiter) -> Result<()> {
        self.inner.leave_queue(key, waiter).await
    }
    async fn inspect(&self, key: &str) -> Result<lock_core::LockInfo> {
        self.inner.inspect(key).await
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn instant(&self) -> Option<&dyn lock_core::raw::InstantLockBackend> {
        None // every call goes through the counter
    }
}

pub(super) fn fair(options: LockOptions, claim: Duration) -> LockOptions {
    options.fairness(Fairness::Fifo { claim })
}

/// A manager with `options` over a new client, and the client's counter.
pub(super) async fn counted(s: &LockSuite, options: LockOptions) -> (LockManager, Arc<Counted>) {
    let backend = Arc::new(Counted {
        inner: s.client().await,
        answered: AtomicUsize::new(0),
        changed: Notify::new(),
    });
    let manager = LockManager::from_arc(backend.clone(), options).expect("valid options");
    (manager, backend)
}

/// True when the backend has a fair queue; otherwise checks that fair
/// locking is refused with `Unsupported` (and the case ends).
async fn supported(s: &LockSuite) -> bool {
    let m = s.manager(s.options().fair()).await;
    if m.backend().capabilities().fair_queue {
        return true;
    }
    let refused = m.lock(&s.key("fair-unsupported")).await;
    assert!(
        matches!(refused, Err(Error::Unsupported { .. })),
        "a backend without a fair queue must refuse fair locking: {refused:?}"
    );
    false
}

/// Waiters of independent managers, queued one after the other while the
/// key is held, get it in that order.
pub async fn fair_waiters_are_served_in_order(s: &LockSuite) {
    if !supported(s).await {
        return;
    }
    let key = s.key("fair-order");
    let claim = s.ttl * 10;
    // Renewed: queueing four waiters one after the other can take longer
    // than one TTL on a loaded machine, and the case is about order.
    let holder = s.manager(fair(s.options(), claim)).await;
    let g = holder.lock(&key).await.expect("first holder");
    let served = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let (m, counter) = counted(s, fair(s.options().acquire_timeout(s.ttl * 40), claim)).await;
        let (key, served) = (key.clone(), served.clone());
        tasks.push(tokio::spawn(async move {
            let g = m.lock(&key).await.expect("queued waiter");
            served.lock().expect("served").push(i);
            assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
        }));
        // Queued (its first attempt answered) before the next one starts.
        counter.answered_at_least(1).await;
    }
    assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
    for t in tasks {
        t.await.expect("waiter");
    }
    assert_eq!(
        *served.lock().expect("served"),
        vec![0, 1, 2, 3],
        "FIFO order across managers"
    );
}

/// A waiter that queued and died (never came back) holds the queue up for
/// about its claim, not for ever and not for a lock TTL.
pub async fn dead_waiter_holds_the_queue_up_for_its_claim_only(s: &LockSuite) {
    if !supported(s).await {
        return;
    }
    let key = s.key("fair-dead");
    let claim = s.ttl / 2;
    let holder = s.manager(fair(s.manual().ttl(s.ttl * 20), claim)).await;
    let g = holder.lock(&key).await.expect("holder");
    // The dead waiter: one attempt, then silence.
    let dead = s.client().await;
    let id = LockToken::generate().expect("token");
    let token = LockToken::generate().expect("token");
    let answer = dead
        .try_acquire_fair(&key, &token, s.ttl, &FairWaiter::new(id, claim))
        .await
        .expect("dead waiter queues");
    assert!(matches!(answer, AcquireOutcome::Held { .. }), "the key is held");
    let (live, counter) = counted(s, fair(s.manual().acquire_timeout(claim * 20), claim)).await;
    let k = key.clone();
    let waiting = tokio::spawn(async move {
        let g = live.lock(&k).await.expect("live waiter behind a dead one");
        (Instant::now(), g)
    });
    counter.answered_at_least(1).await;
    let released = Instant::now();
    assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
    let (granted, g2) = waiting.await.expect("live waiter");
    let delay = granted.duration_since(released);
    assert!(
        delay < claim * 6,
        "the dead waiter held the queue up for {delay:?}, claim {claim:?}"
    );
    assert_eq!(g2.release().await.expect("release"), ReleaseOutcome::Released);
}

/// A waiting `lock()` that is dropped leaves the queue: the waiter behind
/// it gets the key when it is released, long before the dropped waiter's
/// claim would have expired.
pub async fn cancelled_fair_waiter_leaves_the_queue(s: &LockSuite) {
    if !supported(s).await {
        return;
    }
    let key = s.key("fair-cancel");
    // Longer than the second waiter's whole wait: only leaving helps it.
    let claim = s.ttl * 30;
    // Renewed, as in `fair_waiters_are_served_in_order`.
    let holder = s.manager(fair(s.options(), claim)).await;
    let g = holder.lock(&key).await.expect("holder");
    let (first, first_count) = counted(s, fair(s.manual().acquire_timeout(claim * 2), claim)).await;
    let k = key.clone();
    let cancelled = tokio::spawn(async move { first.lock(&k).await.map(drop) });
    first_count.answered_at_least(1).await;
    let (second, second_count) = counted(s, fair(s.manual().acquire_timeout(s.ttl * 8), claim)).await;
    let k = key.clone();
    let waiting = tokio::spawn(async move { second.lock(&k).await });
    second_count.answered_at_least(1).await;
    cancelled.abort();
    let _ = cancelled.await;
    assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
    let g2 = waiting
        .await
        .expect("second waiter")
        .expect("the second waiter gets the key once the first one left");
    assert_eq!(g2.release().await.expect("release"), ReleaseOutcome::Released);
}

/// 32 fair tasks over four managers: the recorded critical sections never
/// overlap, and every task gets its turns.
pub async fn fair_mutual_exclusion_under_32_tasks(s: &LockSuite) {
    if !supported(s).await {
        return;
    }
    let key = s.key("fair-32");
    let rounds = 3;
    let mut managers = Vec::new();
    for _ in 0..4 {
        managers.push(s.manager(s.options().fair().acquire_timeout(s.ttl * 200)).await);
    }
    let intervals = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for t in 0..32 {
        let (m, key, intervals) = (managers[t % 4].clone(), key.clone(), intervals.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let g = m.lock(&key).await.expect("fair lock");
                let start = Instant::now();
                tokio::task::yield_now().await;
                let end = Instant::now();
                intervals.lock().expect("intervals").push((start, end));
                assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let mut all = intervals.lock().expect("intervals").clone();
    assert_eq!(all.len(), 32 * rounds);
    all.sort();
    for pair in all.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "two holders overlapped: {pair:?}");
    }
}
