//! `--soak DURATION`: steady contention plus periodic faults on every
//! backend in turn, sampling what a leak would make grow — this process's
//! resident memory and open file descriptors, the servers' connections,
//! keys (and leases) and script cache — and failing when one keeps growing.
//!
//! Growth is judged on the samples after a warm-up (the first quarter):
//! the mean of the last third against the mean of the first third, beyond a
//! tolerance per resource (noise: an allocator's arenas, a connection in
//! the middle of a reconnect, lock keys that come and go). The slope (a
//! least-squares fit, per minute) is reported for each.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lock_core::LockOptions;
use tokio::time::Instant;

use crate::BoxResult;
use crate::backends::build;
use crate::plan::{Backend, Claim, Fault, Scenario, Topology};
use crate::record::Log;
use crate::run::{self, Env, Params};

/// Lock clients per backend.
const CLIENTS: usize = 4;
/// Contended keys.
const KEYS: usize = 2;
/// Between samples.
const SAMPLE_EVERY: Duration = Duration::from_millis(500);
/// TTLs of load before the first sample.
const WARM_UP_TTLS: u32 = 8;
/// The scripts a lock-redis-lua server (one Lua server, each Redlock node)
/// can cache for the soak's operations: the probe (connect), release with
/// wake-ups, mark-waiting (a waiter), renew (a hold past TTL / 3), renew
/// many (the manager's batched renewal) and the acquire script (only when
/// `SET NX GET` finds our own token: an acquire re-sent after a timeout,
/// so after a fault). The library has no script built at run time, so its
/// script cache cannot grow past this; a count within it is flat, however
/// late a rare path loads its script.
const LUA_SCRIPTS_PER_SERVER: usize = 6;

/// A lock key and its helper keys on one Redis-family server, at most.
const KEY_FAMILY: usize = 8;

/// One resource's samples.
struct Series {
    name: &'static str,
    unit: &'static str,
    /// Growth from the first to the last third beyond this is a leak.
    tolerance: f64,
    /// A value the resource cannot exceed (a cache of a fixed set): growth
    /// that stays within it is flat.
    bound: Option<f64>,
    points: Vec<(f64, f64)>,
}

impl Series {
    fn new(name: &'static str, unit: &'static str, tolerance: f64) -> Self {
        Series {
            name,
            unit,
            tolerance,
            bound: None,
            points: Vec::new(),
        }
    }

    /// The same, with a bound the resource cannot exceed.
    fn bounded(mut self, bound: Option<f64>) -> Self {
        self.bound = bound;
        self
    }

    /// Every sample within the bound (false without one).
    fn within_bound(&self) -> bool {
        self.bound.is_some_and(|b| self.points.iter().all(|p| p.1 <= b))
    }

    /// The samples after the warm-up.
    fn settled(&self) -> &[(f64, f64)] {
        &self.points[self.points.len() / 4..]
    }

    /// Least-squares slope per minute.
    fn slope_per_minute(&self) -> f64 {
        let pts = self.settled();
        let n = pts.len() as f64;
        if pts.len() < 2 {
            return 0.0;
        }
        let (mx, my) = pts.iter().fold((0.0, 0.0), |(x, y), (px, py)| (x + px / n, y + py / n));
        let (num, den) = pts.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
            (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
        });
        if den == 0.0 { 0.0 } else { num / den * 60.0 }
    }

    /// Mean of the last third minus mean of the first third (after warm-up).
    fn growth(&self) -> f64 {
        let pts = self.settled();
        let third = pts.len() / 3;
        if third == 0 {
            return 0.0;
        }
        let mean = |s: &[(f64, f64)]| s.iter().map(|p| p.1).sum::<f64>() / s.len() as f64;
        mean(&pts[pts.len() - third..]) - mean(&pts[..third])
    }

    fn grows(&self) -> bool {
        self.growth() > self.tolerance && !self.within_bound()
    }
}

/// This process's resident set, MiB.
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// This process's open file descriptors.
fn open_fds() -> f64 {
    std::fs::read_dir("/proc/self/fd").map_or(0.0, |d| d.count() as f64)
}

/// What the servers hold, summed over them: connections, keys, and cached
/// scripts where the server has a script cache.
struct ServerCounts {
    connections: f64,
    keys: f64,
    /// Keys without a TTL (Redis family: `INFO keyspace`'s keys minus
    /// expires): the only keys that can leak, since the rest expire.
    persistent: Option<f64>,
    scripts: Option<f64>,
}

