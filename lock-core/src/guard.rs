//! The owned lock guard, its shareable lease view, and the loss signal (the
//! state they share lives in `lease.rs`).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backend::{LockBackend, ReleaseOutcome, RenewOutcome, Replication};
use crate::error::{Error, LossReason, NotHeldReason, Result};
use crate::lane::Lanes;
use crate::lease::LeaseState;
use crate::token::{FencingToken, LockToken};
use crate::validate::validate_ttl;

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
            .field("lost", &self.state.is_marked_lost())
            .finish_non_exhaustive()
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
    ///
    /// Once the lease is lost before its deadline (a renewal or `extend`
    /// found another owner or no key: [`LossReason::NotOwner`]), or ended
    /// (released), the deadline moves back to the moment that was seen:
    /// from then on `deadline()` reads the loss time (never later than the
    /// deadline it had) and [`LeaseHandle::remaining`] reads zero.
    pub fn deadline(&self) -> Instant {
        self.state.deadline()
    }

    /// Time left before the local deadline (zero once passed, and once the
    /// lease is lost or ended).
    pub fn remaining(&self) -> Duration {
        self.deadline().saturating_duration_since(Instant::now())
    }

    /// True once the lease no longer protects anything: a renewal found
    /// another owner (or no key), the local deadline passed without a
    /// successful renewal, or the guard was released or dropped
    /// ([`LossReason::Released`]).
    pub fn is_lost(&self) -> bool {
        self.state.is_lost()
    }

    /// Resolves when the lease ends, with the reason (see
    /// [`LeaseHandle::is_lost`]): at the local deadline (re-armed whenever a
    /// renewal or `extend` moves it, earlier or later), at a definite "not
    /// owner" answer, or at the guard's release or drop
    /// ([`LossReason::Released`]). [`crate::LockManager::with_lock`] never
    /// reports its own release as a loss. The future is `'static`: it can be
    /// moved into a `select!` or a task.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only observes the lease.
    pub fn lost(&self) -> impl Future<Output = LossReason> + Send + 'static {
        self.state.clone().wait_lost()
    }

    /// A [`CancellationToken`] cancelled when the lease is lost, to plug the
    /// loss into tokio-util cancellation trees (`child_token`,
    /// `run_until_cancelled`, `select!` on `cancelled()`). Cancelling it
    /// yourself only cancels your token, never the lease.
    ///
    /// Besides a signalled loss it fires when the local deadline passes: one
    /// small task per lease, on the current tokio runtime, watches for that
    /// until the lease ends, however many tokens are made or dropped (called
    /// outside a runtime, only a signalled loss cancels it). A release or
    /// drop of the guard cancels every token of the lease.
    pub fn lost_token(&self) -> CancellationToken {
        let parent = self.state.lost_token();
        // A loss marked before the token existed could not cancel it.
        if self.state.is_marked_lost() {
            parent.cancel();
        }
        let token = parent.child_token();
        // One deadline watcher per lease, not per token: the tokens are
        // children of the lease's own, which the watcher cancels at the
        // deadline. A dropped token then leaves no task behind, and the
        // watcher ends with the lease (released, dropped or lost).
        if !token.is_cancelled()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
            && self.state.watch_deadline_once()
        {
            let state = self.state.clone();
            runtime.spawn(async move {
                let _ = state.wait_lost().await;
            });
        }
        token
    }
}

/// An acquired lock. Owned and `'static`: move it into tasks freely.
///
/// Dropping it stops the renewer and hands a best-effort release to the tokio
/// runtime (never blocks, never panics; outside a runtime a backend that
/// answers at once releases at once, and otherwise the TTL is the safety
/// net). Call [`LockGuard::release`] to learn the outcome.
#[must_use = "dropping the guard releases the lock"]
pub struct LockGuard {
    pub(crate) handle: LeaseHandle,
    pub(crate) ttl: Duration,
    pub(crate) op_timeout: Duration,
    /// The renewer renewing this lease (auto-renewal only); told to stop on
    /// release and on drop.
    pub(crate) renewer: Option<crate::renewer::Renewer>,
    pub(crate) released: bool,
    /// [`crate::LockOptions::min_hold`]: a release before it is over
    /// shortens the lease instead of deleting the key.
    pub(crate) min_hold: Duration,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("lease", &self.handle)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
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

