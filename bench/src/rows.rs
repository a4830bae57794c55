//! Rows of repeated operations, measured in interleaved rounds: every row
//! runs once per round, so a change in the machine's load (other processes
//! on a shared machine) hits all rows of a table alike instead of whichever
//! row happened to run at that moment.

use std::sync::Arc;

use crate::BoxResult;
use crate::drive::{DynOp, Measured, Op, Timing, run_ops};
use crate::measure::Probe;
use crate::results::{Kind, OpRow};

/// One row before it runs: what to repeat and what to watch.
pub struct Subject {
    /// Row label.
    pub label: String,
    /// Who.
    pub kind: Kind,
    /// The operation.
    pub op: Arc<dyn DynOp>,
    /// The servers it talks to.
    pub probe: Probe,
    /// Operations per call of `op`.
    pub batch: u64,
}

impl Subject {
    /// A row of single operations.
    pub fn new(label: impl Into<String>, kind: Kind, op: impl Op, probe: Probe) -> Self {
        Subject {
            label: label.into(),
            kind,
            op: Arc::new(op),
            probe,
            batch: 1,
        }
    }

    /// A row timed in batches of `batch` operations per call.
    pub fn batched(mut self, batch: u64) -> Self {
        self.batch = batch;
        self
    }
}

/// Print a finished row.
pub fn say(row: &OpRow) {
    eprintln!(
        "  {:<48} {:>9.0}/s  p50 {:>7.1} µs  p99 {:>7.1} µs  cpu {:>6.2} µs/op  cmds {:>5.2}/op",
        row.label,
        row.m.rate() * row.batch as f64,
        row.m.latencies.p50().as_secs_f64() * 1e6,
        row.m.latencies.p99().as_secs_f64() * 1e6,
        row.m.client_cpu_per_op().as_secs_f64() * 1e6 / row.batch as f64,
        row.m.commands_per_op() / row.batch as f64,
    );
}

/// Run every subject `rounds` times, one window each per round, in turn
/// (in reverse on odd rounds);
/// `tasks` tasks per window. A subject whose window fails is dropped with
/// its error.
pub async fn run_subjects(
    mut subjects: Vec<Subject>,
    tasks: usize,
    timing: Timing,
    rounds: u32,
    timers: Option<&crate::timers::TimerProbe>,
) -> Vec<(String, BoxResult<OpRow>)> {
    let mut measured: Vec<Option<BoxResult<Measured>>> = subjects.iter().map(|_| None).collect();
    // VERROU_BENCH_ROUNDS=1 prints every round's p50 (to see drift).
    let show_rounds = std::env::var_os("VERROU_BENCH_ROUNDS").is_some();
    for round in 0..rounds.max(1) {
        // Odd rounds run the rows in reverse (A B … B A): a drift of the
        // machine over a round, or what one row leaves behind for the next
        // (a server's background work, a warm cache), then falls on every
        // row alike instead of always on the same neighbour.
        let mut order: Vec<(&mut Subject, &mut Option<BoxResult<Measured>>)> =
            subjects.iter_mut().zip(measured.iter_mut()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for (subject, slot) in order {
            if matches!(slot, Some(Err(_))) {
                continue;
            }
            let prefix = format!("k:{}", subject.label.replace(' ', "_"));
            let window = run_ops(subject.op.clone(), tasks, &prefix, timing, &mut subject.probe).await;
            if show_rounds && let Ok(m) = &window {
                eprintln!(
                    "    round {round} {:<44} p50 {:>7.1} µs  {:>9.0}/s",
                    subject.label,
                    m.latencies.p50().as_secs_f64() * 1e6,
                    m.rate()
                );
            }
            *slot = match (slot.take(), window) {
                (_, Err(e)) => Some(Err(e)),
                (None, Ok(m)) => Some(Ok(m)),
                (Some(Ok(mut acc)), Ok(m)) => {
                    acc.absorb(m);
                    Some(Ok(acc))
                }
                (Some(Err(e)), _) => Some(Err(e)),
            };
        }
    }
    if let Some(probe) = timers {
        // After the rounds, each warm row once more with the probe on: its
        // traps never touch the measured numbers.
        for (subject, slot) in subjects.iter_mut().zip(measured.iter_mut()) {
            let Some(Ok(m)) = slot else {
                continue;
            };
            m.timers = count_timers(probe, subject, tasks).await;
        }
    }
    subjects
        .into_iter()
        .zip(measured)
        .map(|(subject, m)| {
            let row = m.unwrap_or_else(|| Err("never ran".into())).map(|m| OpRow {
                label: subject.label.clone(),
                kind: subject.kind,
                m,
                batch: subject.batch,
            });
            if let Ok(row) = &row {
                say(row);
            }
            (subject.label, row)
        })
        .collect()
}

/// Timers armed over one short window of `subject` with `probe` on (no
/// warm-up: the row is warm from its rounds), and the window's operations.
async fn count_timers(probe: &crate::timers::TimerProbe, subject: &mut Subject, tasks: usize) -> Option<(u64, u64)> {
    let timing = Timing {
        warmup: std::time::Duration::ZERO,
        measure: std::time::Duration::from_millis(300),
    };
    let prefix = format!("t:{}", subject.label.replace(' ', "_"));
    probe.enable(true).ok()?;
    let before = probe.hits();
    let window = run_ops(subject.op.clone(), tasks, &prefix, timing, &mut subject.probe).await;
    let after = probe.hits();
    let _ = probe.enable(false);
    match (before, after, window) {
        (Some(b), Some(a), Ok(m)) if m.ops > 0 => Some((a.saturating_sub(b), m.ops)),
        _ => None,
    }
}
