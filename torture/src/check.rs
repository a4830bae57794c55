//! The checks of one scenario: exclusion inside validity windows, fencing,
//! loss-signal timeliness, liveness, and the counter's linearizability.

use std::collections::BTreeMap;

use crate::linearize::{self, Verdict};
use crate::record::{Body, Lag, Snapshot};

/// Settings the checks derive their bounds from.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Stated scheduling slack for loss signals, µs.
    pub slack_us: i64,
    /// Acquisitions must resume within this after a fault heals, µs.
    pub recovery_us: i64,
}

/// What was measured in one scenario.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Bodies that ran (completed or cancelled).
    pub acquisitions: usize,
    /// Bodies cancelled on a loss signal.
    pub cancelled: usize,
    /// Pairs of bodies of different holders of one key that overlap inside
    /// both validity windows.
    pub overlaps: usize,
    /// Longest such overlap, µs.
    pub max_overlap_us: i64,
    /// Pairs that overlap when each body is taken whole (past its deadline too).
    pub body_overlaps: usize,
    /// Writes by a holder after a newer holder of the key had started, accepted.
    pub stale_accepted: usize,
    /// Same, rejected by the fencing check.
    pub stale_rejected: usize,
    /// Writes by the newest holder rejected (fencing tokens went backwards).
    pub fresh_rejected: usize,
    /// Whether the backend issued fencing tokens.
    pub fenced: bool,
    /// Bodies told of the loss (or ending) later than deadline + slack +
    /// the time their runtime could not run after the deadline.
    pub late_losses: usize,
    /// Worst lateness of those, µs.
    pub max_late_us: i64,
    /// Bodies that ended past deadline + slack, but by no more than their
    /// runtime's observed scheduling delay after the deadline.
    pub excused: usize,
    /// Worst wake-up lateness of any lock client's runtime probe, µs
    /// (outside an injected stall).
    pub sched_max_us: i64,
    /// Bodies of the stalled client that ran past their deadline (they
    /// cannot be told while the runtime is stopped; fencing must catch them).
    pub stalled_late: usize,
    /// Time from the end of the first fault window to the next body start, µs.
    pub recovery_us: Option<i64>,
    /// A fault was planned but never injected (e.g. the stalled client never held a lock).
    pub fault_missing: bool,
    /// Acquisitions did not resume within the bound (or none at all).
    pub stuck: bool,
    /// Client tasks that did not finish within their bound.
    pub hangs: usize,
    /// The counter history's verdict, if the backend has a versioned store.
    pub linear: Option<Verdict>,
    /// Errors by kind.
    pub errors: BTreeMap<String, u64>,
}

/// Run every check on a scenario's records.
pub fn measure(
    s: &Snapshot,
    b: Bounds,
    fault_planned: bool,
    final_value: Option<Option<u64>>,
    hangs: usize,
) -> Measured {
    let mut m = Measured {
        acquisitions: s.bodies.len(),
        cancelled: s.bodies.iter().filter(|x| x.cancelled).count(),
        fenced: s.writes.iter().any(|w| w.fence.is_some()),
        hangs,
        errors: s.errors.clone(),
        ..Measured::default()
    };
    overlaps(&s.bodies, &mut m);
    fencing(s, &mut m);
    for body in &s.bodies {
        // A body must be cancelled by its deadline: ending (either way)
        // past deadline + slack means the holder was not told in time,
        // unless its runtime could not run for the excess: the loss timer
        // and the cancellation run on that runtime, so the time its probe
        // saw it stopped between the deadline and the body's end delays
        // them by as much. Lateness elsewhere (another client, or before
        // the deadline) excuses nothing, nor does a runtime blocked by its
        // own code (late but not queued), so a loss never signalled still
        // shows with its full lateness.
        let late = body.end - body.deadline;
        if late <= b.slack_us {
            continue;
        }
        if body.stalled {
            m.stalled_late += 1;
        } else if late > b.slack_us + stopped_within(&s.lags, body.client, body.deadline, body.end) {
            m.late_losses += 1;
            m.max_late_us = m.max_late_us.max(late);
        } else {
            m.excused += 1;
        }
    }
    m.sched_max_us = s
        .lags
        .iter()
        .filter(|l| {
            // The injected stall is the fault, not the scheduler.
            !s.bodies
                .iter()
                .any(|x| x.stalled && x.client == l.client && l.due < x.end && l.woke > x.start)
        })
        .map(Lag::late)
        .max()
        .unwrap_or(0);
    match s.windows.iter().map(|w| w.to).min() {
        Some(healed) => {
            m.recovery_us = s
                .bodies
                .iter()
                .map(|x| x.start)
                .filter(|&t| t >= healed)
                .min()
                .map(|t| t - healed);
            m.stuck = m.recovery_us.is_none_or(|r| r > b.recovery_us);
        }
        None => {
            m.fault_missing = fault_planned;
            m.stuck = s.bodies.is_empty();
        }
    }
    m.linear = final_value.map(|f| linearize::check(&s.updates, f));
    m
}