    /// Reset the lease's TTL to `ttl` now (owner-checked); the deadline moves
    /// to match, earlier or later, and `lost()` follows it. With automatic
    /// renewal on, the next renewal goes back to the manager's TTL.
    ///
    /// TTL changes of one lease never overlap: `extend` waits for an
    /// in-flight renewal's answer before it sends, so the server applies them
    /// in the order the guard records them. A TTL change of this lease whose
    /// outcome is unknown (timed out, or its future dropped after sending)
    /// may still land at any moment: the deadline drops to what it would
    /// give if applied at once (if that is earlier), and later deadlines
    /// count on no more than its TTL.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] if the lease is lost or released;
    /// [`Error::InvalidArgument`] for a TTL out of range, or outside a tokio
    /// runtime (nothing sent); a backend error
    /// (outcome unknown if the renewal was sent and timed out, known if it
    /// was never sent because another TTL change of this lease was still in
    /// flight) leaves the deadline as it was.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before the renewal is sent changes nothing;
    /// after, the renewal's outcome is unknown and handled as above.
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
        crate::runtime::current()?;
        let state = &self.handle.state;
        if self.released {
            return Err(not_held(state, NotHeldReason::Missing));
        }
        if state.is_lost() {
            return Err(not_held(state, NotHeldReason::Expired));
        }
        let sent = AtomicBool::new(false);
        // Declared before the call, so dropped after it (and after its
        // unknown-outcome record), also when this future is dropped.
        let _hasten = Hasten {
            renewer: self.renewer.as_ref(),
            state,
            sent: &sent,
        };
        let call = state.change_ttl(ttl, &sent, || async {
            if state.is_lost() {
                return Err(not_held(state, NotHeldReason::Expired));
            }
            state.ctx.backend.renew(&state.key, &state.token, ttl).await
        });
        let outcome = match tokio::time::timeout(self.op_timeout.min(self.remaining()), call).await {
            Ok(r) => r?.0,
            Err(_) if sent.load(Ordering::Relaxed) => {
                return Err(Error::outcome_unknown(
                    state.ctx.backend.capabilities().name,
                    "renew timed out",
                ));
            }
            Err(_) => {
                return Err(Error::backend(
                    state.ctx.backend.capabilities().name,
                    "not sent: another TTL change of this lease was still in flight",
                ));
            }
        };
        match outcome {
            RenewOutcome::Renewed => Ok(()),
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

    /// Stop renewing and delete the key if this lease still holds it. Every
    /// handle of the lease then reports it ended: [`LossReason::Released`],
    /// or the loss if the lease was lost first.
    ///
    /// `Released` means we deleted our own lock; `HeldByOther` / `Missing`
    /// mean it was already lost (nothing of anyone else's was touched).
    /// Before the [`crate::LockOptions::min_hold`] is over, the key is not
    /// deleted: its TTL is set to what is left of the hold (owner-checked),
    /// and `Released` means that renewal found our lock.
    ///
    /// # Errors
    ///
    /// A backend error (outcome unknown on a timeout after `op_timeout`; the
    /// release is not capped by the remaining validity, since a late release
    /// harms nobody): the guard's drop then schedules the release again, and
    /// the TTL frees the key at the latest. [`Error::InvalidArgument`]
    /// outside a tokio runtime on a backend that needs one (a server): the
    /// key is then freed by its TTL.
    ///
    /// # Cancel safety
    ///
    /// If this future is dropped mid-flight, the guard's drop schedules the
    /// release again.
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
        self.stop_renewing();
        let state = &self.handle.state;
        let held = crate::min_hold::hold_left(&*state.ctx.backend, state.acquired_at, self.min_hold);
        let (result, now) = match (held, state.ctx.backend.instant()) {
            (Some(left), _) => {
                crate::runtime::current()?;
                let result = crate::min_hold::shorten(state, left, self.op_timeout).await;
                (result, Instant::now())
            }
            (None, Some(instant)) => {
                // One clock read for the release and the end of the lease
                // (read before the release: it can only find a loss later).
                let now = Instant::now();
                (instant.release_at(&state.key, &state.token, now), now)
            }
            (None, None) => {
                // Its timeout needs a runtime; outside one the guard's drop
                // cannot release either, and the TTL frees the key.
                crate::runtime::current()?;
                let call = state.ctx.backend.release(&state.key, &state.token);
                let result = match tokio::time::timeout(self.op_timeout, call).await {
                    Ok(r) => r,
                    Err(_) => Err(Error::outcome_unknown(
                        state.ctx.backend.capabilities().name,
                        "release timed out",
                    )),
                };
                (result, Instant::now())
            }
        };
        if result.is_ok() {
            self.released = true;
        }
        state.ctx.lanes.notify_released(&state.key);
        state.end_at(
            match result {
                Ok(ReleaseOutcome::Released) | Err(_) => LossReason::Released,
                Ok(_) => LossReason::NotOwner,
            },
            now,
        );
        result
    }
}

