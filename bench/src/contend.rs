//! The hot-key load: contenders fighting for one key, each incrementing a
//! shared counter inside the critical section.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::BoxResult;
use crate::drive::{Timing, per_op, per_sec, ratio};
use crate::locks::Locker;
use crate::measure::{Interval, Latencies, Probe, nanos};

const NOBODY: usize = usize::MAX;

/// What the contenders share besides the lock.
struct Board {
    /// Incremented non-atomically (load, yield, store) under the lock: any
    /// overlap of two holders loses an increment.
    counter: AtomicU64,
    /// Who holds the lock right now, by our own bookkeeping.
    holder: AtomicUsize,
    /// Acquisitions that found another contender still inside.
    overlaps: AtomicU64,
    /// (last holder, when it started releasing).
    last: Mutex<(usize, Option<Instant>)>,
    /// Every acquisition, warm-up included (to check the counter).
    acquisitions: AtomicU64,
}

impl Board {
    fn last(&self) -> (usize, Option<Instant>) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_last(&self, who: usize, at: Instant) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = (who, Some(at));
    }
}

/// Result of a hot-key run.
#[derive(Debug, Clone, Default)]
pub struct HotKey {
    /// Acquisitions inside the window.
    pub acquisitions: u64,
    /// Acquisitions per contender inside the window.
    pub per_contender: Vec<u64>,
    /// Waits (acquire call to grant) of acquisitions whose holder changed.
    pub waits: Latencies,
    /// Previous holder's release start to the next holder's grant.
    pub handoffs: Latencies,
    /// Release calls (start to return), the first part of a hand-off.
    pub releases: Latencies,
    /// Counter value at the end.
    pub counter: u64,
    /// Acquisitions over the whole run (must equal `counter`).
    pub total_acquisitions: u64,
    /// Acquisitions that overlapped another holder.
    pub overlaps: u64,
    /// Wall, CPU and server work of the window.
    pub interval: Interval,
    /// Failed calls, and the first message.
    pub errors: u64,
    /// The first error.
    pub first_error: Option<String>,
}

impl HotKey {
    /// Acquisitions per second.
    pub fn rate(&self) -> f64 {
        per_sec(self.acquisitions, self.interval.wall)
    }

    /// Fewest acquisitions of one contender, over its fair share.
    pub fn min_share(&self) -> f64 {
        let fair = ratio(self.acquisitions as f64, self.per_contender.len() as f64);
        ratio(self.per_contender.iter().copied().min().unwrap_or(0) as f64, fair)
    }

    /// Most acquisitions of one contender, over its fair share.
    pub fn max_share(&self) -> f64 {
        let fair = ratio(self.acquisitions as f64, self.per_contender.len() as f64);
        ratio(self.per_contender.iter().copied().max().unwrap_or(0) as f64, fair)
    }

    /// Share of acquisitions that changed the holder.
    pub fn holder_changes(&self) -> f64 {
        ratio(self.waits.len() as f64, self.acquisitions as f64)
    }

    /// Client CPU per acquisition.
    pub fn client_cpu_per_op(&self) -> Duration {
        per_op(self.interval.client_cpu, self.acquisitions)
    }

    /// Server commands per acquisition.
    pub fn commands_per_op(&self) -> f64 {
        ratio(self.interval.server.commands as f64, self.acquisitions as f64)
    }

    /// The counter equals the acquisitions and no two holders overlapped.
    pub fn exclusive(&self) -> bool {
        self.counter == self.total_acquisitions && self.overlaps == 0
    }
}

#[derive(Default)]
struct Log {
    acquired_in_window: u64,
    /// (grant time, wait) for holder changes.
    waits: Vec<(Instant, u64)>,
    handoffs: Vec<(Instant, u64)>,
    /// (release start, its duration).
    releases: Vec<(Instant, u64)>,
    grants: Vec<Instant>,
    errors: u64,
    first_error: Option<String>,
}

