//! The owned lock guard, its shareable lease view, and the loss signal.

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backend::{LockBackend, ReleaseOutcome, RenewOutcome, Replication};
use crate::error::{Error, LossReason, NotHeldReason, Result};
use crate::lane::Lanes;
use crate::options::validate_ttl;
use crate::token::{FencingToken, LockToken};

/// State shared by a guard, its lease handles and its renewer.
pub(crate) struct LeaseState {
    pub(crate) backend: Arc<dyn LockBackend>,
    pub(crate) key: String,
    pub(crate) token: LockToken,
    pub(crate) fencing_token: Option<FencingToken>,
    pub(crate) replication: Replication,
    pub(crate) acquired_at: Instant,
    pub(crate) drift_factor: f64,
    /// (start of the op that set it, deadline). Only an op that started later
    /// may replace it, so a slow reply cannot move the deadline backwards past
    /// a newer renewal.
    validity: Mutex<(Instant, Instant)>,
    lost: CancellationToken,
    loss_reason: OnceLock<LossReason>,
    /// The manager's lanes: the head waiter for this key is told when we release.
    lanes: Option<Lanes>,
    pub(crate) observed: crate::observe::LeaseObs,
}

/// What the manager knows right after a successful acquire.
pub(crate) struct Grant {
    pub(crate) key: String,
    pub(crate) token: LockToken,
    pub(crate) lease: crate::backend::Lease,
    /// When the winning request was sent.
    pub(crate) sent_at: Instant,
    /// `sent_at` + validity.
    pub(crate) deadline: Instant,
}

impl LeaseState {
    pub(crate) fn new(backend: Arc<dyn LockBackend>, grant: Grant, drift_factor: f64, lanes: Option<Lanes>) -> Self {
        LeaseState {
            backend,
            key: grant.key,
            token: grant.token,
            fencing_token: grant.lease.fencing_token,
            replication: grant.lease.replication,
            acquired_at: grant.sent_at,
            drift_factor,
            validity: Mutex::new((grant.sent_at, grant.deadline)),
            lost: CancellationToken::new(),
            loss_reason: OnceLock::new(),
            lanes,
            observed: Default::default(),
        }
    }

    pub(crate) fn deadline(&self) -> Instant {
        match self.validity.lock() {
            Ok(v) => v.1,
            Err(poisoned) => poisoned.into_inner().1,
        }
    }

    /// The deadline a successful renewal sent at `sent_at` with `ttl` earns.
    pub(crate) fn deadline_for(&self, sent_at: Instant, ttl: Duration) -> Instant {
        sent_at + ttl.saturating_sub(crate::options::clock_drift(ttl, self.drift_factor))
    }

    pub(crate) fn renewed(&self, sent_at: Instant, ttl: Duration) {
        if self.is_lost() {
            return; // loss is sticky: the holder was already told
        }
        crate::observe::renewed(self, sent_at);
        let deadline = self.deadline_for(sent_at, ttl);
        let mut v = match self.validity.lock() {
            Ok(v) => v,
            Err(poisoned) => poisoned.into_inner(),
        };
        if sent_at >= v.0 {
            *v = (sent_at, deadline);
        }
    }

    pub(crate) fn mark_lost(&self, reason: LossReason) {
        if self.loss_reason.set(reason).is_ok() {
            crate::observe::lost(self, reason);
        }
        self.lost.cancel();
    }

    /// Lost by signal, or past the deadline (which then becomes the signal).
    pub(crate) fn is_lost(&self) -> bool {
        if self.lost.is_cancelled() {
            return true;
        }
        if Instant::now() >= self.deadline() {
            self.mark_lost(LossReason::DeadlinePassed);
            return true;
        }
        false
    }

    fn reason(&self) -> LossReason {
        self.loss_reason.get().copied().unwrap_or(LossReason::DeadlinePassed)
    }

    pub(crate) async fn wait_lost(self: Arc<Self>) -> LossReason {
        loop {
            let deadline = self.deadline();
            tokio::select! {
                () = self.lost.cancelled() => return self.reason(),
                () = tokio::time::sleep_until(deadline) => {
                    if self.is_lost() {
                        return self.reason();
                    }
                }
            }
        }
    }
}

