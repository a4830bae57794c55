//! The scheduler's own lateness, measured on each client's runtime: a task
//! that sleeps a few milliseconds in a loop and records how late each
//! wake-up is, and how much of that its thread spent runnable but waiting
//! for a CPU (the run-queue wait of `/proc/thread-self/schedstat`). On a
//! loaded machine a client thread can be kept off the CPU for tens of
//! milliseconds; its loss timer is then late by as much, and the checker
//! must not blame the library for it (see `check::measure`). A runtime
//! blocked by its own code is late too but not queued: that is not excused.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::clock;
use crate::record::{Lag, Log};

/// How long the probe sleeps between wake-ups.
pub const PERIOD: Duration = Duration::from_millis(5);

/// Wake-ups later than this are recorded (tokio's timer wheel has 1 ms
/// granularity, so smaller delays are the timer's, not the scheduler's).
const RECORD_OVER: Duration = Duration::from_millis(2);

/// Probe the current runtime for ever (abort it with the returned task).
pub async fn run(client: usize, log: Arc<Log>) {
    loop {
        let queued_before = queued_us();
        let due = Instant::now() + PERIOD;
        tokio::time::sleep_until(due).await;
        let woke = Instant::now();
        if woke.saturating_duration_since(due) > RECORD_OVER {
            let (due, woke) = (clock::at(due), clock::at(woke));
            log.lag(Lag {
                client,
                due,
                woke,
                // Without schedstat (not Linux), the whole lateness.
                queued: match (queued_before, queued_us()) {
                    (Some(a), Some(b)) => b - a,
                    _ => woke - due,
                },
            });
        }
    }
}

/// This thread's total run-queue wait so far, µs (Linux schedstat).
fn queued_us() -> Option<i64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: i64 = stat.split_whitespace().nth(1)?.parse().ok()?;
    Some(ns / 1000)
}

/// Aborts the probe when the client's loop ends.
pub struct Running(tokio::task::JoinHandle<()>);

impl Running {
    /// Start the probe on the current runtime.
    pub fn start(client: usize, log: Arc<Log>) -> Self {
        Running(tokio::spawn(run(client, log)))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.abort();
    }
}
