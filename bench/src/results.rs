//! What a run produced, scenario by scenario: the report and the chart are
//! both rendered from this.

use std::time::Duration;

use crate::contend::HotKey;
use crate::drive::{Measured, per_op, per_sec, ratio};
use crate::holds::Peak;
use crate::measure::{Interval, Latencies};

/// Who a row measures (colours the chart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One of verrou's backends.
    Verrou,
    /// Another library (rslock).
    Peer,
    /// A thin client of the same library, no framework.
    Raw,
    /// An in-process reference (tokio's mutex) or a diagnostic variant.
    Reference,
}

/// Label of the rslock rows.
pub const RSLOCK: &str = "rslock 0.10";
/// Label of the raw redis-rs rows.
pub const RAW_REDIS_RS: &str = "raw redis-rs (SET NX PX + EVALSHA)";
/// Label of the raw redis-rs rows that acquire with a script.
pub const RAW_REDIS_RS_SCRIPTED: &str = "raw redis-rs (EVALSHA acquire + EVALSHA release)";
/// Label of the raw fred rows that release with `CAD`.
pub const RAW_FRED: &str = "raw fred (SET NX PX + CAD)";
/// Label of the raw fred rows that release with a script: the commands the
/// Tair backend sends with release notifications on (its default).
pub const RAW_FRED_SCRIPTED: &str = "raw fred (SET NX PX + EVALSHA)";

/// A row of repeated operations.
#[derive(Debug, Clone)]
pub struct OpRow {
    /// Label.
    pub label: String,
    /// Who.
    pub kind: Kind,
    /// Numbers.
    pub m: Measured,
    /// Operations per timed call (tight in-process loops are timed in batches).
    pub batch: u64,
}

impl OpRow {
    /// Wall time per single operation, from the throughput.
    pub fn time_per_op(&self) -> Duration {
        let rate = self.m.rate() * self.batch.max(1) as f64;
        if rate > 0.0 {
            Duration::from_secs_f64(1.0 / rate)
        } else {
            Duration::ZERO
        }
    }
}

/// A redis-benchmark run.
#[derive(Debug, Clone)]
pub struct CeilingRow {
    /// Label.
    pub label: String,
    /// The exact command line.
    pub command: String,
    /// Requests per second reported by redis-benchmark.
    pub rps: f64,
    /// Its p50, in ms.
    pub p50_ms: f64,
    /// Its p99, in ms.
    pub p99_ms: f64,
    /// Requests sent.
    pub requests: u64,
    /// redis-benchmark's own CPU time.
    pub client_cpu: Duration,
    /// What the server did meanwhile.
    pub server: Interval,
}

impl CeilingRow {
    /// Client CPU per request.
    pub fn client_cpu_per_op(&self) -> Duration {
        per_op(self.client_cpu, self.requests)
    }
}

/// Scenario 1.
#[derive(Debug, Clone, Default)]
pub struct Uncontended {
    /// Concurrent tasks.
    pub tasks: usize,
    /// Lock rows.
    pub rows: Vec<OpRow>,
    /// Server ceilings.
    pub ceilings: Vec<CeilingRow>,
}

/// The client library a row's round trip is compared against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Library {
    /// redis-rs (deadpool-redis, rslock).
    RedisRs,
    /// fred.
    Fred,
    /// tokio-postgres (the postgres rows).
    Postgres,
    /// etcd-client (the etcd rows).
    Etcd,
    /// async-nats (the NATS rows).
    Nats,
}

impl Library {
    /// Name.
    pub fn name(self) -> &'static str {
        match self {
            Library::RedisRs => "redis-rs",
            Library::Fred => "fred",
            Library::Postgres => "tokio-postgres",
            Library::Etcd => "etcd-client",
            Library::Nats => "async-nats",
        }
    }
}

/// Scenario 2 on one kind of runtime.
#[derive(Debug, Clone, Default)]
pub struct Latency {
    /// The runtime the rows ran on.
    pub runtime: &'static str,
    /// PING round trips, per library.
    pub pings: Vec<(Library, OpRow)>,
    /// Sequential pairs, with the library whose PING they compare against.
    pub rows: Vec<(Library, OpRow)>,
}

