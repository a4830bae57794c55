//! What every row measures: latency percentiles, the client's CPU time
//! (getrusage) and the server's command counters (`INFO` deltas).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lock_testkit::server::{RedisServer, RespClient};
use nix::sys::resource::{UsageWho, getrusage};
use nix::sys::time::TimeVal;

use crate::BoxResult;

/// CPU time (user + system) of this whole process, all threads included.
pub fn process_cpu() -> BoxResult<Duration> {
    cpu_of(UsageWho::RUSAGE_SELF)
}

/// CPU time (user + system) of the waited-for child processes.
pub fn children_cpu() -> BoxResult<Duration> {
    cpu_of(UsageWho::RUSAGE_CHILDREN)
}

fn cpu_of(who: UsageWho) -> BoxResult<Duration> {
    let usage = getrusage(who).map_err(|e| format!("getrusage failed: {e}"))?;
    Ok(timeval(usage.user_time()) + timeval(usage.system_time()))
}

fn timeval(tv: TimeVal) -> Duration {
    let secs = u64::try_from(tv.tv_sec()).unwrap_or(0);
    let micros = u64::try_from(tv.tv_usec()).unwrap_or(0);
    Duration::from_secs(secs) + Duration::from_micros(micros)
}

/// Sorted latency samples.
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    nanos: Vec<u64>,
}

impl Latencies {
    /// Sort the samples once.
    pub fn from_nanos(mut nanos: Vec<u64>) -> Self {
        nanos.sort_unstable();
        Latencies { nanos }
    }

    /// Add another set of samples.
    pub fn merge(&mut self, other: Latencies) {
        self.nanos.extend(other.nanos);
        self.nanos.sort_unstable();
    }

    /// How many samples.
    pub fn len(&self) -> usize {
        self.nanos.len()
    }

    /// The `p`-th percentile (nearest rank), zero without samples.
    pub fn percentile(&self, p: f64) -> Duration {
        if self.nanos.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * self.nanos.len() as f64).ceil() as usize;
        let idx = rank.clamp(1, self.nanos.len()) - 1;
        Duration::from_nanos(self.nanos[idx])
    }

    /// The median.
    pub fn p50(&self) -> Duration {
        self.percentile(50.0)
    }

    /// The 99th percentile.
    pub fn p99(&self) -> Duration {
        self.percentile(99.0)
    }

    /// The largest sample.
    pub fn max(&self) -> Duration {
        Duration::from_nanos(self.nanos.last().copied().unwrap_or(0))
    }
}

/// Nanoseconds of a duration, saturating.
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Counters of one server at one moment.
#[derive(Debug, Clone, Default)]
pub struct ServerCounters {
    /// `INFO commandstats` calls per command (commands run inside scripts
    /// and modules included, as in `total_commands_processed`).
    calls: BTreeMap<String, u64>,
    /// used_cpu_user + used_cpu_sys.
    cpu: Duration,
}

impl ServerCounters {
    /// Parse the text of `INFO commandstats cpu`.
    pub fn parse(text: &str) -> Self {
        let mut c = ServerCounters::default();
        let mut cpu_secs = 0.0;
        for line in text.lines().map(str::trim) {
            let Some((field, value)) = line.split_once(':') else {
                continue;
            };
            if let Some(command) = field.strip_prefix("cmdstat_") {
                let calls = value
                    .split(',')
                    .find_map(|kv| kv.strip_prefix("calls="))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                c.calls.insert(command.to_owned(), calls);
            } else if field == "used_cpu_user" || field == "used_cpu_sys" {
                cpu_secs += value.parse::<f64>().unwrap_or(0.0);
            }
        }
        c.cpu = Duration::from_secs_f64(cpu_secs.max(0.0));
        c
    }
}

/// What the servers did between two snapshots, probes excluded.
#[derive(Debug, Clone, Default)]
pub struct ServerWork {
    /// Calls per command, script-internal calls included.
    pub calls: BTreeMap<String, u64>,
    /// All commands the server ran (script- and module-internal calls
    /// included), the probes' own `INFO` excluded.
    pub commands: u64,
    /// Server CPU time.
    pub cpu: Duration,
}

impl ServerWork {
    fn between(before: &ServerCounters, after: &ServerCounters) -> Self {
        let mut calls = BTreeMap::new();
        for (cmd, &n) in &after.calls {
            let d = n.saturating_sub(before.calls.get(cmd).copied().unwrap_or(0));
            if d > 0 && cmd != "info" {
                calls.insert(cmd.clone(), d);
            }
        }
        ServerWork {
            commands: calls.values().sum(),
            calls,
            cpu: after.cpu.saturating_sub(before.cpu),
        }
    }

    fn add(&mut self, other: ServerWork) {
        for (cmd, n) in other.calls {
            *self.calls.entry(cmd).or_insert(0) += n;
        }
        self.commands += other.commands;
        self.cpu += other.cpu;
    }

