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
