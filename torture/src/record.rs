//! What the clients record during a scenario, on the one clock of
//! [`crate::clock`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

/// One critical section (a `with_lock` body, or an unlocked one in control mode).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Body {
    /// Client index.
    pub client: usize,
    /// Key index.
    pub key: usize,
    /// When the body started (the lock was already granted).
    pub start: i64,
    /// When it returned or was cancelled.
    pub end: i64,
    /// The guard's local deadline, read when the body ended.
    pub deadline: i64,
    /// The grant's fencing token.
    pub fence: Option<u64>,
    /// Cancelled by `with_lock` on a loss signal (the time is `end`).
    pub cancelled: bool,
    /// The client's runtime was stalled inside this body.
    pub stalled: bool,
}

#[cfg(test)]
impl Body {
    /// A 10 ns section of `client` on key 0 from `start`, its deadline 100
    /// ns after the start (the checkers' tests).
    pub(crate) fn short(client: usize, start: i64) -> Body {
        Body {
            client,
            key: 0,
            start,
            end: start + 10,
            deadline: start + 100,
            fence: None,
            cancelled: false,
            stalled: false,
        }
    }
}

impl Body {
    /// End of the part of the body inside its validity window.
    pub fn valid_end(&self) -> i64 {
        self.end.min(self.deadline)
    }
}

/// One write to the protected resource.
#[derive(Debug, Clone)]
pub struct Write {
    /// Client index.
    pub client: usize,
    /// Key index.
    pub key: usize,
    /// When the resource decided.
    pub at: i64,
    /// Start of the writer's body.
    pub body_start: i64,
    /// The fencing token presented (none: the backend issues none).
    pub fence: Option<u64>,
    /// Whether the resource took it.
    pub accepted: bool,
}

/// Outcome of one `update` call of the versioned store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UpdateOutcome {
    /// Acknowledged: the increment wrote this value.
    Ok(u64),
    /// Failed with an outcome-unknown error or timed out: may or may not have applied.
    Unknown,
    /// Failed with a known outcome: nothing applied.
    Failed,
}

/// One `update` (increment) of the shared counter.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct UpdateOp {
    /// Invocation time.
    pub inv: i64,
    /// Response time.
    pub resp: i64,
    /// What came back.
    pub outcome: UpdateOutcome,
}

/// A fault window, as injected.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Window {
    /// Start.
    pub from: i64,
    /// End (the fault healed).
    pub to: i64,
}

/// A late wake-up of a client runtime's probe: the runtime did not run
/// between `due` and `woke`, for `queued` of it because the scheduler kept
/// its thread off the CPU.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Lag {
    /// Client index (whose runtime).
    pub client: usize,
    /// When the probe was due to wake.
    pub due: i64,
    /// When it woke.
    pub woke: i64,
    /// How long its thread waited for a CPU meanwhile, µs.
    pub queued: i64,
}

impl Lag {
    /// How much of the wake-up's lateness the scheduler caused, µs.
    pub fn late(&self) -> i64 {
        (self.woke - self.due).min(self.queued).max(0)
    }
}

/// Where a client process sends its records: to the run's process, which
/// keeps the one log and the one fenced resource (see `crate::child`).
pub trait Forward: Send + Sync + std::fmt::Debug {
    /// A finished or cancelled body.
    fn body(&self, b: &Body);
    /// A write to the fenced resource, decided by the run's process: whether it was accepted.
    fn write(&self, client: usize, key: usize, body_start: i64, fence: Option<u64>) -> bool;
    /// An `update`.
    fn update(&self, op: &UpdateOp);
    /// A fault window.
    fn window(&self, from: i64, to: i64);
    /// A late probe wake-up.
    fn lag(&self, l: &Lag);
    /// An error, by kind.
    fn error(&self, kind: &str);
}

/// Everything recorded in one scenario.
#[derive(Debug, Default)]
pub struct Log {
    /// In a client process: where every record goes instead (nothing is kept here).
    forward: Option<Arc<dyn Forward>>,
    bodies: Mutex<Vec<Body>>,
    writes: Mutex<Vec<Write>>,
    updates: Mutex<Vec<UpdateOp>>,
    windows: Mutex<Vec<Window>>,
    errors: Mutex<BTreeMap<String, u64>>,
    lags: Mutex<Vec<Lag>>,
    fences: Mutex<HashMap<usize, u64>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl Log {
    /// A log that forwards every record to `to` (a client process's log).
    pub fn forwarding(to: Arc<dyn Forward>) -> Self {
        Log {
            forward: Some(to),
            ..Log::default()
        }
    }

    /// Record a finished or cancelled body.
    pub fn body(&self, b: Body) {
        if let Some(f) = &self.forward {
            return f.body(&b);
        }
        lock(&self.bodies).push(b);
    }

    /// How many bodies have been recorded so far.
    pub fn bodies(&self) -> usize {
        lock(&self.bodies).len()
    }

    /// A write to the fenced resource: accepted only with a token at least
    /// the highest it has accepted for that key (no token: always accepted,
    /// the resource cannot tell).
    pub fn write(&self, client: usize, key: usize, body_start: i64, fence: Option<u64>) -> bool {
        if let Some(f) = &self.forward {
            return f.write(client, key, body_start, fence);
        }
        let mut highest = lock(&self.fences);
        let accepted = match fence {
            None => true,
            Some(f) => {
                let h = highest.entry(key).or_insert(0);
                if f >= *h {
                    *h = f;
                    true
                } else {
                    false
                }
            }
        };
        let at = crate::clock::now();
        drop(highest);
        lock(&self.writes).push(Write {
            client,
            key,
            at,
            body_start,
            fence,
            accepted,
        });
        accepted
    }

    /// Record an `update`.
    pub fn update(&self, op: UpdateOp) {
        if let Some(f) = &self.forward {
            return f.update(&op);
        }
        lock(&self.updates).push(op);
    }

    /// Record a fault window.
    pub fn window(&self, from: i64, to: i64) {
        if let Some(f) = &self.forward {
            return f.window(from, to);
        }
        lock(&self.windows).push(Window { from, to });
    }

    /// When the last fault window healed, if one was recorded.
    pub fn healed_at(&self) -> Option<i64> {
        lock(&self.windows).iter().map(|w| w.to).max()
    }

    /// Record a late wake-up of a runtime probe.
    pub fn lag(&self, l: Lag) {
        if let Some(f) = &self.forward {
            return f.lag(&l);
        }
        lock(&self.lags).push(l);
    }

    /// Count an error by kind.
    pub fn error(&self, kind: impl Into<String>) {
        if let Some(f) = &self.forward {
            return f.error(&kind.into());
        }
        *lock(&self.errors).entry(kind.into()).or_insert(0) += 1;
    }

    /// Copies of everything recorded.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            bodies: lock(&self.bodies).clone(),
            writes: lock(&self.writes).clone(),
            updates: lock(&self.updates).clone(),
            windows: lock(&self.windows).clone(),
            errors: lock(&self.errors).clone(),
            lags: lock(&self.lags).clone(),
        }
    }
}

/// A copy of a scenario's records.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Critical sections.
    pub bodies: Vec<Body>,
    /// Resource writes.
    pub writes: Vec<Write>,
    /// Counter increments.
    pub updates: Vec<UpdateOp>,
    /// Fault windows.
    pub windows: Vec<Window>,
    /// Errors by kind.
    pub errors: BTreeMap<String, u64>,
    /// Late wake-ups of the lock clients' runtime probes.
    pub lags: Vec<Lag>,
}
