//! A fault-injecting wrapper around any [`LockBackend`]: added latency,
//! failures (with known or unknown outcome), hangs, all switchable at runtime,
//! so the manager's loss and timeout paths are tested without a server.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::raw::{FairWaiter, InstantLockBackend};
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{Capabilities, Error, LockBackend, LockToken, Result};

/// The fault currently injected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Fault {
    /// Pass everything through.
    #[default]
    None,
    /// Never answer (the future stays pending until dropped).
    Hang,
    /// Fail before reaching the backend (outcome known: nothing applied).
    Fail,
    /// Apply the operation, then report an unknown outcome (like a reply
    /// lost to a timeout).
    ApplyThenLose,
    /// Apply the operation, then never answer (the reply is stuck).
    ApplyThenHang,
}

#[derive(Debug, Default)]
struct Settings {
    fault: Fault,
    latency: Duration,
}

/// How many calls of each kind reached the wrapper.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CallCounts {
    /// `try_acquire` and `try_acquire_fair` calls.
    pub acquire: u64,
    /// `release` calls.
    pub release: u64,
    /// Leases renewed (`renew` calls plus items of `renew_many` calls).
    pub renew: u64,
    /// `renew_many` calls (batches).
    pub renew_batches: u64,
}

/// Switches for a [`FaultyBackend`]; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct FaultControl {
    settings: Arc<Mutex<Settings>>,
    counts: Arc<Mutex<CallCounts>>,
}

impl FaultControl {
    fn with<R>(&self, f: impl FnOnce(&mut Settings) -> R) -> R {
        match self.settings.lock() {
            Ok(mut s) => f(&mut s),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    /// Inject `fault` into every later call.
    pub fn set(&self, fault: Fault) {
        self.with(|s| s.fault = fault);
    }

    /// Add `latency` before every later call.
    pub fn set_latency(&self, latency: Duration) {
        self.with(|s| s.latency = latency);
    }

    /// Back to normal.
    pub fn heal(&self) {
        self.with(|s| *s = Settings::default());
    }

    fn current(&self) -> (Fault, Duration) {
        self.with(|s| (s.fault, s.latency))
    }

    /// Calls seen so far (whatever the fault).
    pub fn counts(&self) -> CallCounts {
        match self.counts.lock() {
            Ok(c) => *c,
            Err(poisoned) => *poisoned.into_inner(),
        }
    }

    fn count(&self, f: impl FnOnce(&mut CallCounts)) {
        match self.counts.lock() {
            Ok(mut c) => f(&mut c),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }
}

/// Wraps a backend and injects the faults set on its [`FaultControl`].
///
/// Every call that reaches the server takes the fault: acquire (plain and
/// fair), release, renew, `renew_many`, leaving a fair queue and `inspect`. The waits
/// (`wait_for_release`, `wait_fair`) are hints and pass through untouched.
/// The wrapped backend's [`LockBackend::instant`] is never used, so every
/// call goes through the wrapper.
pub struct FaultyBackend {
    inner: Arc<dyn LockBackend>,
    control: FaultControl,
}

impl FaultyBackend {
    /// Wrap `inner`; returns the backend and its switches.
    pub fn new(inner: Arc<dyn LockBackend>) -> (Self, FaultControl) {
        let control = FaultControl::default();
        (
            FaultyBackend {
                inner,
                control: control.clone(),
            },
            control,
        )
    }

    async fn run<T: Send>(&self, op: impl std::future::Future<Output = Result<T>> + Send) -> Result<T> {
        let (fault, latency) = self.control.current();
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        match fault {
            Fault::None => op.await,
            Fault::Hang => std::future::pending().await,
            Fault::Fail => Err(Error::backend("faulty", "injected failure")),
            Fault::ApplyThenLose => {
                let _ = op.await;
                Err(Error::outcome_unknown("faulty", "injected lost reply"))
            }
            Fault::ApplyThenHang => {
                let _ = op.await;
                std::future::pending().await
            }
        }
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)] // a wrapper forwards every method
impl LockBackend for FaultyBackend {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.control.count(|c| c.acquire += 1);
        self.run(self.inner.try_acquire(key, token, ttl)).await
    }
    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.control.count(|c| c.release += 1);
        self.run(self.inner.release(key, token)).await
    }
    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.control.count(|c| c.renew += 1);
        self.run(self.inner.renew(key, token, ttl)).await
    }
    async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        self.control.count(|c| {
            c.renew += items.len() as u64;
            c.renew_batches += 1;
        });
        let (fault, latency) = self.control.current();
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let all = |e: fn() -> Error| items.iter().map(|_| Err(e())).collect::<Vec<_>>();
        match fault {
            Fault::None => self.inner.renew_many(items, ttl).await,
            Fault::Hang => std::future::pending().await,
            Fault::Fail => all(|| Error::backend("faulty", "injected failure")),
            Fault::ApplyThenLose => {
                let _ = self.inner.renew_many(items, ttl).await;
                all(|| Error::outcome_unknown("faulty", "injected lost reply"))
            }
            Fault::ApplyThenHang => {
                let _ = self.inner.renew_many(items, ttl).await;
                std::future::pending().await
            }
        }
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
        self.control.count(|c| c.acquire += 1);
        self.run(self.inner.try_acquire_fair(key, token, ttl, waiter)).await
    }
    async fn wait_fair(&self, key: &str, waiter: &FairWaiter, max_wait: Duration) {
        self.inner.wait_fair(key, waiter, max_wait).await;
    }
    async fn leave_queue(&self, key: &str, waiter: &FairWaiter) -> Result<()> {
        self.run(self.inner.leave_queue(key, waiter)).await
    }
    async fn inspect(&self, key: &str) -> Result<lock_core::LockInfo> {
        self.run(self.inner.inspect(key)).await
    }
    fn capabilities(&self) -> Capabilities {
        let mut caps = self.inner.capabilities();
        caps.name = format!("faulty({})", caps.name);
        caps
    }
    fn instant(&self) -> Option<&dyn InstantLockBackend> {
        None // every call goes through the faults
    }
}