/// A cheap, cloneable view of a held lease: who, until when, and a loss
/// signal. Handed to `with_lock` bodies; it cannot release the lock.
#[derive(Clone)]
pub struct LeaseHandle {
    pub(crate) state: Arc<LeaseState>,
}

impl std::fmt::Debug for LeaseHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseHandle")
            .field("key", &self.state.key)
            .field("fencing_token", &self.state.fencing_token)
            .field("remaining", &self.remaining())
            .field("lost", &self.state.lost.is_cancelled())
            .finish()
    }
}

impl LeaseHandle {
    /// The locked key.
    pub fn key(&self) -> &str {
        &self.state.key
    }

    /// This acquisition's owner token.
    pub fn token(&self) -> &LockToken {
        &self.state.token
    }

    /// This grant's fencing token, if the backend issues them.
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.state.fencing_token
    }

    /// Replica acknowledgement of the acquire, if the backend checked.
    pub fn replication(&self) -> Replication {
        self.state.replication
    }

    /// When the request that won the lock was sent.
    pub fn acquired_at(&self) -> Instant {
        self.state.acquired_at
    }

    /// The local validity deadline (tokio's monotonic clock). Computed from
    /// the moment *before* the last successful acquire or renew was sent,
    /// minus the drift allowance, so it passes before the server's TTL can.
    pub fn deadline(&self) -> Instant {
        self.state.deadline()
    }

    /// Time left before the local deadline (zero once passed).
    pub fn remaining(&self) -> Duration {
        self.deadline().saturating_duration_since(Instant::now())
    }

    /// True once the lease is lost: a renewal found another owner (or no
    /// key), or the local deadline passed without a successful renewal.
    pub fn is_lost(&self) -> bool {
        self.state.is_lost()
    }

    /// Resolves when the lease is lost (see [`LeaseHandle::is_lost`]). The
    /// future is `'static`: it can be moved into a `select!` or a task.
    pub fn lost(&self) -> impl Future<Output = LossReason> + Send + 'static {
        self.state.clone().wait_lost()
    }

    /// A [`CancellationToken`] cancelled when the lease is lost, to plug the
    /// loss into tokio-util cancellation trees (`child_token`,
    /// `run_until_cancelled`, `select!` on `cancelled()`). Cancelling it
    /// yourself only cancels your token, never the lease.
    ///
    /// Besides a signalled loss it fires when the local deadline passes: a
    /// small task on the current tokio runtime watches for that (called
    /// outside a runtime, only a signalled loss cancels it). After a release
    /// the deadline no longer moves, so the token fires at it.
    pub fn lost_token(&self) -> CancellationToken {
        let token = self.state.lost.child_token();
        if !token.is_cancelled()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let state = self.state.clone();
            let watched = token.clone();
            runtime.spawn(async move {
                tokio::select! {
                    _ = state.wait_lost() => {}
                    () = watched.cancelled() => {}
                }
            });
        }
        token
    }
}

/// An acquired lock. Owned and `'static`: move it into tasks freely.
///
/// Dropping it stops the renewer and hands a best-effort release to the tokio
/// runtime (never blocks, never panics without a runtime: the TTL is then the
/// safety net). Call [`LockGuard::release`] to learn the outcome.
#[must_use = "dropping the guard releases the lock"]
pub struct LockGuard {
    pub(crate) handle: LeaseHandle,
    pub(crate) ttl: Duration,
    pub(crate) op_timeout: Duration,
    /// Cancels the renewer; cancelled on release and on drop.
    pub(crate) renewer_stop: CancellationToken,
    pub(crate) released: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("lease", &self.handle)
            .field("ttl", &self.ttl)
            .finish()
    }
}

impl std::ops::Deref for LockGuard {
    type Target = LeaseHandle;
    fn deref(&self) -> &LeaseHandle {
        &self.handle
    }
}

impl LockGuard {
    /// A cloneable view of this lease (for `select!`, tasks, logging).
    pub fn handle(&self) -> LeaseHandle {
        self.handle.clone()
    }