impl crate::observe::Fenced for LockGuard {
    fn fencing_token(&self) -> Option<FencingToken> {
        self.handle.state.fencing_token
    }
}

impl LockGuard {
    /// Stop renewing and end this lease without a release: its token's hold
    /// now belongs to another guard (an upgraded or downgraded read-write
    /// lock's), which renews and releases it.
    pub(crate) fn hand_over(mut self) {
        self.stop_renewing();
        // The drop ends the lease (`Released`) and sends nothing.
        self.released = true;
    }

    fn stop_renewing(&mut self) {
        if let Some(renewer) = self.renewer.take() {
            renewer.stop(&self.handle.state);
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.stop_renewing();
        let state = &self.handle.state;
        // First end the lease: a deadline that already passed is reported as
        // a loss (observe::lost), a clean end only as an end.
        state.end(LossReason::Released);
        state.observe_ended();
        if self.released {
            return;
        }
        let op_timeout = self.op_timeout;
        let backend = &state.ctx.backend;
        if let Some(left) = crate::min_hold::hold_left(&**backend, state.acquired_at, self.min_hold) {
            crate::min_hold::spawn_shorten(state.clone(), left, op_timeout);
            return;
        }
        spawn_release(
            state.ctx.backend.clone(),
            state.key.clone(),
            state.token,
            op_timeout,
            Some(state.ctx.lanes.clone()),
        );
    }
}

/// Best-effort release on the current tokio runtime, if any (outside one, at
/// once on a backend that answers at once; else the TTL frees the key).
/// Owner-checked, so it is safe even if we never held the key.
/// `lanes`, if given, wake the key's head waiter once the release is done.
pub(crate) fn spawn_release(
    backend: Arc<dyn LockBackend>,
    key: String,
    token: LockToken,
    timeout: Duration,
    lanes: Option<Lanes>,
) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        release_without_runtime(&backend, &key, &token);
        if let Some(lanes) = lanes {
            lanes.notify_released(&key);
        }
        return;
    };
    crate::background::spawn(&handle, async move {
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

/// Release `token`'s hold of `key` with no runtime to run a future on: at
/// once on a backend that answers at once, else nothing (the TTL frees the
/// key; it is logged).
pub(crate) fn release_without_runtime(backend: &Arc<dyn LockBackend>, key: &str, token: &LockToken) {
    match backend.instant() {
        Some(instant) => {
            if let Err(e) = instant.release_now(key, token) {
                tracing::debug!(key, error = %e, "release outside a runtime failed; the TTL will free the key");
            }
        }
        None => tracing::debug!(key, "no tokio runtime to release on; the TTL will free the key"),
    }
}

/// Once an `extend` is over (answered, timed out or dropped) and its TTL
/// change was sent: whatever came of it, the deadline may have moved
/// earlier than the renewer's next visit, which it brings forward.
struct Hasten<'a> {
    renewer: Option<&'a crate::renewer::Renewer>,
    state: &'a Arc<LeaseState>,
    sent: &'a AtomicBool,
}

impl Drop for Hasten<'_> {
    fn drop(&mut self) {
        if let Some(renewer) = self.renewer
            && self.sent.load(Ordering::Relaxed)
        {
            renewer.hasten(self.state);
        }
    }
}

fn not_held(state: &LeaseState, reason: NotHeldReason) -> Error {
    Error::NotHeld {
        key: state.key.clone(),
        reason,
    }
}
