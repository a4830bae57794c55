//! The owned lock guard, its shareable lease view, and the loss signal.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
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
    /// The local deadline, published so that `lost()` waiters re-arm
    /// whenever it moves (earlier too: `extend` with a shorter TTL).
    validity: Mutex<Validity>,
    /// Woken whenever `validity` or the loss flag changes.
    changed: Notify,
    /// Set once the lease is lost or ended; `lost()` watchers are woken
    /// through `changed`.
    lost: AtomicBool,
    /// Created by the first `lost_token()` only (most leases never need one).
    lost_token: OnceLock<CancellationToken>,
    /// The first loss reason ([`reason_code`]; 0 until lost): an atomic,
    /// not a `OnceLock`, since every lease sets it once (at its end).
    loss_reason: AtomicU8,
    /// One TTL change (renewal or `extend`) in flight per lease: the server
    /// then applies them in the order the guard records them, so the local
    /// deadline follows the TTL the server applied last.
    pub(crate) ttl_change: tokio::sync::Mutex<()>,
    /// The smallest TTL of a TTL change whose outcome is unknown (timed out,
    /// or dropped after sending): the server may still apply it at any later
    /// moment, so no later deadline may count on more than that TTL.
    unknown_ttl: Mutex<Option<Duration>>,
    /// The manager's lanes: the head waiter for this key is told when we release.
    lanes: Option<Lanes>,
    pub(crate) observed: crate::observe::LeaseObs,
    /// The lease's place in its manager's renewal queue (auto-renewal only).
    pub(crate) renew_slot: crate::renewer::Slot,
}

/// `LeaseState::loss_reason`'s code of `reason` (never 0).
fn reason_code(reason: LossReason) -> u8 {
    match reason {
        LossReason::NotOwner => 1,
        LossReason::DeadlinePassed => 2,
        LossReason::Released => 3,
    }
}

/// A TTL change sent but not answered yet: dropped armed (unknown outcome,
/// or the future dropped), it caps the lease's deadline.
struct Unsettled<'a> {
    state: &'a LeaseState,
    sent_at: Instant,
    ttl: Duration,
    armed: bool,
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.state.outcome_unknown(self.sent_at, self.ttl);
        }
    }
}