/// The servers' counts: Redis-family servers from INFO and DBSIZE;
/// PostgreSQL's client backends (`pg_stat_activity`, the sampling psql
/// among them) and the rows of every table of its schema (locks, queue,
/// values, names, holders, gone records, leaders); etcd's
/// open file descriptors per member (its client connections among them)
/// and its keys plus leases. None when a server does not answer (paused).
async fn server_counts(env: &Env) -> Option<ServerCounts> {
    match env {
        Env::Pg { server, .. } => {
            let out = server
                .psql(
                    "SELECT (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend') \
                     || ' ' || (SELECT count(*) FROM verrou.locks) + (SELECT count(*) FROM verrou.queue) \
                     + (SELECT count(*) FROM verrou.kv) + (SELECT count(*) FROM verrou.names) \
                     + (SELECT count(*) FROM verrou.holders) + (SELECT count(*) FROM verrou.gone) \
                     + (SELECT count(*) FROM verrou.leaders)",
                )
                .await
                .ok()?;
            let mut figures = out.split_whitespace().map(|f| f.parse::<f64>().ok());
            Some(ServerCounts {
                connections: figures.next()??,
                keys: figures.next()??,
                persistent: None,
                scripts: None,
            })
        }
        Env::Etcd(cluster) => {
            let (mut fds, mut keys) = (0.0, 0.0);
            for i in 0..cluster.len() {
                let c = cluster.member_counts(i).await.ok()?;
                fds += c.open_fds;
                // Every member holds the same keyspace: one member's count.
                if i == 0 {
                    keys = (c.keys + c.leases) as f64;
                }
            }
            Some(ServerCounts {
                connections: fds,
                keys,
                persistent: None,
                scripts: None,
            })
        }
        _ => {
            let servers = env.servers();
            if servers.is_empty() {
                return None;
            }
            let (mut connections, mut keys, mut persistent, mut scripts) = (0.0, 0.0, 0.0, 0.0);
            for s in servers {
                let info = s.info("clients").await.ok()?;
                connections += info.get("connected_clients")?.parse::<f64>().ok()?;
                let memory = s.info("memory").await.ok()?;
                scripts += memory.get("number_of_cached_scripts")?.parse::<f64>().ok()?;
                let space = s.info("keyspace").await.ok()?;
                let (n, expiring) = space.get("db0").map_or(Some((0.0, 0.0)), |db| db_keys(db))?;
                keys += n;
                persistent += n - expiring;
            }
            Some(ServerCounts {
                connections,
                keys,
                persistent: Some(persistent),
                scripts: Some(scripts),
            })
        }
    }
}

/// `INFO keyspace`'s line for a database (`keys=5,expires=3,avg_ttl=0`):
/// its keys and those with a TTL.
fn db_keys(line: &str) -> Option<(f64, f64)> {
    let field = |name: &str| {
        line.split(',')
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse::<f64>().ok())
    };
    Some((field("keys")?, field("expires")?))
}

/// One backend's scenario: the topology and the periodic fault.
fn scenario(backend: Backend) -> Scenario {
    let (topology, fault) = match backend {
        Backend::Memory | Backend::Control => (Topology::InProcess, Fault::None),
        Backend::Lua | Backend::Tair | Backend::Postgres | Backend::PostgresAdvisory => {
            (Topology::Single, Fault::Pause)
        }
        Backend::Redlock => (Topology::Five, Fault::NodesPaused(1)),
        Backend::Etcd => (Topology::Three, Fault::LeaderPause),
        // Not soaked yet (not in the soak's list below).
        Backend::Nats => (Topology::NatsR3, Fault::LeaderPause),
    };
    Scenario {
        backend,
        topology,
        fault,
        claim: Claim::Safe,
        why: "",
    }
}