impl Latency {
    /// PING p50 of a library.
    pub fn ping_p50(&self, lib: Library) -> Option<Duration> {
        self.pings
            .iter()
            .find(|(l, _)| *l == lib)
            .map(|(_, r)| r.m.latencies.p50())
    }
}

/// Hot-key shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// All contenders share one backend instance (one manager).
    Shared,
    /// Each contender has its own instance and connections.
    Independent,
}

impl Shape {
    /// Name.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Shared => "shared",
            Shape::Independent => "independent",
        }
    }
}

/// A hot-key row.
#[derive(Debug, Clone)]
pub struct HotRow {
    /// Label.
    pub label: String,
    /// Who.
    pub kind: Kind,
    /// Shape.
    pub shape: Shape,
    /// Fair mode (`LockOptions::fair`): FIFO across managers.
    pub fair: bool,
    /// Numbers.
    pub r: HotKey,
}

/// Scenario 3.
#[derive(Debug, Clone, Default)]
pub struct HotKeys {
    /// Contenders.
    pub contenders: usize,
    /// Rows.
    pub rows: Vec<HotRow>,
}

/// An optimistic-update row.
#[derive(Debug, Clone)]
pub struct UpdateRow {
    /// Label.
    pub label: String,
    /// Who.
    pub kind: Kind,
    /// Successful increments.
    pub increments: u64,
    /// Attempts (each a write try).
    pub attempts: u64,
    /// Wall, CPU, server work of the whole run.
    pub interval: Interval,
    /// The value read back at the end.
    pub final_value: u64,
    /// What it must be.
    pub expected: u64,
    /// Failed updates.
    pub errors: u64,
    /// The first error.
    pub first_error: Option<String>,
}

impl UpdateRow {
    /// Increments per second.
    pub fn rate(&self) -> f64 {
        per_sec(self.increments, self.interval.wall)
    }

    /// Top-level server commands per successful increment.
    pub fn commands_per_increment(&self) -> f64 {
        ratio(self.interval.server.commands as f64, self.increments as f64)
    }

    /// Attempts per successful increment.
    pub fn attempts_per_increment(&self) -> f64 {
        ratio(self.attempts as f64, self.increments as f64)
    }

    /// Client CPU per increment.
    pub fn client_cpu_per_op(&self) -> Duration {
        per_op(self.interval.client_cpu, self.increments)
    }
}

/// Scenario 4.
#[derive(Debug, Clone, Default)]
pub struct Updates {
    /// Tasks.
    pub tasks: usize,
    /// Increments per task.
    pub per_task: u64,
    /// Rows.
    pub rows: Vec<UpdateRow>,
}

/// Scenario 5 on one kind of runtime.
#[derive(Debug, Clone, Default)]
pub struct Redlock {
    /// The runtime the rows ran on.
    pub runtime: &'static str,
    /// (single instance, five instances) of the same implementation.
    pub pairs: Vec<(OpRow, OpRow)>,
    /// PING fan-outs: the network floor of a round over five servers.
    pub floors: Vec<OpRow>,
}

/// Scenario 6.
#[derive(Debug, Clone, Default)]
pub struct Memory {
    /// The memory backend through the manager.
    pub verrou: Option<OpRow>,
    /// tokio's mutex.
    pub tokio: Option<OpRow>,
    /// Diagnostic variants.
    pub diagnostics: Vec<OpRow>,
}

/// A many-held-locks row.
#[derive(Debug, Clone)]
pub struct RenewRow {
    /// Label.
    pub label: String,
    /// Locks held.
    pub locks: usize,
    /// Lock TTL.
    pub ttl: Duration,
    /// Renew interval.
    pub renew_every: Duration,
    /// Time to acquire them all.
    pub acquire_time: Duration,
    /// The measured window.
    pub interval: Interval,
    /// Leases lost by the end of the window.
    pub lost: usize,
    /// Client CPU of the same idle window with no locks held.
    pub idle_cpu: f64,
    /// Heap allocations of the whole process over the measured window.
    pub allocations: crate::budget::Allocations,
}

impl RenewRow {
    /// Client CPU as a fraction of one core.
    pub fn client_core_share(&self) -> f64 {
        ratio(self.interval.client_cpu.as_secs_f64(), self.interval.wall.as_secs_f64())
    }

    /// Server CPU as a fraction of one core.
    pub fn server_core_share(&self) -> f64 {
        ratio(self.interval.server.cpu.as_secs_f64(), self.interval.wall.as_secs_f64())
    }

