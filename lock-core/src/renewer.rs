//! The background renewer: one task per manager and tokio runtime drives a
//! timer queue of every auto-renewed lease of that manager on that runtime.
//! A guard costs a push on an arrivals list when acquired (moved into the
//! queue when the driver next runs) and a pop or a flag when released, not a
//! task, timers and a cancellation token of its own. Leases that come
//! due in the same tick are renewed together with one
//! [`LockBackend::renew_many`] call per ≤ 256 leases (one script or one
//! pipeline), and each lease keeps its own rules: retried until its local
//! deadline, stopped for good at the first definite "not owner".

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::{LockBackend, RenewOutcome};
use crate::error::LossReason;
use crate::lease::{LeaseState, UNSCHEDULED};
use crate::token::LockToken;

/// Renewals are due on a grid of this many slots per renew interval (and at
/// most this coarse), rounded *down*: renewing a little early is safe, and
/// leases renewed in the same timer tick share one wake-up and one batch.
const SLOTS_PER_INTERVAL: u32 = 8;
const MAX_SLOT: Duration = Duration::from_millis(100);

/// Most leases renewed by one backend call.
const MAX_BATCH: usize = 256;

/// Smallest `Queue::sweep_at`.
const MIN_SWEEP: usize = 64;

fn grid_origin() -> Instant {
    static ORIGIN: OnceLock<std::time::Instant> = OnceLock::new();
    // A process-wide origin shared by every runtime; tokio's Instant converts
    // from std's, and the paused test clock only shifts both alike.
    Instant::from_std(*ORIGIN.get_or_init(std::time::Instant::now))
}

/// `due` rounded down to the renewal grid, never before `not_before`.
fn on_grid(due: Instant, interval: Duration, not_before: Instant) -> Instant {
    let slot = (interval / SLOTS_PER_INTERVAL).min(MAX_SLOT);
    let origin = grid_origin();
    if slot.is_zero() || due <= origin {
        return due;
    }
    // In u64 nanoseconds (584 years): a 128-bit division costs more than
    // the rest of a lease's registration.
    let (Ok(since), Ok(slot)) = (u64::try_from((due - origin).as_nanos()), u64::try_from(slot.as_nanos())) else {
        return due;
    };
    let rounded = crate::clock::later(origin, Duration::from_nanos(since - since % slot));
    rounded.max(not_before)
}

/// A queue position: nanoseconds since the grid origin (saturating).
fn position(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(grid_origin()).as_nanos()).unwrap_or(UNSCHEDULED - 1)
}

fn instant_of(position: u64) -> Instant {
    crate::clock::later(grid_origin(), Duration::from_nanos(position))
}

/// The latest a lease's next renewal may come, counted from `from` (when
/// its last TTL change was sent, or now): one renew interval later if that
/// is before its current deadline (always so after a renewal with the
/// manager's TTL: the options keep the interval below the validity), else
/// halfway to that deadline (an `extend` may have set a TTL shorter than
/// the interval, or a TTL change of unknown outcome may cap it).
fn renew_by(lease: &LeaseState, interval: Duration, from: Instant) -> Instant {
    let left = lease.deadline().saturating_duration_since(from);
    crate::clock::later(from, if interval < left { interval } else { left / 2 })
}

/// How one lease is renewed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    pub(crate) ttl: Duration,
    pub(crate) interval: Duration,
    pub(crate) op_timeout: Duration,
}

impl Plan {
    fn retry_delay(&self) -> Duration {
        (self.interval / 8).clamp(Duration::from_millis(1), Duration::from_millis(250))
    }
}

struct Entry {
    lease: Arc<LeaseState>,
    plan: Plan,
}

impl Entry {
    fn key(&self, at: u64) -> (u64, usize) {
        (at, Arc::as_ptr(&self.lease) as usize)
    }
}