/// The local deadline and the start of the operation that set it. Only an
/// operation that started later may replace it, so a slow reply cannot move
/// the deadline backwards past a newer renewal.
#[derive(Clone, Copy)]
struct Validity {
    since: Instant,
    deadline: Instant,
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
            validity: Mutex::new(Validity {
                since: grant.sent_at,
                deadline: grant.deadline,
            }),
            changed: Notify::new(),
            lost: AtomicBool::new(false),
            lost_token: OnceLock::new(),
            loss_reason: AtomicU8::new(0),
            ttl_change: tokio::sync::Mutex::new(()),
            unknown_ttl: Mutex::new(None),
            lanes,
            observed: Default::default(),
            renew_slot: Default::default(),
        }
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.validity().deadline
    }

    fn validity(&self) -> std::sync::MutexGuard<'_, Validity> {
        // Every update is one assignment: a poisoned lock is consistent.
        match self.validity.lock() {
            Ok(v) => v,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Change the validity and wake `lost()` watchers if `change` says it
    /// changed it (a plain `Notify`: a `watch` channel woke its 8 notifier
    /// shards on every change and on drop).
    fn update_validity(&self, change: impl FnOnce(&mut Validity) -> bool) {
        let changed = change(&mut self.validity());
        if changed {
            self.changed.notify_waiters();
        }
    }

    fn unknown_ttl(&self) -> Option<Duration> {
        match self.unknown_ttl.lock() {
            Ok(t) => *t,
            Err(poisoned) => *poisoned.into_inner(),
        }
    }

    /// The deadline a successful renewal sent at `sent_at` with `ttl` earns.
    pub(crate) fn deadline_for(&self, sent_at: Instant, ttl: Duration) -> Instant {
        let ttl = self.unknown_ttl().map_or(ttl, |unknown| unknown.min(ttl));
        crate::clock::later(
            sent_at,
            ttl.saturating_sub(crate::options::clock_drift(ttl, self.drift_factor)),
        )
    }

    pub(crate) fn renewed(&self, sent_at: Instant, ttl: Duration) {
        self.renewed_at(sent_at, ttl, Instant::now());
    }

    /// [`LeaseState::renewed`], the reply having come at `now` (the
    /// renewer reads the clock once per batch).
    pub(crate) fn renewed_at(&self, sent_at: Instant, ttl: Duration, now: Instant) {
        if self.is_lost_at(now) {
            return; // loss is sticky: the holder was already told
        }
        crate::observe::renewed(self, sent_at, now);
        let deadline = self.deadline_for(sent_at, ttl);
        self.update_validity(|v| {
            // Checked under the validity lock: `mark_lost` sets the flag before it
            // takes that lock, so a loss is never overwritten by a renewal.
            if self.lost.load(Ordering::SeqCst) || sent_at < v.since {
                return false;
            }
            *v = Validity {
                since: sent_at,
                deadline,
            };
            true
        });
    }

    /// A TTL change for `ttl` sent at `sent_at` may or may not have been
    /// applied, and may still be applied at any later moment, which gives the
    /// key at least `sent_at + ttl`: the deadline drops to that if it was
    /// later, and every later deadline counts on no more than `ttl`.
    pub(crate) fn outcome_unknown(&self, sent_at: Instant, ttl: Duration) {
        {
            let mut unknown = match self.unknown_ttl.lock() {
                Ok(t) => t,
                Err(poisoned) => poisoned.into_inner(),
            };
            *unknown = Some(unknown.map_or(ttl, |t| t.min(ttl)));
        }
        let capped = self.deadline_for(sent_at, ttl);
        self.update_validity(|v| {
            if v.deadline <= capped {
                return false;
            }
            v.deadline = capped;
            true
        });
    }

    /// Make one TTL change of this lease (a renewal or an `extend`): wait for
    /// its turn (see `ttl_change`), set `sent`, run `send`, and record the
    /// outcome. A renewal moves the deadline; an unknown outcome (an error
    /// saying so, or this future dropped after sending, e.g. by a timeout)
    /// is recorded as such (see `outcome_unknown`). Returns the outcome and
    /// when the change was sent.
    pub(crate) async fn change_ttl<F, Fut>(
        &self,
        ttl: Duration,
        sent: &AtomicBool,
        send: F,
    ) -> Result<(RenewOutcome, Instant)>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<RenewOutcome>>,
    {
        let _turn = self.ttl_change.lock().await;
        let sent_at = Instant::now();
        sent.store(true, Ordering::Relaxed);
        let mut unsettled = Unsettled {
            state: self,
            sent_at,
            ttl,
            armed: true,
        };
        let result = send().await;
        match &result {
            Ok(RenewOutcome::Renewed) => self.renewed(sent_at, ttl),
            Err(e) if e.is_outcome_unknown() => return result.map(|o| (o, sent_at)),
            _ => {}
        }
        unsettled.armed = false;
        result.map(|o| (o, sent_at))
    }

    /// Signal the end of the lease: the first reason sticks, and the deadline
    /// moves to now so that `remaining()` reads zero from here on.
    pub(crate) fn mark_lost(&self, reason: LossReason) {
        self.mark_lost_at(reason, Instant::now());
    }

    /// [`LeaseState::mark_lost`] with the clock already read.
    fn mark_lost_at(&self, reason: LossReason, now: Instant) {
        if self
            .loss_reason
            .compare_exchange(0, reason_code(reason), Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            crate::observe::lost(self, reason);
        }
        self.lost.store(true, Ordering::SeqCst);
        if let Some(token) = self.lost_token.get() {
            token.cancel();
        }
        // Always a change for watchers: the loss itself. A watcher that
        // registers after this sees the flag (set before the lock).
        self.update_validity(|v| {
            if v.deadline > now {
                v.deadline = now;
            }
            true
        });
    }

    /// The guard is done with the lease (released or dropped). A lease already
    /// lost, or past its deadline, keeps that reason.
    pub(crate) fn end(&self, reason: LossReason) {
        if self.lost.load(Ordering::SeqCst) {
            return;
        }
        // One clock read for both the deadline check and the end itself.
        let now = Instant::now();
        if now >= self.deadline() {
            self.mark_lost_at(LossReason::DeadlinePassed, now);
        } else {
            self.mark_lost_at(reason, now);
        }
    }

    /// Lost by signal, or past the deadline (which then becomes the signal).
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst) || self.is_lost_at(Instant::now())
    }

    /// [`LeaseState::is_lost`] with the clock read at `now` (no later than
    /// the call: an earlier reading only finds a loss later).
    pub(crate) fn is_lost_at(&self, now: Instant) -> bool {
        if self.lost.load(Ordering::SeqCst) {
            return true;
        }
        if now >= self.deadline() {
            self.mark_lost_at(LossReason::DeadlinePassed, now);
            return true;
        }
        false
    }

    pub(crate) fn reason(&self) -> LossReason {
        match self.loss_reason.load(Ordering::SeqCst) {
            1 => LossReason::NotOwner,
            3 => LossReason::Released,
            _ => LossReason::DeadlinePassed,
        }
    }

    pub(crate) async fn wait_lost(self: Arc<Self>) -> LossReason {
        loop {
            // Registered before reading the state: a change made after the
            // read wakes us.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.lost.load(Ordering::SeqCst) {
                return self.reason();
            }
            let deadline = self.deadline();
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {
                    if self.is_lost() {
                        return self.reason();
                    }
                }
                // The deadline moved, or the lease was lost.
                () = &mut changed => {}
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
            .field("lost", &self.state.lost.load(Ordering::SeqCst))
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
    /// Besides a signalled loss it fires when the local deadline passes: a
    /// small task on the current tokio runtime watches for that (called
    /// outside a runtime, only a signalled loss cancels it). After a release
    /// the deadline no longer moves, so the token fires at it.
    pub fn lost_token(&self) -> CancellationToken {
        let parent = self.state.lost_token.get_or_init(CancellationToken::new);
        // A loss marked before the token existed could not cancel it.
        if self.state.lost.load(Ordering::SeqCst) {
            parent.cancel();
        }
        let token = parent.child_token();
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
    /// The renewer renewing this lease (auto-renewal only); told to stop on
    /// release and on drop.
    pub(crate) renewer: Option<crate::renewer::Renewer>,
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
    /// [`Error::InvalidArgument`] for a TTL out of range; a backend error
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
        let state = &self.handle.state;
        if self.released {
            return Err(not_held(state, NotHeldReason::Missing));
        }
        if state.is_lost() {
            return Err(not_held(state, NotHeldReason::Expired));
        }
        let sent = AtomicBool::new(false);
        let call = state.change_ttl(ttl, &sent, || async {
            if state.is_lost() {
                return Err(not_held(state, NotHeldReason::Expired));
            }
            state.backend.renew(&state.key, &state.token, ttl).await
        });
        let outcome = match tokio::time::timeout(self.op_timeout.min(self.remaining()), call).await {
            Ok(r) => r?.0,
            Err(_) if sent.load(Ordering::Relaxed) => {
                return Err(Error::outcome_unknown(
                    state.backend.capabilities().name,
                    "renew timed out",
                ));
            }
            Err(_) => {
                return Err(Error::backend(
                    state.backend.capabilities().name,
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
    ///
    /// # Errors
    ///
    /// A backend error (outcome unknown on a timeout after `op_timeout`; the
    /// release is not capped by the remaining validity, since a late release
    /// harms nobody): the guard's drop then schedules the release again, and
    /// the TTL frees the key at the latest.
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
        let state = self.handle.state.clone();
        let result = match state.backend.instant() {
            Some(instant) => instant.release_now(&state.key, &state.token),
            None => {
                let call = state.backend.release(&state.key, &state.token);
                match tokio::time::timeout(self.op_timeout, call).await {
                    Ok(r) => r,
                    Err(_) => Err(Error::outcome_unknown(
                        state.backend.capabilities().name,
                        "release timed out",
                    )),
                }
            }
        };
        if result.is_ok() {
            self.released = true;
        }
        if let Some(lanes) = &state.lanes {
            lanes.notify_released(&state.key);
        }
        state.end(match result {
            Ok(ReleaseOutcome::Released) | Err(_) => LossReason::Released,
            Ok(_) => LossReason::NotOwner,
        });
        result
    }
}

impl LockGuard {
    fn stop_renewing(&mut self) {
        if let Some(renewer) = self.renewer.take() {
            renewer.stop(&self.handle.state);
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.stop_renewing();
        let state = self.handle.state.clone();
        // First end the lease: a deadline that already passed is reported as
        // a loss (observe::lost), a clean end only as an end.
        state.end(LossReason::Released);
        crate::observe::ended(&state);
        if self.released {
            return;
        }
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