/// How long the scheduler kept `client`'s runtime from running between
/// `from` and `to`, µs: the probe's late wake-ups clipped to that interval,
/// each at most the run-queue wait its thread had meanwhile. The probe wakes
/// every few ms, so a delay that began while it slept is seen up to one
/// period short; the stated slack covers that.
fn stopped_within(lags: &[Lag], client: usize, from: i64, to: i64) -> i64 {
    lags.iter()
        .filter(|l| l.client == client)
        .map(|l| (l.woke.min(to) - l.due.max(from)).clamp(0, l.late()))
        .sum()
}

fn overlaps(bodies: &[Body], m: &mut Measured) {
    let mut by_key: BTreeMap<usize, Vec<&Body>> = BTreeMap::new();
    for b in bodies {
        by_key.entry(b.key).or_default().push(b);
    }
    for list in by_key.values_mut() {
        list.sort_by_key(|b| b.start);
        for (i, a) in list.iter().enumerate() {
            for b in &list[i + 1..] {
                if b.start >= a.end {
                    break;
                }
                m.body_overlaps += 1;
                let overlap = a.valid_end().min(b.valid_end()) - b.start;
                if overlap > 0 {
                    m.overlaps += 1;
                    m.max_overlap_us = m.max_overlap_us.max(overlap);
                }
            }
        }
    }
}

