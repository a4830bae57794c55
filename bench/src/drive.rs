//! Load generators: N tasks doing acquire+release pairs for a fixed time.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::BoxResult;
use crate::locks::Locker;
use crate::measure::{Interval, Latencies, Probe, nanos};

/// One timed operation on a key: an acquire+release pair, a PING, ...
pub trait Op: Send + Sync + 'static {
    /// Do it once.
    fn once(&self, key: &str) -> impl Future<Output = BoxResult<()>> + Send;
}

/// [`Op`] behind a pointer, so rows of different types can share a list.
pub trait DynOp: Send + Sync + 'static {
    /// [`Op::once`], boxed.
    fn once_boxed<'a>(&'a self, key: &'a str) -> Pin<Box<dyn Future<Output = BoxResult<()>> + Send + 'a>>;
}

impl<O: Op> DynOp for O {
    fn once_boxed<'a>(&'a self, key: &'a str) -> Pin<Box<dyn Future<Output = BoxResult<()>> + Send + 'a>> {
        Box::pin(self.once(key))
    }
}

impl Op for dyn DynOp {
    async fn once(&self, key: &str) -> BoxResult<()> {
        self.once_boxed(key).await
    }
}

/// Acquire+release pairs of a [`Locker`].
pub struct Pairs<L>(pub L);

impl<L: Locker> Op for Pairs<L> {
    fn once(&self, key: &str) -> impl Future<Output = BoxResult<()>> + Send {
        self.0.pair(key)
    }
}

/// Warm-up, then the measured window.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Run but not measured (connections, scripts loaded, caches warm).
    pub warmup: Duration,
    /// Measured.
    pub measure: Duration,
}

/// What a timed run produced.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Operations that started and finished inside the window.
    pub ops: u64,
    /// Their latencies.
    pub latencies: Latencies,
    /// Wall time, client CPU and server work of the window.
    pub interval: Interval,
    /// Failed operations (whole run), with the first message.
    pub errors: u64,
    /// The first error, if any.
    pub first_error: Option<String>,
    /// Timers armed (tokio's, process-wide) and the operations of the
    /// counting window they were counted over ([`crate::timers`]).
    pub timers: Option<(u64, u64)>,
}

impl Measured {
    /// Add another window of the same row (rounds are interleaved with other
    /// rows so that every row sees the same machine load).
    pub fn absorb(&mut self, other: Measured) {
        self.ops += other.ops;
        self.latencies.merge(other.latencies);
        self.interval.add(other.interval);
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        if self.timers.is_none() {
            self.timers = other.timers;
        }
    }

    /// Timers armed per operation, where they were counted.
    pub fn timers_per_op(&self) -> Option<f64> {
        self.timers.map(|(hits, ops)| hits as f64 / ops.max(1) as f64)
    }

    /// Operations per second.
    pub fn rate(&self) -> f64 {
        per_sec(self.ops, self.interval.wall)
    }

    /// Client CPU per operation.
    pub fn client_cpu_per_op(&self) -> Duration {
        per_op(self.interval.client_cpu, self.ops)
    }

    /// Heap allocations per operation (the whole process's, over the
    /// window).
    pub fn allocations_per_op(&self) -> f64 {
        self.interval.allocations.count as f64 / self.ops.max(1) as f64
    }

    /// Bytes allocated per operation.
    pub fn alloc_bytes_per_op(&self) -> f64 {
        self.interval.allocations.bytes as f64 / self.ops.max(1) as f64
    }

    /// Server CPU per operation.
    pub fn server_cpu_per_op(&self) -> Duration {
        per_op(self.interval.server.cpu, self.ops)
    }

    /// Top-level server commands per operation.
    pub fn commands_per_op(&self) -> f64 {
        ratio(self.interval.server.commands as f64, self.ops as f64)
    }

    /// Per-command breakdown per operation.
    pub fn breakdown(&self) -> String {
        self.interval.server.breakdown(self.ops)
    }
}

/// `times` repetitions of an op, timed as one (for operations too short to
/// time one by one).
pub struct Repeat<O> {
    /// The op.
    pub op: O,
    /// Repetitions per timed call.
    pub times: u64,
}

impl<O: Op> Op for Repeat<O> {
    async fn once(&self, key: &str) -> BoxResult<()> {
        for _ in 0..self.times {
            self.op.once(key).await?;
        }
        Ok(())
    }
}

/// `n / wall` per second.
pub fn per_sec(n: u64, wall: Duration) -> f64 {
    ratio(n as f64, wall.as_secs_f64())
}

/// `total / n`.
pub fn per_op(total: Duration, n: u64) -> Duration {
    if n == 0 {
        Duration::ZERO
    } else {
        Duration::from_secs_f64(total.as_secs_f64() / n as f64)
    }
}

/// `a / b`, zero when `b` is zero.
pub fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 { 0.0 } else { a / b }
}

struct TaskLog {
    /// (start, end) of each successful pair.
    samples: Vec<(Instant, Instant)>,
    errors: u64,
    first_error: Option<String>,
}

/// `tasks` tasks, each on its own key (`{prefix}:{task}`), repeating `op`
/// until the window closes.
pub async fn run_ops<O: Op + ?Sized>(
    op: Arc<O>,
    tasks: usize,
    prefix: &str,
    timing: Timing,
    probe: &mut Probe,
) -> BoxResult<Measured> {
    let start = Instant::now();
    let measure_from = start + timing.warmup;
    let end = measure_from + timing.measure;
    let mut set = JoinSet::new();
    for task in 0..tasks {
        let op = op.clone();
        let key = format!("{prefix}:{task}");
        set.spawn(async move {
            let mut log = TaskLog {
                samples: Vec::with_capacity(4096),
                errors: 0,
                first_error: None,
            };
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                match op.once(&key).await {
                    Ok(()) => log.samples.push((t0, Instant::now())),
                    Err(e) => {
                        log.errors += 1;
                        log.first_error.get_or_insert_with(|| e.to_string());
                        // An error loop must not spin: it would starve the others.
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
                // An op that never waits (in-process) must still let the
                // runtime's other tasks (the window's probe) run now and then.
                tokio::task::consume_budget().await;
            }
            log
        });
    }
    tokio::time::sleep_until(measure_from.into()).await;
    let before = probe.read().await?;
    tokio::time::sleep_until(end.into()).await;
    let after = probe.read().await?;
    let mut measured = Measured::default();
    let mut lat = Vec::new();
    while let Some(log) = set.join_next().await {
        let log = log?;
        measured.errors += log.errors;
        if measured.first_error.is_none() {
            measured.first_error = log.first_error;
        }
        for (t0, t1) in log.samples {
            if t0 >= before.at && t1 <= after.at {
                lat.push(nanos(t1 - t0));
            }
        }
    }
    measured.ops = lat.len() as u64;
    measured.latencies = Latencies::from_nanos(lat);
    measured.interval = after.since(&before);
    Ok(measured)
}