/// Soak one backend for `length`; its series.
async fn soak_backend(backend: Backend, length: Duration, p: &Params) -> BoxResult<Vec<Series>> {
    let p = &p.for_backend(backend);
    let sc = scenario(backend);
    let mut env = run::setup(&sc, CLIENTS, None).await?;
    // Before any client connects: a PostgreSQL client's descriptors and
    // the server's backends grow with its pool up to the pool's size.
    let fds_before = open_fds();
    let stop = Arc::new(AtomicBool::new(false));
    let keys: Arc<Vec<String>> = Arc::new((0..KEYS).map(|k| format!("verrou-soak:lock{k}")).collect());
    let options = LockOptions::with_ttl(p.ttl).acquire_timeout(p.ttl * 6);
    let mut clients = Vec::with_capacity(CLIENTS);
    for i in 0..CLIENTS {
        let spec = env.spec(backend, env.url(i), None);
        let (stop, keys, options, ttl) = (stop.clone(), keys.clone(), options.clone(), p.ttl);
        clients.push(tokio::spawn(async move {
            let Ok(built) = build(&spec, ttl).await else { return };
            let Ok(locks) = lock_core::LockManager::from_arc(built.lock, options) else {
                return;
            };
            let mut rng = fastrand::Rng::with_seed(i as u64);
            let mut first = true;
            while !stop.load(Ordering::Relaxed) {
                let key = &keys[rng.usize(..keys.len())];
                match locks.lock(key).await {
                    Ok(guard) => {
                        // The first hold outlasts the renew interval (TTL / 3),
                        // so that the renewal's script is cached during the
                        // unsampled warm-up rather than at the first slow hold.
                        let hold = if std::mem::take(&mut first) {
                            ttl / 2
                        } else {
                            Duration::from_millis(rng.u64(1..5))
                        };
                        tokio::time::sleep(hold).await;
                        let _ = guard.release().await;
                    }
                    Err(_) => tokio::time::sleep(ttl / 4).await,
                }
                if let Some(store) = &built.store {
                    let _ = store.get("verrou-soak:value").await;
                }
            }
        }));
    }
    // Unsampled warm-up: the clients open their connections as they first
    // contend (etcd's clients reach all three members lazily: about 6 s at
    // its 1 s TTL, measured, which a short share's first quarter does not
    // cover).
    tokio::time::sleep(p.ttl * WARM_UP_TTLS).await;
    let mut rss = Series::new("client RSS", "MiB", 16.0);
    // An etcd client keeps a connection per member and reopens them after a
    // leader change, so its count moves by up to one per member per client
    // (measured: 67–79 over a minute of leader pauses, no trend).
    let fd_tolerance = match backend {
        Backend::Etcd => (CLIENTS * 3) as f64,
        _ => 4.0,
    };
    // A PostgreSQL client's pool opens connections as a pause times its
    // statements out, up to its size (measured: 34 -> 40 descriptors over
    // 30 minutes of pauses, no trend after): growth within every client's
    // full pool is flat, past it a leak.
    let pools = (CLIENTS * lock_postgres::DEFAULT_POOL_SIZE) as f64;
    let pg_bound = |base: f64| matches!(backend, Backend::Postgres).then_some(base + pools);
    let mut fds = Series::new("client open fds", "", fd_tolerance).bounded(pg_bound(fds_before));
    let mut conns = match backend {
        // Each member's descriptors move with its clients' reconnections
        // after a leader change, as the client's do.
        Backend::Etcd => Series::new("server open fds (3 members)", "", (CLIENTS * 3) as f64),
        // The sampling psql among them.
        Backend::Postgres => Series::new("server client backends", "", 2.0).bounded(pg_bound(1.0)),
        _ => Series::new("server connected_clients", "", 2.0),
    };
    // Keys that expire come and go with the waiters; their count is summed
    // over the servers (each Redlock node holds its own copy), and so is
    // its noise.
    let keys_tolerance = (KEYS * 2 * env.servers().len().max(1)) as f64;
    // A Redis-family server holds at most each lock key and its helper keys
    // (fence, waiter marker, wake set and its registration times, the fair
    // queue and its deadlines, the last release's id): growth within that
    // is flat, and a helper key that outlives its waiters shows in the
    // keys-without-a-TTL row.
    let key_bound = backend
        .is_redis_family()
        .then(|| (KEYS * KEY_FAMILY * env.servers().len()) as f64);
    let mut keys_n = Series::new("server keys", "", keys_tolerance).bounded(key_bound);
    // Keys without a TTL never go away by themselves: the fence counters,
    // one per lock key, made during the warm-up; one more later is a leak.
    let mut persistent = Series::new("server keys without a TTL", "", 0.5);
    let script_bound = matches!(backend, Backend::Lua | Backend::Redlock)
        .then(|| (LUA_SCRIPTS_PER_SERVER * env.servers().len()) as f64);
    let mut scripts = Series::new("server cached scripts", "", 2.0).bounded(script_bound);
    let log = Log::default();
    let begin = Instant::now();
    let fault_every = (length / 5).max(p.ttl * 10);
    let mut next_fault = begin + fault_every;
    while begin.elapsed() < length {
        let t = begin.elapsed().as_secs_f64();
        rss.points.push((t, rss_mib()));
        fds.points.push((t, open_fds()));
        if let Some(c) = server_counts(&env).await {
            conns.points.push((t, c.connections));
            keys_n.points.push((t, c.keys));
            if let Some(n) = c.persistent {
                persistent.points.push((t, n));
            }
            if let Some(n) = c.scripts {
                scripts.points.push((t, n));
            }
        }
        if sc.fault.injects() && Instant::now() >= next_fault {
            run::inject(&mut env, &sc, p, &log, None, 0).await?;
            next_fault = Instant::now() + fault_every;
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        let _ = tokio::time::timeout(p.hang_bound, c).await;
    }
    Ok([rss, fds, conns, keys_n, persistent, scripts]
        .into_iter()
        .filter(|s| !s.points.is_empty())
        .collect())
}

/// Opens the soak section a SAFETY.md carries (see [`with_soak_section`]).
pub const SECTION_BEGIN: &str = "<!-- soak: written by `verrou-torture --soak`, kept by full runs -->";
/// Closes it.
pub const SECTION_END: &str = "<!-- soak: end -->";

/// `safety` (a SAFETY.md) with its soak section replaced by `section`, or
/// appended when it has none.
pub fn with_soak_section(safety: &str, section: &str) -> String {
    let block = format!("{SECTION_BEGIN}\n{}\n{SECTION_END}", section.trim_end());
    match soak_section(safety) {
        Some(old) => safety.replacen(old, &block, 1),
        None => format!("{}\n\n{block}\n", safety.trim_end()),
    }
}

/// The soak section of `safety`, markers included, if it has one (a full
/// run that rewrites SAFETY.md keeps it).
pub fn soak_section(safety: &str) -> Option<&str> {
    let a = safety.find(SECTION_BEGIN)?;
    let b = safety[a..].find(SECTION_END)? + a;
    Some(&safety[a..b + SECTION_END.len()])
}

/// Soak every backend (or those whose name contains `only`) for a share of
/// `total`; writes `SOAK.md` in `out`
/// (and, when `out` holds a SAFETY.md, replaces that file's soak section)
/// and returns true when nothing grew.
pub async fn soak(total: Duration, out: &Path, only: Option<&str>) -> BoxResult<bool> {
    let backends: Vec<Backend> = [
        Backend::Memory,
        Backend::Lua,
        Backend::Tair,
        Backend::Redlock,
        Backend::Postgres,
        Backend::Etcd,
    ]
    .into_iter()
    .filter(|b| only.is_none_or(|o| b.label().contains(o)))
    .collect();
    if backends.is_empty() {
        return Err(format!("--only {}: no backend matches", only.unwrap_or_default()).into());
    }
    let share = total / backends.len() as u32;
    let p = Params::quick();
    lock_testkit::server::build_tair_module_if_missing()?;
    let mut md = format!(
        "# Soak\n\n`verrou-torture --soak {}`: {CLIENTS} clients on {KEYS} keys per backend for {:.0} s each, \
         a fault every fifth of that, at least 10 TTLs apart (server paused 3×TTL; one Redlock node paused; \
         etcd's leader paused, with etcd's 1 s TTL floor), sampled every {} ms after {WARM_UP_TTLS} TTLs of unsampled load. \
         A resource grows when the mean of the last third of the samples (after a quarter of warm-up) exceeds \
         the first third's by more than its tolerance. The server rows: Redis-family servers' INFO \
         (connected clients, cached scripts, keys and keys without a TTL, summed over the servers; \
         the keys' tolerance is {} per server and their bound {} per server, each lock key and its helper keys: \
         waiter markers come and go, and only keys without a TTL can pile up); PostgreSQL's client backends (`pg_stat_activity`, the \
         sampling psql among them) and rows of its lock, queue and value tables; etcd's open file descriptors \
         summed over the members (client connections among them) and its keys plus leases. Each client's first hold \
         outlasts the renew interval (so the renew script is cached during the warm-up); a script cache cannot \
         grow past the library's scripts for these operations ({LUA_SCRIPTS_PER_SERVER} per Lua server or \
         Redlock node: probe, release with wake-ups, mark-waiting, renew, renew many, and the acquire script \
         that only a re-sent acquire runs), so growth within that bound is flat; likewise a PostgreSQL client's \
         descriptors and the server's client backends within every client's full pool ({} connections each).\n\n\
         | backend | resource | after warm-up → last | growth | tolerance | slope / min | result |\n|---|---|---|---|---|---|---|\n",
        humantime::format_duration(total),
        share.as_secs_f64(),
        SAMPLE_EVERY.as_millis(),
        KEYS * 2,
        KEYS * KEY_FAMILY,
        lock_postgres::DEFAULT_POOL_SIZE
    );
    let mut ok = true;
    for backend in backends {
        let series = soak_backend(backend, share, &p).await?;
        for s in &series {
            let first = s.settled().first().map_or(0.0, |p| p.1);
            let last = s.points.last().map_or(0.0, |p| p.1);
            let verdict = if s.grows() {
                "**GROWS**"
            } else if s.growth() > s.tolerance {
                "flat (within its bound)"
            } else {
                "flat"
            };
            let tolerance = match s.bound {
                Some(b) => format!("{} (bound {b:.0})", s.tolerance),
                None => s.tolerance.to_string(),
            };
            ok &= !s.grows();
            let line = format!(
                "| {} | {} | {first:.1} → {last:.1} {} | {:+.1} | {tolerance} | {:+.2} | {verdict} |",
                backend.label(),
                s.name,
                s.unit,
                s.growth(),
                s.slope_per_minute()
            );
            println!("{line}");
            let _ = writeln!(md, "{line}");
        }
    }
    std::fs::create_dir_all(out)?;
    let path = out.join("SOAK.md");
    std::fs::write(&path, &md)?;
    println!("wrote {}", path.display());
    let safety = out.join("SAFETY.md");
    if let Ok(old) = std::fs::read_to_string(&safety) {
        let section = md.replacen("# Soak", "## Soak", 1);
        std::fs::write(&safety, with_soak_section(&old, &section))?;
        println!("wrote the soak section of {}", safety.display());
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(values: &[f64]) -> Series {
        let mut s = Series::new("x", "", 2.0);
        s.points = values.iter().enumerate().map(|(i, v)| (i as f64, *v)).collect();
        s
    }

    #[test]
    fn the_soak_section_is_replaced_appended_and_found() {
        let safety = "# Safety\n\nrows\n";
        let once = with_soak_section(safety, "## Soak\n\nfirst\n");
        assert!(once.starts_with("# Safety\n\nrows\n\n"), "{once}");
        assert_eq!(
            soak_section(&once),
            Some(format!("{SECTION_BEGIN}\n## Soak\n\nfirst\n{SECTION_END}").as_str())
        );
        let twice = with_soak_section(&once, "## Soak\n\nsecond");
        assert!(twice.contains("second") && !twice.contains("first"), "{twice}");
        assert_eq!(twice.matches(SECTION_BEGIN).count(), 1);
        assert_eq!(soak_section(safety), None);
    }

    #[test]
    fn a_steady_climb_grows_and_noise_does_not() {
        let leak: Vec<f64> = (0..40).map(|i| 10.0 + f64::from(i) * 0.5).collect();
        assert!(series(&leak).grows());
        assert!(series(&leak).slope_per_minute() > 0.0);
        let noise: Vec<f64> = (0..40).map(|i| 10.0 + f64::from(i % 3)).collect();
        assert!(!series(&noise).grows());
        // A warm-up rise (the first quarter) is not a leak.
        let warm: Vec<f64> = (0..40).map(|i| if i < 8 { f64::from(i) } else { 8.0 }).collect();
        assert!(!series(&warm).grows());
    }

    #[test]
    fn a_late_step_within_the_bound_is_flat_and_past_it_grows() {
        // Redlock's five nodes: 3 scripts each, then one more each after a
        // fault (the 30-minute soak's 15 → 20).
        let step: Vec<f64> = (0..40).map(|i| if i < 25 { 15.0 } else { 20.0 }).collect();
        assert!(series(&step).grows(), "beyond the tolerance");
        assert!(!series(&step).bounded(Some(30.0)).grows());
        assert!(!series(&step).bounded(None).within_bound());
        let past: Vec<f64> = (0..40).map(|i| if i < 25 { 15.0 } else { 31.0 }).collect();
        assert!(series(&past).bounded(Some(30.0)).grows());
    }

    #[test]
    fn a_keyspace_line_gives_keys_and_expiring_keys() {
        assert_eq!(db_keys("keys=5,expires=3,avg_ttl=120,subexpiry=0"), Some((5.0, 3.0)));
        assert_eq!(db_keys("keys=5"), None);
    }
}