fn fencing(s: &Snapshot, m: &mut Measured) {
    let mut starts: BTreeMap<usize, Vec<i64>> = BTreeMap::new();
    for b in &s.bodies {
        starts.entry(b.key).or_default().push(b.start);
    }
    for list in starts.values_mut() {
        list.sort_unstable();
    }
    for w in &s.writes {
        // Stale: a newer holder of the key had started before this write.
        let stale = starts
            .get(&w.key)
            .is_some_and(|l| l.iter().any(|&t| t > w.body_start && t < w.at));
        match (stale, w.accepted) {
            (true, true) => m.stale_accepted += 1,
            (true, false) => m.stale_rejected += 1,
            (false, false) => m.fresh_rejected += 1,
            (false, true) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Lag, Window, Write};

    const BOUNDS: Bounds = Bounds {
        slack_us: 10,
        recovery_us: 1_000,
    };

    fn body(client: usize, start: i64, end: i64, deadline: i64) -> Body {
        Body {
            client,
            key: 0,
            start,
            end,
            deadline,
            fence: Some(client as u64),
            cancelled: false,
            stalled: false,
        }
    }

    fn write(client: usize, body_start: i64, at: i64, accepted: bool) -> Write {
        Write {
            client,
            key: 0,
            at,
            body_start,
            fence: Some(client as u64),
            accepted,
        }
    }

    fn snapshot(bodies: Vec<Body>, writes: Vec<Write>) -> Snapshot {
        Snapshot {
            bodies,
            writes,
            ..Snapshot::default()
        }
    }

    #[test]
    fn overlapping_sections_inside_their_windows_are_counted() {
        let s = snapshot(vec![body(0, 0, 100, 200), body(1, 50, 150, 300)], vec![]);
        let m = measure(&s, BOUNDS, false, None, 0);
        assert_eq!((m.overlaps, m.max_overlap_us), (1, 50));
    }

    #[test]
    fn a_section_past_its_deadline_overlaps_only_as_a_body() {
        // client 0's deadline passed at 40; client 1 started at 50
        let s = snapshot(vec![body(0, 0, 100, 40), body(1, 50, 150, 300)], vec![]);
        let m = measure(&s, BOUNDS, false, None, 0);
        assert_eq!((m.overlaps, m.body_overlaps), (0, 1));
        assert_eq!(m.late_losses, 1, "ended 60 µs after its deadline, slack 10");
    }

    #[test]
    fn a_late_body_on_a_runtime_that_ran_on_time_is_flagged() {
        // a renewer that never cancels: the body runs on well past its
        // deadline while its runtime's probe woke on time
        let s = snapshot(vec![body(0, 0, 111, 100)], vec![]);
        let m = measure(&s, BOUNDS, false, None, 0);
        assert_eq!((m.late_losses, m.excused, m.max_late_us), (1, 0, 11));
    }

    #[test]
    fn a_body_late_by_exactly_its_runtimes_stall_is_excused() {
        // the scheduler kept client 0's runtime off the CPU from 110 to 160
        // (50 µs), after the deadline at 100: the body may end up to
        // 100 + 10 + 50
        let lag = Lag {
            client: 0,
            due: 110,
            woke: 160,
            queued: 50,
        };
        let mut s = snapshot(vec![body(0, 0, 160, 100)], vec![]);
        s.lags.push(lag);
        let m = measure(&s, BOUNDS, false, None, 0);
        assert_eq!((m.late_losses, m.excused, m.sched_max_us), (0, 1, 50));
        s.bodies[0].end = 161;
        let m = measure(&s, BOUNDS, false, None, 0);
        assert_eq!((m.late_losses, m.excused), (1, 0), "one µs more than the stall");
    }

    #[test]
    fn lateness_of_another_runtime_or_before_the_deadline_excuses_nothing() {
        let mut s = snapshot(vec![body(0, 0, 160, 100)], vec![]);
        // another client's runtime stalled over the whole interval
        s.lags.push(Lag {
            client: 1,
            due: 90,
            woke: 200,
            queued: 110,
        });
        // this client's runtime stalled, but before its deadline
        s.lags.push(Lag {
            client: 0,
            due: 20,
            woke: 90,
            queued: 70,
        });
        let m = measure(&s, BOUNDS, false, None, 0);
        assert_eq!((m.late_losses, m.excused), (1, 0));
    }

    #[test]
    fn a_runtime_blocked_by_its_own_code_excuses_nothing() {
        // the probe woke 60 µs late after the deadline, but its thread
        // waited for a CPU only 5 µs of that: something blocked the runtime
        let mut s = snapshot(vec![body(0, 0, 160, 100)], vec![]);
        s.lags.push(Lag {
            client: 0,
            due: 100,
            woke: 160,
            queued: 5,
        });
        let m = measure(&s, BOUNDS, false, None, 0);
        assert_eq!((m.late_losses, m.excused, m.sched_max_us), (1, 0, 5));
    }

    #[test]
    fn writes_after_a_newer_holder_started_are_stale() {
        let bodies = vec![body(0, 0, 100, 40), body(1, 50, 150, 300)];
        let writes = vec![
            write(0, 0, 5, true),    // before the newer holder: fine
            write(0, 0, 90, false),  // stale, rejected
            write(0, 0, 95, true),   // stale, accepted
            write(1, 50, 60, false), // newest holder rejected: tokens went backwards
        ];
        let m = measure(&snapshot(bodies, writes), BOUNDS, false, None, 0);
        assert_eq!((m.stale_rejected, m.stale_accepted, m.fresh_rejected), (1, 1, 1));
    }

    #[test]
    fn no_section_after_the_fault_healed_is_stuck() {
        let mut s = snapshot(vec![body(0, 0, 10, 100)], vec![]);
        s.windows.push(Window { from: 20, to: 30 });
        let m = measure(&s, BOUNDS, true, None, 0);
        assert!(m.stuck && m.recovery_us.is_none());
        s.bodies.push(body(1, 500, 510, 600));
        let m = measure(&s, BOUNDS, true, None, 0);
        assert!(!m.stuck && m.recovery_us == Some(470));
    }
}