/// One contender per locker (pass the same `Arc` several times for the
/// shared shape), all on `key`, until the window closes.
pub async fn run_hot_key<L: Locker>(
    lockers: Vec<Arc<L>>,
    key: &str,
    timing: Timing,
    probe: &mut Probe,
) -> BoxResult<HotKey> {
    let board = Arc::new(Board {
        counter: AtomicU64::new(0),
        holder: AtomicUsize::new(NOBODY),
        overlaps: AtomicU64::new(0),
        last: Mutex::new((NOBODY, None)),
        acquisitions: AtomicU64::new(0),
    });
    let start = Instant::now();
    let measure_from = start + timing.warmup;
    let end = measure_from + timing.measure;
    let contenders = lockers.len();
    let mut set = JoinSet::new();
    for (me, locker) in lockers.into_iter().enumerate() {
        let board = board.clone();
        let key = key.to_owned();
        set.spawn(async move {
            let mut log = Log::default();
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let held = tokio::select! {
                    r = locker.acquire(&key) => r,
                    () = tokio::time::sleep_until(end.into()) => break,
                };
                let held = match held {
                    Ok(h) => h,
                    Err(e) => {
                        log.errors += 1;
                        log.first_error.get_or_insert_with(|| e.to_string());
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        continue;
                    }
                };
                let granted = Instant::now();
                if board.holder.swap(me, Ordering::SeqCst) != NOBODY {
                    board.overlaps.fetch_add(1, Ordering::Relaxed);
                }
                let (previous, released_at) = board.last();
                // The critical section: a read-modify-write split by a yield.
                let v = board.counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                board.counter.store(v + 1, Ordering::SeqCst);
                board.acquisitions.fetch_add(1, Ordering::Relaxed);
                log.grants.push(granted);
                if previous != me {
                    log.waits.push((granted, nanos(granted - t0)));
                    if let Some(r) = released_at {
                        log.handoffs
                            .push((granted, nanos(granted.saturating_duration_since(r))));
                    }
                }
                let _ = board
                    .holder
                    .compare_exchange(me, NOBODY, Ordering::SeqCst, Ordering::SeqCst);
                let release_start = Instant::now();
                board.set_last(me, release_start);
                if let Err(e) = locker.release(held).await {
                    log.errors += 1;
                    log.first_error.get_or_insert_with(|| e.to_string());
                }
                log.releases.push((release_start, nanos(release_start.elapsed())));
            }
            log
        });
    }
    tokio::time::sleep_until(measure_from.into()).await;
    let before = probe.read().await?;
    tokio::time::sleep_until(end.into()).await;
    let after = probe.read().await?;
    let mut result = HotKey {
        per_contender: Vec::with_capacity(contenders),
        ..HotKey::default()
    };
    let inside = |t: Instant| t >= before.at && t <= after.at;
    let (mut waits, mut handoffs, mut releases) = (Vec::new(), Vec::new(), Vec::new());
    while let Some(log) = set.join_next().await {
        let mut log = log?;
        log.acquired_in_window = log.grants.iter().filter(|t| inside(**t)).count() as u64;
        result.per_contender.push(log.acquired_in_window);
        result.acquisitions += log.acquired_in_window;
        waits.extend(log.waits.iter().filter(|(t, _)| inside(*t)).map(|(_, w)| *w));
        handoffs.extend(log.handoffs.iter().filter(|(t, _)| inside(*t)).map(|(_, w)| *w));
        releases.extend(log.releases.iter().filter(|(t, _)| inside(*t)).map(|(_, w)| *w));
        result.errors += log.errors;
        if result.first_error.is_none() {
            result.first_error = log.first_error;
        }
    }
    result.waits = Latencies::from_nanos(waits);
    result.handoffs = Latencies::from_nanos(handoffs);
    result.releases = Latencies::from_nanos(releases);
    result.counter = board.counter.load(Ordering::SeqCst);
    result.total_acquisitions = board.acquisitions.load(Ordering::SeqCst);
    result.overlaps = board.overlaps.load(Ordering::SeqCst);
    result.interval = after.since(&before);
    Ok(result)
}
