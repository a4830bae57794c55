//! The state of one held lease, shared by its guard, its handles and the
//! renewer: the local deadline and the rules that move it, the loss signal,
//! the TTL changes in flight, and the lease's place in the renewal queue.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backend::{LockBackend, RenewOutcome, Replication};
use crate::error::{LossReason, Result};
use crate::lane::Lanes;
use crate::token::{FencingToken, LockToken};

/// What every lease of one manager shares: its backend and its lanes, in
/// one allocation (a lease then counts one reference, not two).
pub(crate) struct LeaseCtx {
    pub(crate) backend: Arc<dyn LockBackend>,
    /// The manager's lanes: the head waiter for a key is told when we release it.
    pub(crate) lanes: Lanes,
}

/// State shared by a guard, its lease handles and its renewer.
pub(crate) struct LeaseState {
    pub(crate) ctx: Arc<LeaseCtx>,
    pub(crate) key: String,
    pub(crate) token: LockToken,
    pub(crate) fencing_token: Option<FencingToken>,
    pub(crate) replication: Replication,
    pub(crate) acquired_at: Instant,
    pub(crate) drift_factor: f64,
    /// The local deadline, published so that `lost()` waiters re-arm
    /// whenever it moves (earlier too: `extend` with a shorter TTL).
    validity: Mutex<Validity>,
    /// Woken whenever `validity` or the loss flag changes, once watched.
    changed: Notify,
    /// Set by the first `wait_lost` (before it reads the state): until
    /// then nobody waits on `changed`, and a change wakes nobody (most
    /// leases are never watched: their end then takes no `Notify` lock).
    watched: AtomicBool,
    /// Set once the lease is lost or ended; `lost()` watchers are woken
    /// through `changed`.
    lost: AtomicBool,
    /// Created by the first `lost_token()` only (most leases never need one).
    lost_token: OnceLock<CancellationToken>,
    /// Set once a task watches the deadline for `lost_token` (one per lease).
    deadline_watched: AtomicBool,
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
    pub(crate) observed: LeaseObs,
    /// The lease's place in its manager's renewal queue (auto-renewal only).
    pub(crate) renew_slot: Slot,
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
    pub(crate) fn new(ctx: Arc<LeaseCtx>, grant: Grant, drift_factor: f64) -> Self {
        LeaseState {
            ctx,
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
            watched: AtomicBool::new(false),
            lost: AtomicBool::new(false),
            lost_token: OnceLock::new(),
            deadline_watched: AtomicBool::new(false),
            loss_reason: AtomicU8::new(0),
            ttl_change: tokio::sync::Mutex::new(()),
            unknown_ttl: Mutex::new(None),
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
        // SeqCst, after the change (and the loss flag, set before): either
        // we see the watcher's flag, or it sees our change (it sets the flag
        // before it reads the state). A `Notified` created before this
        // `notify_waiters` completes even if it was not polled yet.
        if changed && self.watched.load(Ordering::SeqCst) {
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
            ttl.saturating_sub(crate::validate::clock_drift(ttl, self.drift_factor)),
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
        self.observe_renewed(sent_at, now);
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
            self.observe_lost(reason);
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
        self.end_at(reason, Instant::now());
    }

    /// [`LeaseState::end`] with the clock read at `now` (no later than the
    /// end: an earlier reading only finds a passed deadline later).
    pub(crate) fn end_at(&self, reason: LossReason, now: Instant) {
        if self.lost.load(Ordering::SeqCst) {
            return;
        }
        // `mark_lost_at`'s steps, with the deadline check under the same
        // validity lock (one lock, not two). The flag is set under it, as a
        // renewal checks it under it.
        let (reason, first) = {
            let mut v = self.validity();
            let reason = if now >= v.deadline {
                LossReason::DeadlinePassed
            } else {
                reason
            };
            let first = self
                .loss_reason
                .compare_exchange(0, reason_code(reason), Ordering::SeqCst, Ordering::SeqCst)
                .is_ok();
            self.lost.store(true, Ordering::SeqCst);
            if v.deadline > now {
                v.deadline = now;
            }
            (reason, first)
        };
        if first {
            self.observe_lost(reason);
        }
        if let Some(token) = self.lost_token.get() {
            token.cancel();
        }
        // After the flag (see `update_validity`).
        if self.watched.load(Ordering::SeqCst) {
            self.changed.notify_waiters();
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
        self.watched.store(true, Ordering::SeqCst);
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

    /// Set once the lease is lost or ended (no clock read).
    pub(crate) fn is_marked_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// True for the first caller only: it starts the lease's one deadline
    /// watcher for `lost_token`.
    pub(crate) fn watch_deadline_once(&self) -> bool {
        !self.deadline_watched.swap(true, Ordering::AcqRel)
    }

    /// The lease's cancellation token, created by the first call.
    pub(crate) fn lost_token(&self) -> &CancellationToken {
        self.lost_token.get_or_init(CancellationToken::new)
    }

    // What the manager reports about the lease (see `crate::observe`).

    /// A renewal sent at `sent_at` succeeded; called before the deadline moves.
    fn observe_renewed(&self, sent_at: Instant, now: Instant) {
        if !cfg!(feature = "metrics") && !tracing::enabled!(tracing::Level::TRACE) {
            return; // nobody records the margin: no deadline read
        }
        let margin = self.deadline().saturating_duration_since(now);
        tracing::trace!(
            key = %self.key,
            margin_us = crate::observe::micros(margin),
            latency_us = crate::observe::micros(now.saturating_duration_since(sent_at)),
            "lease renewed"
        );
        #[cfg(feature = "metrics")]
        {
            metrics::histogram!(crate::observe::RENEWAL_MARGIN_SECONDS).record(margin.as_secs_f64());
            metrics::histogram!(crate::observe::RENEW_LATENCY_SECONDS)
                .record(now.saturating_duration_since(sent_at).as_secs_f64());
        }
    }

    /// The lease was just marked lost (called once per lease).
    fn observe_lost(&self, reason: LossReason) {
        if reason == LossReason::Released {
            // The lease ended on purpose (release or drop): not a loss.
            self.observe_ended();
            return;
        }
        if self.observed.ended.load(Ordering::Acquire) {
            return;
        }
        let now = Instant::now();
        let noticed_late = now.saturating_duration_since(self.deadline());
        tracing::error!(
            key = %self.key,
            backend = %self.ctx.backend.capabilities().name,
            reason = crate::observe::reason_label(reason),
            noticed_late_us = crate::observe::micros(noticed_late),
            held_us = crate::observe::micros(now.saturating_duration_since(self.acquired_at)),
            fencing_token = self.fencing_token.map(|t| t.0),
            "lease lost: {reason}"
        );
        #[cfg(feature = "metrics")]
        metrics::counter!(crate::observe::LOSSES_TOTAL, "reason" => crate::observe::reason_label(reason)).increment(1);
    }

    /// The guard was released or dropped.
    pub(crate) fn observe_ended(&self) {
        // Only the guard's owner ends a lease (its release, then its drop):
        // never two calls at once, so a load and a store do (no swap).
        if self.observed.ended.load(Ordering::Acquire) {
            return;
        }
        self.observed.ended.store(true, Ordering::Release);
        if !cfg!(feature = "metrics") && !tracing::enabled!(tracing::Level::TRACE) {
            return; // nobody records the hold time: no clock read
        }
        let held = self.acquired_at.elapsed();
        tracing::trace!(key = %self.key, held_us = crate::observe::micros(held), "lease ended");
        #[cfg(feature = "metrics")]
        metrics::histogram!(crate::observe::HOLD_SECONDS).record(held.as_secs_f64());
    }
}

/// Per-lease bookkeeping kept in the lease state.
#[derive(Debug, Default)]
pub(crate) struct LeaseObs {
    /// Set when the guard is released or dropped: a deadline passing after
    /// that is not a loss anyone needs to hear about.
    pub(crate) ended: AtomicBool,
}

/// `Slot::scheduled` of a lease that is not in the queue.
pub(crate) const UNSCHEDULED: u64 = u64::MAX;

/// A lease's place in its renewer's queue, kept in the lease so that the
/// guard can take it out. Only read and written under the queue's lock.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) scheduled: AtomicU64,
    pub(crate) stopped: AtomicBool,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            scheduled: AtomicU64::new(UNSCHEDULED),
            stopped: AtomicBool::new(false),
        }
    }
}