    /// Per-command calls per operation, e.g. `set 1.00 · evalsha 1.00 (get 1.00, del 1.00)`
    /// — the calls from inside scripts are counted by the server too.
    pub fn breakdown(&self, ops: u64) -> String {
        if ops == 0 || self.calls.is_empty() {
            return "—".to_owned();
        }
        let mut parts: Vec<(String, u64)> = self.calls.iter().map(|(k, v)| (k.clone(), *v)).collect();
        parts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        parts
            .iter()
            .filter(|(_, n)| *n as f64 / ops as f64 >= 0.005)
            .map(|(k, n)| format!("{k} {:.2}", *n as f64 / ops as f64))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Persistent admin connections to the servers a row runs against.
pub struct Probe {
    clients: Vec<RespClient>,
}

/// One reading: wall clock, process CPU, server counters.
///
/// Only `INFO commandstats` separates commands; `total_commands_processed`
/// counts the calls scripts make too, so neither gives round trips.
pub struct Reading {
    /// When it was taken.
    pub at: Instant,
    cpu: Duration,
    allocations: crate::budget::Allocations,
    servers: Vec<ServerCounters>,
}

/// The difference between two readings.
#[derive(Debug, Clone, Default)]
pub struct Interval {
    /// Wall time.
    pub wall: Duration,
    /// This process's CPU time.
    pub client_cpu: Duration,
    /// What the servers did.
    pub server: ServerWork,
    /// Heap allocations in this process.
    pub allocations: crate::budget::Allocations,
}

impl Probe {
    /// A probe over no server (in-process rows).
    pub fn none() -> Self {
        Probe { clients: Vec::new() }
    }

    /// A probe over these servers.
    pub async fn connect(servers: &[&RedisServer]) -> BoxResult<Self> {
        let mut clients = Vec::with_capacity(servers.len());
        for s in servers {
            clients.push(s.client().await?);
        }
        Ok(Probe { clients })
    }

    /// A probe over the servers at these addresses.
    pub async fn connect_addrs(addrs: &[std::net::SocketAddr]) -> BoxResult<Self> {
        let mut clients = Vec::with_capacity(addrs.len());
        for a in addrs {
            clients.push(RespClient::connect(*a).await?);
        }
        Ok(Probe { clients })
    }

    /// Take a reading.
    pub async fn read(&mut self) -> BoxResult<Reading> {
        let mut servers = Vec::with_capacity(self.clients.len());
        for c in &mut self.clients {
            let reply = c.cmd(&["INFO", "commandstats", "cpu"]).await?;
            let text = reply
                .as_str()
                .ok_or_else(|| format!("unexpected INFO reply {reply:?}"))?
                .to_owned();
            servers.push(ServerCounters::parse(&text));
        }
        Ok(Reading {
            at: Instant::now(),
            cpu: process_cpu()?,
            allocations: crate::budget::Allocations::now(),
            servers,
        })
    }
}

impl Interval {
    /// Add another interval (of a row measured in several rounds).
    pub fn add(&mut self, other: Interval) {
        self.wall += other.wall;
        self.client_cpu += other.client_cpu;
        self.server.add(other.server);
        self.allocations.add(other.allocations);
    }
}

impl Reading {
    /// What happened since `before`.
    pub fn since(&self, before: &Reading) -> Interval {
        let mut server = ServerWork::default();
        for (b, a) in before.servers.iter().zip(&self.servers) {
            server.add(ServerWork::between(b, a));
        }
        Interval {
            wall: self.at.saturating_duration_since(before.at),
            client_cpu: self.cpu.saturating_sub(before.cpu),
            server,
            allocations: self.allocations.since(before.allocations),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_grows_with_work_and_children_are_counted_separately() {
        let before = process_cpu().expect("getrusage self");
        let mut x = 0u64;
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let after = process_cpu().expect("getrusage self");
        assert!(after > before, "{before:?} -> {after:?}");
        let child_before = children_cpu().expect("getrusage children");
        std::process::Command::new("true").status().expect("run true");
        assert!(children_cpu().expect("getrusage children") >= child_before);
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let l = Latencies::from_nanos((1..=100).rev().collect());
        assert_eq!(l.p50(), Duration::from_nanos(50));
        assert_eq!(l.p99(), Duration::from_nanos(99));
        assert_eq!(l.max(), Duration::from_nanos(100));
        assert_eq!(Latencies::default().p99(), Duration::ZERO);
    }

    #[test]
    fn info_deltas_exclude_the_probes() {
        let before = ServerCounters::parse(
            "# Commandstats\r\ncmdstat_set:calls=10,usec=5\r\ncmdstat_info:calls=1,usec=3\r\n\
             # CPU\r\nused_cpu_sys:1.5\r\nused_cpu_user:0.5\r\n",
        );
        let after = ServerCounters::parse(
            "cmdstat_set:calls=30,usec=5\r\ncmdstat_get:calls=20\r\ncmdstat_evalsha:calls=20\r\n\
             cmdstat_info:calls=2\r\nused_cpu_sys:2.0\r\nused_cpu_user:1.0\r\n",
        );
        let work = ServerWork::between(&before, &after);
        assert_eq!(work.commands, 60);
        assert_eq!(work.calls.get("set"), Some(&20));
        assert!(!work.calls.contains_key("info"));
        assert_eq!(work.cpu, Duration::from_secs(1));
        assert_eq!(work.breakdown(20), "evalsha 1.00, get 1.00, set 1.00");
    }
}