#[derive(Default)]
struct Queue {
    /// By (due position, lease address): unique while the lease is queued.
    due: BTreeMap<(u64, usize), Entry>,
    /// Leases started since the driver last ran, with their first due
    /// position: most locks are released before their first renewal, and
    /// then cost a push here and a flag, not a map insert and removal. The
    /// driver moves the live ones into `due`; stopped ones are swept out
    /// whenever the list doubles.
    arrivals: Vec<(u64, Entry)>,
    /// Sweep `arrivals` once it is this long.
    sweep_at: usize,
    /// When the driver wakes next, if it sleeps on a timer.
    armed: Option<u64>,
    stopped: bool,
}

struct Shared {
    backend: Arc<dyn LockBackend>,
    queue: Mutex<Queue>,
    /// Wakes the driver: an earlier due time, a shutdown, or the last handle
    /// gone (`Drop`).
    wake: Arc<Notify>,
    alive: Arc<AtomicBool>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.wake.notify_one();
    }
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        // Every update is a single map operation plus the lease's slot.
        match self.queue.lock() {
            Ok(q) => q,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Whether `lease`'s guard stopped its renewals (read under the queue's
    /// lock, where `Renewer::stop` sets it).
    fn is_stopped(&self, lease: &LeaseState) -> bool {
        let _q = self.queue();
        lease.renew_slot.stopped.load(Ordering::Relaxed)
    }

    fn schedule(&self, entry: Entry, at: Instant) {
        self.schedule_all(std::iter::once((entry, at)));
    }

    /// Queue each entry at its time, under one lock (a renewed batch puts
    /// hundreds back at once), and wake the driver once if one comes
    /// before its timer.
    fn schedule_all(&self, entries: impl IntoIterator<Item = (Entry, Instant)>) {
        let mut q = self.queue();
        if q.stopped {
            return;
        }
        let mut earliest = None::<u64>;
        for (entry, at) in entries {
            if entry.lease.renew_slot.stopped.load(Ordering::Relaxed) {
                continue;
            }
            let at = position(at);
            entry.lease.renew_slot.scheduled.store(at, Ordering::Relaxed);
            q.due.insert(entry.key(at), entry);
            earliest = Some(earliest.map_or(at, |e| e.min(at)));
        }
        if let Some(at) = earliest
            && q.armed.is_none_or(|armed| at < armed)
        {
            q.armed = Some(at);
            self.wake.notify_one();
        }
    }
}

/// Handle to the renewer of one manager on one runtime. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Renewer {
    shared: Arc<Shared>,
}

impl Renewer {
    /// Start the renewer's driver task on `runtime`.
    pub(crate) fn spawn(backend: Arc<dyn LockBackend>, runtime: &tokio::runtime::Handle) -> Self {
        let shared = Arc::new(Shared {
            backend,
            queue: Mutex::default(),
            wake: Arc::new(Notify::new()),
            alive: Arc::new(AtomicBool::new(true)),
        });
        runtime.spawn(drive(
            Arc::downgrade(&shared),
            shared.wake.clone(),
            Alive(shared.alive.clone()),
        ));
        Renewer { shared }
    }

    /// False once the driver task is gone (its runtime shut down).
    pub(crate) fn is_alive(&self) -> bool {
        self.shared.alive.load(Ordering::Relaxed)
    }

    /// Renew `lease` every `plan.interval` from its acquisition on.
    pub(crate) fn start(&self, lease: Arc<LeaseState>, plan: Plan) {
        let first = crate::clock::later(lease.acquired_at, plan.interval);
        let at = position(on_grid(
            first,
            plan.interval,
            crate::clock::later(lease.acquired_at, plan.interval / 2),
        ));
        let mut swept = Vec::new();
        let mut q = self.shared.queue();
        if q.stopped {
            return;
        }
        q.arrivals.push((at, Entry { lease, plan }));
        if q.arrivals.len() >= q.sweep_at {
            swept = q
                .arrivals
                .extract_if(.., |(_, e)| e.lease.renew_slot.stopped.load(Ordering::Relaxed))
                .collect();
            q.sweep_at = (2 * q.arrivals.len()).max(MIN_SWEEP);
        }
        if q.armed.is_none_or(|armed| at < armed) {
            q.armed = Some(at);
            self.shared.wake.notify_one();
        }
        drop(q);
        drop(swept); // outside the lock: dropping a lease may run its Drop
    }