    /// Reset the lease's TTL to `ttl` now (owner-checked). With automatic
    /// renewal on, the next renewal goes back to the manager's TTL.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] if the lease is lost or released (a refused renewal
    /// also marks it lost); [`Error::InvalidArgument`] for a TTL outside
    /// [`crate::MIN_TTL`]..=[`crate::MAX_TTL`]; the backend's error, or an
    /// outcome-unknown error when the call timed out: the lease is then as it
    /// was (its deadline is unchanged).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future is safe: the deadline only moves on a reply, so a
    /// renewal whose reply never arrives only leaves the server's TTL longer
    /// than the local deadline, never shorter.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(locks: &lock_core::LockManager) -> lock_core::Result<()> {
    /// use std::time::Duration;
    /// let guard = locks.lock("migration").await?;
    /// guard.extend(Duration::from_secs(120)).await?; // a long step ahead
    /// # guard.release().await?; Ok(()) }
    /// ```
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        validate_ttl(ttl)?;
        let state = &self.handle.state;
        if self.released {
            return Err(not_held(state, NotHeldReason::Missing));
        }
        if state.is_lost() {
            return Err(not_held(state, NotHeldReason::Expired));
        }
        let sent_at = Instant::now();
        let call = state.backend.renew(&state.key, &state.token, ttl);
        let outcome = match tokio::time::timeout(self.op_timeout.min(self.remaining()), call).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(Error::outcome_unknown(
                    state.backend.capabilities().name,
                    "renew timed out",
                ));
            }
        };
        match outcome {
            RenewOutcome::Renewed => {
                state.renewed(sent_at, ttl);
                Ok(())
            }
            RenewOutcome::HeldByOther => {
                state.mark_lost(LossReason::NotOwner);
                Err(not_held(state, NotHeldReason::HeldByOther))
            }
            RenewOutcome::Missing => {
                state.mark_lost(LossReason::NotOwner);
                Err(not_held(state, NotHeldReason::Missing))
            }
        }
    }

    /// Stop renewing and delete the key if this lease still holds it.
    ///
    /// `Released` means we deleted our own lock; `HeldByOther` / `Missing`
    /// mean it was already lost (nothing of anyone else's was touched).
    ///
    /// # Errors
    ///
    /// The backend's error, or an outcome-unknown error when the call timed
    /// out; the key then frees itself at its TTL.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: if this future is dropped mid-flight, the guard's drop
    /// schedules the release again (owner-checked, so a repeat is harmless).
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(locks: &lock_core::LockManager) -> lock_core::Result<()> {
    /// use lock_core::ReleaseOutcome;
    /// let guard = locks.lock("orders:42").await?;
    /// if guard.release().await? != ReleaseOutcome::Released {
    ///     eprintln!("the lease had been lost before the release");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<ReleaseOutcome> {
        self.renewer_stop.cancel();
        let state = self.handle.state.clone();
        let call = state.backend.release(&state.key, &state.token);
        let result = match tokio::time::timeout(self.op_timeout, call).await {
            Ok(r) => r,
            Err(_) => Err(Error::outcome_unknown(
                state.backend.capabilities().name,
                "release timed out",
            )),
        };
        if result.is_ok() {
            self.released = true;
        }
        if let Some(lanes) = &state.lanes {
            lanes.notify_released(&state.key);
        }
        if !matches!(result, Ok(ReleaseOutcome::Released)) {
            state.mark_lost(LossReason::NotOwner);
        }
        result
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.renewer_stop.cancel();
        crate::observe::ended(&self.handle.state);
        if self.released {
            return;
        }
        let state = self.handle.state.clone();
        let op_timeout = self.op_timeout;
        spawn_release(
            state.backend.clone(),
            state.key.clone(),
            state.token,
            op_timeout,
            state.lanes.clone(),
        );
    }
}

/// Best-effort release on the current tokio runtime, if any. Owner-checked, so
/// it is safe even if we never held the key.
/// `lanes`, if given, wake the key's head waiter once the release is done.
pub(crate) fn spawn_release(
    backend: Arc<dyn LockBackend>,
    key: String,
    token: LockToken,
    timeout: Duration,
    lanes: Option<Lanes>,
) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(async move {
            match tokio::time::timeout(timeout, backend.release(&key, &token)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::debug!(key, error = %e, "background release failed; the TTL will free the key"),
                Err(_) => tracing::debug!(key, "background release timed out; the TTL will free the key"),
            }
            if let Some(lanes) = lanes {
                lanes.notify_released(&key);
            }
        });
    }
}

fn not_held(state: &LeaseState, reason: NotHeldReason) -> Error {
    Error::NotHeld {
        key: state.key.clone(),
        reason,
    }
}
