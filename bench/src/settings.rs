//! Run lengths of the full and quick modes.

use std::time::Duration;

use crate::drive::Timing;

/// How long and how much each scenario runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Quick smoke-test mode.
    pub quick: bool,
    /// Interleaved rounds of the rows of scenarios 1, 2, 5 and 6 (each
    /// round gets the timings below).
    pub rounds: u32,
    /// Scenario 1 rows.
    pub throughput: Timing,
    /// Scenario 1 concurrency.
    pub throughput_tasks: usize,
    /// redis-benchmark requests, unpipelined.
    pub bench_requests: u64,
    /// redis-benchmark requests with `-P 16`.
    pub bench_requests_pipelined: u64,
    /// Scenarios 2, 5 and 6 rows (one task).
    pub sequential: Timing,
    /// Scenario 3 rows.
    pub hot: Timing,
    /// Scenario 3 contenders.
    pub contenders: usize,
    /// Scenario 4 tasks.
    pub update_tasks: usize,
    /// Scenario 4 increments per task.
    pub updates_per_task: u64,
    /// Scenario 7 locks.
    pub renew_locks: usize,
    /// Scenario 7 TTL (renewed every third of it).
    pub renew_ttl: Duration,
    /// Scenario 7: time between acquiring the last lock and measuring.
    pub renew_settle: Duration,
    /// Scenario 7 measured window.
    pub renew_window: Duration,
    /// Run only rows whose label contains this (for profiling one row).
    pub filter: Option<String>,
}

impl Settings {
    /// `VERROU_BENCH_ROUNDS_N` and `VERROU_BENCH_LOCKS` override the rounds
    /// and the scenario 7 lock count (experiments).
    pub fn with_env_overrides(mut self) -> Self {
        if let Some(n) = std::env::var("VERROU_BENCH_ROUNDS_N").ok().and_then(|v| v.parse().ok()) {
            self.rounds = n;
        }
        if let Some(n) = std::env::var("VERROU_BENCH_LOCKS").ok().and_then(|v| v.parse().ok()) {
            self.renew_locks = n;
        }
        self
    }

    /// Whether the row called `label` runs: its label contains the filter,
    /// or, for a filter ending in `$`, ends with it.
    pub fn runs(&self, label: &str) -> bool {
        match self.filter.as_deref() {
            None => true,
            Some(f) => match f.strip_suffix('$') {
                Some(end) => label.ends_with(end),
                None => label.contains(f),
            },
        }
    }

    /// The full run (a few minutes).
    pub fn full() -> Self {
        Settings {
            quick: false,
            rounds: 4,
            throughput: Timing {
                warmup: Duration::from_millis(200),
                measure: Duration::from_millis(800),
            },
            throughput_tasks: 64,
            bench_requests: 300_000,
            bench_requests_pipelined: 1_000_000,
            sequential: Timing {
                warmup: Duration::from_millis(100),
                measure: Duration::from_millis(400),
            },
            hot: Timing {
                warmup: Duration::from_millis(500),
                measure: Duration::from_secs(4),
            },
            contenders: 16,
            update_tasks: 8,
            updates_per_task: 2_000,
            renew_locks: 10_000,
            renew_ttl: Duration::from_secs(3),
            renew_settle: Duration::from_millis(1_500),
            renew_window: Duration::from_secs(6),
            filter: None,
        }
    }

    /// The CI smoke test (seconds): every row runs, nothing is timed seriously.
    pub fn quick() -> Self {
        Settings {
            quick: true,
            rounds: 1,
            throughput: Timing {
                warmup: Duration::from_millis(30),
                measure: Duration::from_millis(200),
            },
            throughput_tasks: 64,
            bench_requests: 10_000,
            bench_requests_pipelined: 20_000,
            sequential: Timing {
                warmup: Duration::from_millis(20),
                measure: Duration::from_millis(100),
            },
            hot: Timing {
                warmup: Duration::from_millis(30),
                measure: Duration::from_millis(250),
            },
            contenders: 16,
            update_tasks: 8,
            updates_per_task: 50,
            renew_locks: 1_000,
            renew_ttl: Duration::from_millis(300),
            renew_settle: Duration::from_millis(100),
            renew_window: Duration::from_millis(300),
            filter: None,
        }
    }
}