    /// Server commands per second.
    pub fn commands_per_sec(&self) -> f64 {
        per_sec(self.interval.server.commands, self.interval.wall)
    }

    /// Renewals the schedule asks for, per second.
    pub fn expected_renewals_per_sec(&self) -> f64 {
        ratio(self.locks as f64, self.renew_every.as_secs_f64())
    }

    /// Client CPU per expected renewal.
    pub fn cpu_per_renewal(&self) -> Duration {
        let renewals = self.expected_renewals_per_sec() * self.interval.wall.as_secs_f64();
        per_op(self.interval.client_cpu, renewals as u64)
    }

    /// Heap allocations per expected renewal (process-wide: the count
    /// of an idle process's window is a few dozen against tens of
    /// thousands of renewals).
    pub fn allocations_per_renewal(&self) -> f64 {
        let renewals = self.expected_renewals_per_sec() * self.interval.wall.as_secs_f64();
        ratio(self.allocations.count as f64, renewals)
    }
}

/// Scenario 7.
#[derive(Debug, Clone, Default)]
pub struct Renewals {
    /// Rows.
    pub rows: Vec<RenewRow>,
}

/// A lock-kind row (scenario 8).
#[derive(Debug, Clone)]
pub struct KindRow {
    /// Backend label.
    pub label: String,
    /// The kind (`semaphore`, `read-write`, …).
    pub kind: &'static str,
    /// The load, e.g. `N = 4, 16 contenders`.
    pub setup: String,
    /// Acquisitions granted inside the window.
    pub acquisitions: u64,
    /// Their waits (acquire call to grant).
    pub waits: Latencies,
    /// Wall, CPU and server work of the window.
    pub interval: Interval,
    /// The bound, in words (`≤ 4 holders`).
    pub bound: String,
    /// The sweep over every recorded hold of the run (warm-up included).
    pub peak: Peak,
    /// Kind-specific invariants that failed (conserved balance, increasing terms).
    pub broken: Vec<String>,
    /// Kind-specific numbers (reads and writes, transfers, terms).
    pub detail: String,
    /// Failed calls, and the first message.
    pub errors: u64,
    /// The first error.
    pub first_error: Option<String>,
}

impl KindRow {
    /// Acquisitions per second.
    pub fn rate(&self) -> f64 {
        per_sec(self.acquisitions, self.interval.wall)
    }

    /// Client CPU per acquisition.
    pub fn client_cpu_per_op(&self) -> Duration {
        per_op(self.interval.client_cpu, self.acquisitions)
    }

    /// Server commands per acquisition.
    pub fn commands_per_op(&self) -> f64 {
        ratio(self.interval.server.commands as f64, self.acquisitions as f64)
    }

    /// The bound held over every hold and every other invariant held.
    pub fn correct(&self) -> bool {
        self.peak.violations == 0 && self.broken.is_empty()
    }
}

/// Scenario 8.
#[derive(Debug, Clone, Default)]
pub struct Kinds {
    /// Rows.
    pub rows: Vec<KindRow>,
    /// (backend, kinds it refuses by its capability flags).
    pub unsupported: Vec<(String, Vec<&'static str>)>,
}

/// Everything.
#[derive(Debug, Clone, Default)]
pub struct Results {
    /// Scenario 1.
    pub uncontended: Option<Uncontended>,
    /// Scenario 2 on a current-thread runtime (the one the target uses).
    pub latency: Option<Latency>,
    /// Scenario 2 on the multi-threaded runtime.
    pub latency_multi: Option<Latency>,
    /// Scenario 3.
    pub hot_keys: Option<HotKeys>,
    /// Scenario 4.
    pub updates: Option<Updates>,
    /// Scenario 5 on a current-thread runtime (the one the target uses).
    pub redlock: Option<Redlock>,
    /// Scenario 5 on the multi-threaded runtime.
    pub redlock_multi: Option<Redlock>,
    /// Scenario 6.
    pub memory: Option<Memory>,
    /// Scenario 7.
    pub renewals: Option<Renewals>,
    /// Scenario 8.
    pub kinds: Option<Kinds>,
    /// Problems met on the way (a row that could not run, errors).
    pub problems: Vec<String>,
}