    /// After a TTL change of `lease` by its guard (an `extend`, which may
    /// have moved the deadline earlier, or whose outcome is unknown), bring
    /// its next renewal forward to [`renew_by`] if it was due later, so that
    /// it comes before the lease's current deadline.
    pub(crate) fn hasten(&self, lease: &Arc<LeaseState>) {
        let now = Instant::now();
        let mut q = self.shared.queue();
        if q.stopped || lease.renew_slot.stopped.load(Ordering::Relaxed) {
            return;
        }
        let at = lease.renew_slot.scheduled.load(Ordering::Relaxed);
        let by = if at != UNSCHEDULED {
            let key = (at, Arc::as_ptr(lease) as usize);
            let Some(interval) = q.due.get(&key).map(|e| e.plan.interval) else {
                return;
            };
            let by = position(renew_by(lease, interval, now));
            if by >= at {
                return;
            }
            let Some(entry) = q.due.remove(&key) else {
                return;
            };
            lease.renew_slot.scheduled.store(by, Ordering::Relaxed);
            q.due.insert(entry.key(by), entry);
            by
        } else if let Some((due, entry)) = q.arrivals.iter_mut().find(|(_, e)| Arc::ptr_eq(&e.lease, lease)) {
            let by = position(renew_by(lease, entry.plan.interval, now));
            if by >= *due {
                return;
            }
            *due = by;
            by
        } else {
            // Being renewed right now (between the driver and its batch):
            // the batch schedules the next renewal from the new deadline.
            return;
        };
        if q.armed.is_none_or(|armed| by < armed) {
            q.armed = Some(by);
            self.shared.wake.notify_one();
        }
    }

    /// Renew `lease` no more (its guard released or dropped it).
    pub(crate) fn stop(&self, lease: &Arc<LeaseState>) {
        let slot = &lease.renew_slot;
        let mut q = self.shared.queue();
        slot.stopped.store(true, Ordering::Relaxed);
        let at = slot.scheduled.swap(UNSCHEDULED, Ordering::Relaxed);
        if at != UNSCHEDULED {
            q.due.remove(&(at, Arc::as_ptr(lease) as usize));
        } else if q.arrivals.last().is_some_and(|(_, e)| Arc::ptr_eq(&e.lease, lease)) {
            // The latest arrival (a lock released right away): out at once,
            // others wait for the sweep.
            q.arrivals.pop();
        }
    }

    /// Stop renewing every lease, for good (the manager's `shutdown`).
    pub(crate) fn shutdown(&self) {
        let dropped = {
            let mut q = self.shared.queue();
            q.stopped = true;
            for entry in q.due.values() {
                entry.lease.renew_slot.scheduled.store(UNSCHEDULED, Ordering::Relaxed);
            }
            (std::mem::take(&mut q.due), std::mem::take(&mut q.arrivals))
        };
        drop(dropped); // outside the lock: dropping a lease may run its Drop
        self.shared.wake.notify_one();
    }
}

/// Clears the renewer's `alive` flag when the driver task ends or is dropped
/// with its runtime.
struct Alive(Arc<AtomicBool>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// The driver: sleeps until the earliest due lease, takes every lease due
/// by then out of the queue and hands them to batches. Ends when the
/// renewer shuts down or its last handle (manager, guard, batch) is gone.
async fn drive(shared: Weak<Shared>, wake: Arc<Notify>, _alive: Alive) {
    loop {
        let next = {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let now = position(Instant::now());
            let (due, next, gone) = {
                let mut q = shared.queue();
                if q.stopped {
                    return;
                }
                let mut gone = Vec::new();
                for (at, entry) in std::mem::take(&mut q.arrivals) {
                    if entry.lease.renew_slot.stopped.load(Ordering::Relaxed) {
                        gone.push(entry);
                    } else {
                        entry.lease.renew_slot.scheduled.store(at, Ordering::Relaxed);
                        q.due.insert(entry.key(at), entry);
                    }
                }
                q.sweep_at = MIN_SWEEP;
                let mut due = Vec::new();
                while let Some(entry) = q.due.first_entry() {
                    if entry.key().0 > now {
                        break;
                    }
                    let entry = entry.remove();
                    entry.lease.renew_slot.scheduled.store(UNSCHEDULED, Ordering::Relaxed);
                    due.push(entry);
                }
                // Keep a timer armed for later even when its lease left the
                // queue: a lease queued behind it then needs no wake-up (a
                // lock taken and released before its first renewal costs the
                // driver nothing). Every queued lease is due at or after it.
                let next = q
                    .armed
                    .filter(|&armed| armed > now)
                    .or_else(|| q.due.first_key_value().map(|(&(at, _), _)| at));
                q.armed = next;
                (due, next, gone)
            };
            drop(gone); // outside the lock: dropping a lease may run its Drop
            dispatch(&shared, due);
            next
        };
        match next {
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(instant_of(at)) => {}
                    () = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
    }
}

/// Split the due leases into batches of one TTL and at most `MAX_BATCH`,
/// each renewed by its own task.
fn dispatch(shared: &Arc<Shared>, mut due: Vec<Entry>) {
    while !due.is_empty() {
        let ttl = due[0].plan.ttl;
        let (mut batch, rest): (Vec<Entry>, Vec<Entry>) = due.into_iter().partition(|e| e.plan.ttl == ttl);
        due = rest;
        while batch.len() > MAX_BATCH {
            let tail = batch.split_off(MAX_BATCH);
            spawn_batch(shared, std::mem::replace(&mut batch, tail));
        }
        spawn_batch(shared, batch);
    }
}

fn spawn_batch(shared: &Arc<Shared>, batch: Vec<Entry>) {
    let span = crate::observe::renewer_span(batch.len());
    tokio::spawn(renew_batch(shared.clone(), batch).instrument(span));
}

/// Renew one batch (one TTL) and put each lease back in the queue: at its
/// next due time after a renewal, after a short delay (capped by its
/// deadline) after a failure. A lease that is lost, stopped, or found held
/// by another leaves the queue.
async fn renew_batch(shared: Arc<Shared>, batch: Vec<Entry>) {
    let now = Instant::now();
    let batch: Vec<Entry> = batch
        .into_iter()
        .filter(|e| !e.lease.renew_slot.stopped.load(Ordering::Relaxed) && !e.lease.is_lost_at(now))
        .collect();
    let Some(first) = batch.first() else {
        return;
    };
    let ttl = first.plan.ttl;
    // One TTL change per lease in flight: a lease whose `extend` is in
    // flight is retried shortly (see `LeaseState::change_ttl`).
    let mut turns = Vec::with_capacity(batch.len());
    let mut sent = Vec::with_capacity(batch.len());
    for entry in &batch {
        match entry.lease.ttl_change.try_lock() {
            // Stopped since the filter above (a release, which may be
            // shortening the lease to its minimum hold under this turn):
            // nothing to renew.
            Ok(_) if entry.lease.renew_slot.stopped.load(Ordering::Relaxed) => {}
            Ok(turn) => {
                turns.push(turn);
                sent.push(entry);
            }
            Err(_) => retry(&shared, entry, now),
        }
    }
    if sent.is_empty() {
        return;
    }
    // Read before any of the batch is sent: deadlines counted from it can
    // only be early. With the reply's, the batch's only clock reads.
    let sent_at = now;
    let timeout = sent
        .iter()
        .map(|e| {
            e.plan
                .op_timeout
                .min(e.lease.deadline().saturating_duration_since(sent_at))
        })
        .max()
        .unwrap_or_default();
    let items: Vec<(&str, &LockToken)> = sent.iter().map(|e| (e.lease.key.as_str(), &e.lease.token)).collect();
    let results = tokio::time::timeout(timeout, shared.backend.renew_many(&items, ttl)).await;
    let replied_at = Instant::now();
    let mut results = match results {
        Ok(results) => results.into_iter(),
        Err(_) => Vec::new().into_iter(),
    };
    let mut renewed = Vec::with_capacity(sent.len());
    for entry in sent {
        let lease = &entry.lease;
        match results.next() {
            Some(Ok(RenewOutcome::Renewed)) => {
                lease.renewed_at(sent_at, ttl, replied_at);
                let next = on_grid(
                    crate::clock::later(sent_at, entry.plan.interval),
                    entry.plan.interval,
                    crate::clock::later(sent_at, entry.plan.interval / 2),
                )
                .min(renew_by(lease, entry.plan.interval, sent_at));
                renewed.push((
                    Entry {
                        lease: lease.clone(),
                        plan: entry.plan,
                    },
                    next,
                ));
            }
            Some(Ok(RenewOutcome::HeldByOther | RenewOutcome::Missing)) => {
                // The guard stops the renewer before it sends its release:
                // a renewal that answers after that may have found the key
                // our own release deleted. The lease ended on purpose.
                if shared.is_stopped(lease) {
                    continue;
                }
                tracing::warn!(key = %lease.key, "lease lost: renewal found another owner or no key");
                lease.mark_lost(LossReason::NotOwner);
            }
            Some(Err(e)) => {
                if e.is_outcome_unknown() {
                    lease.outcome_unknown(sent_at, ttl);
                }
                tracing::debug!(key = %lease.key, error = %e, "renewal failed; retrying until the deadline");
                retry(&shared, entry, replied_at);
            }
            None => {
                // Timed out, or no answer for this lease: it may still land.
                lease.outcome_unknown(sent_at, ttl);
                tracing::debug!(key = %lease.key, "renewal timed out; retrying until the deadline");
                retry(&shared, entry, replied_at);
            }
        }
    }
    // Queued before the turns are given back, as one at a time did: an
    // `extend` that takes a turn next finds its lease queued to hasten.
    shared.schedule_all(renewed);
    drop(turns);
}

/// Try `entry` again shortly, and no later than its deadline (where a lease
/// that is still not renewed is found lost).
fn retry(shared: &Shared, entry: &Entry, now: Instant) {
    let at = crate::clock::later(now, entry.plan.retry_delay()).min(entry.lease.deadline());
    shared.schedule(
        Entry {
            lease: entry.lease.clone(),
            plan: entry.plan,
        },
        at,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_rounds_down_within_one_slot() {
        let interval = Duration::from_secs(1);
        let base = grid_origin() + Duration::from_secs(5);
        for ms in [0u64, 1, 60, 124, 125, 999] {
            let due = base + Duration::from_millis(ms);
            let at = on_grid(due, interval, base);
            assert!(
                at <= due && due - at < Duration::from_millis(100),
                "{ms}: {:?}",
                due - at
            );
        }
        let early = on_grid(
            base + Duration::from_millis(30),
            interval,
            base + Duration::from_millis(20),
        );
        assert_eq!(early, base + Duration::from_millis(20), "never before not_before");
    }

    #[test]
    fn queue_positions_round_trip() {
        let at = grid_origin() + Duration::from_millis(1234);
        assert_eq!(instant_of(position(at)), at);
        assert_eq!(position(grid_origin()), 0);
    }
}
