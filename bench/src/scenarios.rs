//! The seven scenarios of issue 7. Each row runs against freshly flushed
//! servers; a row that fails is recorded as a problem and the run goes on.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{LockGuard, LockManager, LockOptions, LockToken, Renewal, UpdateOptions};
use tokio::task::JoinSet;

use crate::BoxResult;
use crate::contend::run_hot_key;
use crate::drive::{Pairs, Repeat};
use crate::lab::{Backend, Lab};
use crate::locks::{RawFred, RawRedisRs, Rslock, TokioMutex, Verrou, fred_client};
use crate::measure::{Probe, process_cpu};
use crate::ops::{BareBackend, ExgetExset, Incrementer, PingFanout, PingFred, PingRedisRs, StoreUpdate, WatchMulti};
use crate::results::{
    CeilingRow, HotKeys, HotRow, Kind, Latency, Library, Memory, OpRow, RAW_FRED, RAW_REDIS_RS, RAW_REDIS_RS_SCRIPTED,
    RSLOCK, Redlock, RenewRow, Renewals, Shape, Uncontended, UpdateRow, Updates,
};
use crate::rows::{Subject, run_subjects};
use crate::settings::Settings;

/// TTL of every lock in scenarios 1–6 (verrou's default, also given to rslock
/// and the raw clients).
pub const TTL: Duration = Duration::from_secs(30);

/// Record a failed row and go on.
fn keep<T>(problems: &mut Vec<String>, what: &str, r: BoxResult<T>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            eprintln!("  ! {what}: {e}");
            problems.push(format!("{what}: {e}"));
            None
        }
    }
}

/// A row whose operations failed is a problem too.
fn check_row(problems: &mut Vec<String>, row: &OpRow) {
    if row.m.errors > 0 {
        problems.push(format!(
            "{}: {} failed operations (first: {})",
            row.label,
            row.m.errors,
            row.m.first_error.as_deref().unwrap_or("?")
        ));
    }
}

/// Turn finished rows into the scenario's list, recording failures.
fn collect(problems: &mut Vec<String>, rows: Vec<(String, BoxResult<OpRow>)>) -> Vec<OpRow> {
    let mut out = Vec::with_capacity(rows.len());
    for (label, row) in rows {
        if let Some(row) = keep(problems, &label, row) {
            check_row(problems, &row);
            out.push(row);
        }
    }
    out
}

async fn verrou_manager(lab: &mut Lab, backend: Backend, options: LockOptions) -> BoxResult<LockManager> {
    Ok(LockManager::from_arc(lab.lock_backend(backend).await?, options)?)
}

/// The non-verrou rows of scenarios 1 and 2.
#[derive(Debug, Clone, Copy)]
enum Peer {
    Rslock,
    RawRedisRs,
    RawRedisRsScripted,
    RawFred,
}

impl Peer {
    const ALL: [Peer; 4] = [Peer::Rslock, Peer::RawRedisRs, Peer::RawRedisRsScripted, Peer::RawFred];

    fn label(self) -> &'static str {
        match self {
            Peer::Rslock => RSLOCK,
            Peer::RawRedisRs => RAW_REDIS_RS,
            Peer::RawRedisRsScripted => RAW_REDIS_RS_SCRIPTED,
            Peer::RawFred => RAW_FRED,
        }
    }

    fn library(self) -> Library {
        match self {
            Peer::RawFred => Library::Fred,
            _ => Library::RedisRs,
        }
    }

    async fn subject(self, lab: &Lab) -> BoxResult<Subject> {
        let (label, url, probe) = (self.label(), lab.url(), lab.main_probe().await?);
        Ok(match self {
            Peer::Rslock => Subject::new(label, Kind::Peer, Pairs(Rslock::new(&[url], TTL)), probe),
            Peer::RawRedisRs => Subject::new(label, Kind::Raw, Pairs(RawRedisRs::connect(&url, TTL).await?), probe),
            Peer::RawRedisRsScripted => Subject::new(
                label,
                Kind::Raw,
                Pairs(RawRedisRs::connect_scripted(&url, TTL).await?),
                probe,
            ),
            Peer::RawFred => Subject::new(label, Kind::Raw, Pairs(RawFred::connect(&url, TTL).await?), probe),
        })
    }
}

/// A verrou row: the backend's default configuration through a manager with
/// `options`.
async fn verrou_subject(
    lab: &mut Lab,
    backend: Backend,
    label: &str,
    kind: Kind,
    options: LockOptions,
) -> BoxResult<Subject> {
    let manager = verrou_manager(lab, backend, options).await?;
    let probe = lab.probe(backend).await?;
    Ok(Subject::new(label, kind, Pairs(Verrou(manager)), probe))
}

/// Build a subject if the filter lets it through; a failure is a problem.
fn add(subjects: &mut Vec<Subject>, problems: &mut Vec<String>, label: &str, subject: BoxResult<Subject>) {
    if let Some(subject) = keep(problems, label, subject) {
        subjects.push(subject);
    }
}

/// Scenario 1: uncontended throughput, every implementation at the same concurrency.
pub async fn uncontended(lab: &mut Lab, s: &Settings, problems: &mut Vec<String>) -> BoxResult<Uncontended> {
    let tasks = s.throughput_tasks;
    let mut out = Uncontended {
        tasks,
        ..Uncontended::default()
    };
    lab.flush().await?;
    let mut subjects = Vec::new();
    for backend in Lab::available() {
        if s.runs(backend.label()) {
            let subject = verrou_subject(lab, backend, backend.label(), backend.kind(), LockOptions::default()).await;
            add(&mut subjects, problems, backend.label(), subject);
        }
    }
    // Where the Lua backend's time goes: without the renewer task, and
    // without the manager at all.
    let label = "… redis-lua with Renewal::Manual";
    if s.runs(label) {
        let options = LockOptions::default().renewal(Renewal::Manual);
        let subject = verrou_subject(lab, Backend::RedisLua, label, Kind::Reference, options).await;
        add(&mut subjects, problems, label, subject);
    }
    let label = "… redis-lua backend calls only (no manager)";
    if s.runs(label) {
        let subject = async {
            let op = BareBackend {
                backend: lab.lock_backend(Backend::RedisLua).await?,
                fresh_tokens: true,
                token: LockToken::generate()?,
                ttl: TTL,
            };
            Ok(Subject::new(label, Kind::Reference, op, lab.main_probe().await?))
        }
        .await;
        add(&mut subjects, problems, label, subject);
    }
    for peer in Peer::ALL {
        if s.runs(peer.label()) {
            add(&mut subjects, problems, peer.label(), peer.subject(lab).await);
        }
    }
    out.rows = collect(problems, run_subjects(subjects, tasks, s.throughput, s.rounds).await);
    if s.runs("redis-benchmark") {
        for pipeline in [1u32, 16] {
            lab.flush().await?;
            let requests = if pipeline == 1 {
                s.bench_requests
            } else {
                s.bench_requests_pipelined
            };
            let row = redis_benchmark(lab, tasks, requests, pipeline).await;
            out.ceilings.extend(keep(problems, "redis-benchmark", row));
        }
    }
    lab.flush().await?;
    Ok(out)
}

fn redis_benchmark_binary() -> BoxResult<PathBuf> {
    if let Ok(server) = lock_testkit::server::redis_server_binary()
        && let Some(dir) = server.parent()
    {
        let candidate = dir.join("redis-benchmark");
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("redis-benchmark"))
        .find(|p| p.is_file())
        .ok_or_else(|| "redis-benchmark not found; install it with `apt-get install -y redis-tools`".into())
}

fn children_cpu() -> BoxResult<Duration> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given; on failure we do not read it.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, usage.as_mut_ptr()) };
    if rc != 0 {
        return Err(format!("getrusage failed: {}", std::io::Error::last_os_error()).into());
    }
    // SAFETY: rc == 0, so the kernel wrote the whole struct.
    let usage = unsafe { usage.assume_init() };
    let tv = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    Ok(tv(usage.ru_utime) + tv(usage.ru_stime))
}

/// The server's own ceiling for `SET key NX PX` at `clients` connections.
async fn redis_benchmark(lab: &Lab, clients: usize, requests: u64, pipeline: u32) -> BoxResult<CeilingRow> {
    let binary = redis_benchmark_binary()?;
    let port = lab.main.port().to_string();
    let mut args: Vec<String> = [
        "-p",
        &port,
        "-r",
        "100000000",
        "-c",
        &clients.to_string(),
        "-n",
        &requests.to_string(),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    if pipeline > 1 {
        args.extend(["-P".to_owned(), pipeline.to_string()]);
    }
    args.push("--csv".to_owned());
    args.extend(
        ["SET", "key:__rand_int__", "v", "NX", "PX", "30000"]
            .iter()
            .map(|s| (*s).to_owned()),
    );
    let shown = format!(
        "redis-benchmark {}",
        args.iter()
            .filter(|a| *a != "--csv")
            .map(|a| if a == &port { "PORT" } else { a.as_str() })
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut probe = lab.main_probe().await?;
    let before = probe.read().await?;
    let cpu_before = children_cpu()?;
    let output = tokio::task::spawn_blocking(move || Command::new(binary).args(&args).output()).await??;
    let client_cpu = children_cpu()?.saturating_sub(cpu_before);
    let after = probe.read().await?;
    if !output.status.success() {
        return Err(format!(
            "{shown} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let fields: Vec<f64> = text
        .lines()
        .nth(1)
        .ok_or_else(|| format!("no result line in redis-benchmark output: {text}"))?
        .split(',')
        .skip(1)
        .map(|f| f.trim_matches('"').parse::<f64>().unwrap_or(0.0))
        .collect();
    let field = |i: usize| fields.get(i).copied().unwrap_or(0.0);
    let row = CeilingRow {
        label: if pipeline > 1 {
            format!("redis-benchmark -c {clients} -P {pipeline}")
        } else {
            format!("redis-benchmark -c {clients}")
        },
        command: shown,
        rps: field(0),
        p50_ms: field(3),
        p99_ms: field(5),
        requests,
        client_cpu,
        server: after.since(&before),
    };
    eprintln!("  {:<36} {:>10.0}/s  (commands, not pairs)", row.label, row.rps);
    Ok(row)
}

/// Scenario 2: one task, sequential pairs, against the PING round trip.
pub async fn latency(
    lab: &mut Lab,
    s: &Settings,
    runtime: &'static str,
    problems: &mut Vec<String>,
) -> BoxResult<Latency> {
    let mut out = Latency {
        runtime,
        ..Latency::default()
    };
    let url = lab.url();
    lab.flush().await?;
    let mut subjects = Vec::new();
    let mut libraries = Vec::new();
    let label = "PING (redis-rs)";
    if s.runs(label) {
        let subject = async {
            let raw = RawRedisRs::connect(&url, TTL).await?;
            Ok(Subject::new(
                label,
                Kind::Reference,
                PingRedisRs(raw.connection()),
                lab.main_probe().await?,
            ))
        }
        .await;
        add(&mut subjects, problems, label, subject);
        libraries.push((label, Library::RedisRs));
    }
    let label = "PING (fred)";
    if s.runs(label) {
        let subject = async {
            let raw = RawFred::connect(&url, TTL).await?;
            Ok(Subject::new(
                label,
                Kind::Reference,
                PingFred(raw.client().clone()),
                lab.main_probe().await?,
            ))
        }
        .await;
        add(&mut subjects, problems, label, subject);
        libraries.push((label, Library::Fred));
    }
    for (backend, lib) in [(Backend::RedisLua, Library::RedisRs), (Backend::Tair, Library::Fred)] {
        if s.runs(backend.label()) {
            let subject = verrou_subject(lab, backend, backend.label(), backend.kind(), LockOptions::default()).await;
            add(&mut subjects, problems, backend.label(), subject);
            libraries.push((backend.label(), lib));
        }
    }
    for peer in Peer::ALL {
        if s.runs(peer.label()) {
            add(&mut subjects, problems, peer.label(), peer.subject(lab).await);
            libraries.push((peer.label(), peer.library()));
        }
    }
    let rows = collect(problems, run_subjects(subjects, 1, s.sequential, s.rounds).await);
    for row in rows {
        let lib = libraries
            .iter()
            .find(|(l, _)| *l == row.label)
            .map_or(Library::RedisRs, |(_, lib)| *lib);
        if row.label.starts_with("PING") {
            out.pings.push((lib, row));
        } else {
            out.rows.push((lib, row));
        }
    }
    lab.flush().await?;
    Ok(out)
}

fn say_hot(row: &HotRow) {
    let r = &row.r;
    eprintln!(
        "  {:<30} {:<11} {:>8.0} acq/s  wait p50 {:>7.2} ms p99 {:>7.2} ms  hand-off p50 {:>6.3} ms  share {:.2}–{:.2}  {}",
        row.label,
        row.shape.name(),
        r.rate(),
        r.waits.p50().as_secs_f64() * 1e3,
        r.waits.p99().as_secs_f64() * 1e3,
        r.handoffs.p50().as_secs_f64() * 1e3,
        r.min_share(),
        r.max_share(),
        if r.exclusive() { "exclusive" } else { "OVERLAP" },
    );
}

fn check_hot(problems: &mut Vec<String>, row: &HotRow) {
    let r = &row.r;
    if !r.exclusive() {
        problems.push(format!(
            "{} ({}): counter {} ≠ acquisitions {} or {} overlapping holders — mutual exclusion broken",
            row.label,
            row.shape.name(),
            r.counter,
            r.total_acquisitions,
            r.overlaps
        ));
    }
    if r.errors > 0 {
        problems.push(format!(
            "{} ({}): {} failed calls (first: {})",
            row.label,
            row.shape.name(),
            r.errors,
            r.first_error.as_deref().unwrap_or("?")
        ));
    }
}

/// Scenario 3: contenders on one key, shared and independent instances.
pub async fn hot_keys(lab: &mut Lab, s: &Settings, problems: &mut Vec<String>) -> BoxResult<HotKeys> {
    let n = s.contenders;
    let mut out = HotKeys {
        contenders: n,
        ..HotKeys::default()
    };
    let url = lab.url();
    for backend in Lab::available() {
        for shape in [Shape::Shared, Shape::Independent] {
            if !s.runs(backend.label()) {
                continue;
            }
            lab.flush().await?;
            let row = async {
                let lockers: Vec<Arc<Verrou>> = match shape {
                    Shape::Shared => {
                        let one = Arc::new(Verrou(verrou_manager(lab, backend, LockOptions::default()).await?));
                        (0..n).map(|_| one.clone()).collect()
                    }
                    Shape::Independent => {
                        let mut v = Vec::with_capacity(n);
                        for _ in 0..n {
                            v.push(Arc::new(Verrou(
                                verrou_manager(lab, backend, LockOptions::default()).await?,
                            )));
                        }
                        v
                    }
                };
                let mut probe = lab.probe(backend).await?;
                let key = format!("hot:{}:{}", backend.slug(), shape.name());
                let r = run_hot_key(lockers, &key, s.hot, &mut probe).await?;
                let row = HotRow {
                    label: backend.label().to_owned(),
                    kind: backend.kind(),
                    shape,
                    r,
                };
                say_hot(&row);
                BoxResult::Ok(row)
            }
            .await;
            out.rows.extend(keep(problems, backend.label(), row));
        }
    }
    for shape in [Shape::Shared, Shape::Independent] {
        if !s.runs(RSLOCK) {
            continue;
        }
        lab.flush().await?;
        let row = async {
            let lockers: Vec<Arc<Rslock>> = match shape {
                Shape::Shared => {
                    let one = Arc::new(Rslock::new(std::slice::from_ref(&url), TTL));
                    (0..n).map(|_| one.clone()).collect()
                }
                Shape::Independent => (0..n)
                    .map(|_| Arc::new(Rslock::new(std::slice::from_ref(&url), TTL)))
                    .collect(),
            };
            let mut probe = lab.main_probe().await?;
            let r = run_hot_key(lockers, &format!("hot:rslock:{}", shape.name()), s.hot, &mut probe).await?;
            let row = HotRow {
                label: "rslock 0.10 (default retry)".to_owned(),
                kind: Kind::Peer,
                shape,
                r,
            };
            say_hot(&row);
            BoxResult::Ok(row)
        }
        .await;
        out.rows.extend(keep(problems, "rslock hot key", row));
    }
    for row in &out.rows {
        check_hot(problems, row);
    }
    lab.flush().await?;
    Ok(out)
}

/// Retry policy of every update row: verrou's defaults, with enough attempts
/// that heavy contention never gives up.
fn update_options() -> UpdateOptions {
    UpdateOptions::default().max_attempts(10_000)
}

async fn update_row<I: Incrementer>(
    label: &str,
    kind: Kind,
    inc: I,
    s: &Settings,
    probe: &mut Probe,
) -> BoxResult<UpdateRow> {
    let inc = Arc::new(inc);
    let key = format!("upd:{}", label.replace(' ', "_"));
    let before = probe.read().await?;
    let mut set = JoinSet::new();
    for task in 0..s.update_tasks {
        let inc = inc.clone();
        let key = key.clone();
        let n = s.updates_per_task;
        set.spawn(async move {
            let (mut ok, mut attempts, mut errors, mut first_error) = (0u64, 0u64, 0u64, None);
            for _ in 0..n {
                match inc.increment(task, &key).await {
                    Ok(a) => {
                        ok += 1;
                        attempts += a;
                    }
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert_with(|| e.to_string());
                    }
                }
            }
            (ok, attempts, errors, first_error)
        });
    }
    let mut row = UpdateRow {
        label: label.to_owned(),
        kind,
        increments: 0,
        attempts: 0,
        interval: Default::default(),
        final_value: 0,
        expected: 0,
        errors: 0,
        first_error: None,
    };
    while let Some(r) = set.join_next().await {
        let (ok, attempts, errors, first_error) = r?;
        row.increments += ok;
        row.attempts += attempts;
        row.errors += errors;
        if row.first_error.is_none() {
            row.first_error = first_error;
        }
    }
    let after = probe.read().await?;
    row.interval = after.since(&before);
    row.final_value = inc.read(&key).await?;
    row.expected = row.increments;
    eprintln!(
        "  {:<36} {:>8.0} incr/s  {:>5.2} attempts/incr  {:>5.2} cmds/incr  final {} (expected {})",
        row.label,
        row.rate(),
        row.attempts_per_increment(),
        row.commands_per_increment(),
        row.final_value,
        row.expected
    );
    Ok(row)
}

/// Scenario 4: optimistic increments of one value.
pub async fn updates(lab: &mut Lab, s: &Settings, problems: &mut Vec<String>) -> BoxResult<Updates> {
    let mut out = Updates {
        tasks: s.update_tasks,
        per_task: s.updates_per_task,
        ..Updates::default()
    };
    let url = lab.url();
    let backoff = update_options().backoff;
    for backend in [Backend::Memory, Backend::Tair] {
        if !s.runs(backend.label()) {
            continue;
        }
        lab.flush().await?;
        let row = async {
            let store = lab.store(backend).await?.ok_or("no versioned store")?;
            let mut probe = lab.probe(backend).await?;
            let label = format!("{} update", backend.label());
            let label = if backend == Backend::Tair {
                format!("{label} (EXCAS)")
            } else {
                label
            };
            let inc = StoreUpdate::new(store, update_options());
            update_row(&label, Kind::Verrou, inc, s, &mut probe).await
        }
        .await;
        out.rows.extend(keep(problems, backend.label(), row));
    }
    let label = "raw EXGET + EXSET VER loop (fred)";
    if s.runs(label) {
        lab.flush().await?;
        let row = async {
            let client = fred_client(&url).await?;
            let mut probe = lab.main_probe().await?;
            update_row(label, Kind::Raw, ExgetExset { client, backoff }, s, &mut probe).await
        }
        .await;
        out.rows.extend(keep(problems, label, row));
    }
    if s.runs(Backend::RedisLua.label()) {
        lab.flush().await?;
        let row = async {
            let store = lab.store(Backend::RedisLua).await?.ok_or("no versioned store")?;
            let mut probe = lab.main_probe().await?;
            let inc = StoreUpdate::new(store, update_options());
            update_row("verrou redis-lua update (Lua CAS)", Kind::Verrou, inc, s, &mut probe).await
        }
        .await;
        out.rows.extend(keep(problems, "redis-lua store", row));
    }
    let label = "raw WATCH/MULTI/EXEC (redis-rs)";
    if s.runs(label) {
        lab.flush().await?;
        let row = async {
            let client = deadpool_redis::redis::Client::open(url.as_str())?;
            let mut conns = Vec::with_capacity(s.update_tasks);
            for _ in 0..s.update_tasks {
                conns.push(client.get_multiplexed_async_connection().await?);
            }
            let mut probe = lab.main_probe().await?;
            update_row(label, Kind::Raw, WatchMulti { conns, backoff }, s, &mut probe).await
        }
        .await;
        out.rows.extend(keep(problems, label, row));
    }
    for row in &out.rows {
        if row.final_value != row.expected || row.errors > 0 {
            problems.push(format!(
                "{}: final value {} for {} increments, {} errors (first: {})",
                row.label,
                row.final_value,
                row.expected,
                row.errors,
                row.first_error.as_deref().unwrap_or("none")
            ));
        }
    }
    lab.flush().await?;
    Ok(out)
}

/// Scenario 5: Redlock over five instances against one instance, with the
/// network floor of a five-node round next to them.
pub async fn redlock(
    lab: &mut Lab,
    s: &Settings,
    runtime: &'static str,
    problems: &mut Vec<String>,
) -> BoxResult<Redlock> {
    let mut out = Redlock {
        runtime,
        ..Redlock::default()
    };
    let instances = lab.redlock_instances().await?;
    let urls = instances.urls();
    let addrs = instances.addrs();
    let single = urls.first().cloned().ok_or("no instance")?;
    let all = || Probe::connect_addrs(&addrs);
    let one = || Probe::connect_addrs(&addrs[..1]);
    lab.flush().await?;
    let mut subjects = Vec::new();
    if s.runs("PING") {
        let mut conns = Vec::with_capacity(urls.len());
        for url in &urls {
            conns.push(RawRedisRs::connect(url, TTL).await?.connection());
        }
        let quorum = urls.len() / 2 + 1;
        for (label, need, n) in [
            ("PING, 1 instance".to_owned(), 1, 1),
            (
                format!("PING ×{}, first {quorum} replies", urls.len()),
                quorum,
                urls.len(),
            ),
            (format!("PING ×{}, all replies", urls.len()), urls.len(), urls.len()),
        ] {
            let op = PingFanout {
                conns: conns[..n].to_vec(),
                need,
            };
            subjects.push(Subject::new(label, Kind::Reference, op, all().await?));
        }
    }
    let one_label = "verrou redis-lua, 1 instance";
    if s.runs("verrou") {
        let one = async {
            let manager = LockManager::from_arc(lab.redlock_single().await?, LockOptions::default())?;
            Ok(Subject::new(
                one_label,
                Kind::Verrou,
                Pairs(Verrou(manager)),
                one().await?,
            ))
        }
        .await;
        add(&mut subjects, problems, one_label, one);
        let five = async {
            let manager = verrou_manager(lab, Backend::Redlock, LockOptions::default()).await?;
            Ok(Subject::new(
                Backend::Redlock.label(),
                Kind::Verrou,
                Pairs(Verrou(manager)),
                all().await?,
            ))
        }
        .await;
        add(&mut subjects, problems, Backend::Redlock.label(), five);
    }
    let (rs_one, rs_five) = ("rslock 0.10, 1 instance", "rslock 0.10, 5 instances");
    if s.runs(RSLOCK) {
        let one_lock = Pairs(Rslock::new(&[single], TTL));
        subjects.push(Subject::new(rs_one, Kind::Peer, one_lock, one().await?));
        let five = Pairs(Rslock::new(&urls, TTL));
        subjects.push(Subject::new(rs_five, Kind::Peer, five, all().await?));
    }
    let mut rows = collect(problems, run_subjects(subjects, 1, s.sequential, s.rounds).await);
    let mut take = |label: &str| rows.iter().position(|r| r.label == label).map(|i| rows.remove(i));
    for (one, five) in [(one_label, Backend::Redlock.label()), (rs_one, rs_five)] {
        if let (Some(a), Some(b)) = (take(one), take(five)) {
            out.pairs.push((a, b));
        }
    }
    out.floors = rows;
    lab.flush().await?;
    Ok(out)
}

/// Pairs per timed call in scenario 6: one in-process pair is too short to
/// time alone (two clock reads would cost as much as the mutex).
pub const MEMORY_BATCH: u64 = 100;

/// Scenario 6: the memory backend against tokio's mutex, and where its time goes.
pub async fn memory(lab: &mut Lab, s: &Settings, problems: &mut Vec<String>) -> BoxResult<Memory> {
    let mut out = Memory::default();
    let batch = |op| Repeat {
        op,
        times: MEMORY_BATCH,
    };
    let mut subjects = Vec::new();
    let tokio_label = "tokio::sync::Mutex lock+unlock";
    if s.runs(tokio_label) {
        let mutex = Pairs(TokioMutex(Arc::new(tokio::sync::Mutex::new(()))));
        let op = Repeat {
            op: mutex,
            times: MEMORY_BATCH,
        };
        subjects.push(Subject::new(tokio_label, Kind::Reference, op, Probe::none()).batched(MEMORY_BATCH));
    }
    let verrou_label = "verrou memory (lock + release)";
    if s.runs(verrou_label) {
        let manager = verrou_manager(lab, Backend::Memory, LockOptions::default()).await?;
        let op = Repeat {
            op: Pairs(Verrou(manager)),
            times: MEMORY_BATCH,
        };
        subjects.push(Subject::new(verrou_label, Kind::Verrou, op, Probe::none()).batched(MEMORY_BATCH));
    }
    let label = "… with Renewal::Manual (no renewer task)";
    if s.runs(label) {
        let options = LockOptions::default().renewal(Renewal::Manual);
        let manager = verrou_manager(lab, Backend::Memory, options).await?;
        let op = Repeat {
            op: Pairs(Verrou(manager)),
            times: MEMORY_BATCH,
        };
        subjects.push(Subject::new(label, Kind::Reference, op, Probe::none()).batched(MEMORY_BATCH));
    }
    for fresh_tokens in [true, false] {
        let label = if fresh_tokens {
            "… backend calls only, fresh token (no manager)"
        } else {
            "… backend calls only, one token"
        };
        if s.runs(label) {
            let op = batch(BareBackend {
                backend: lab.lock_backend(Backend::Memory).await?,
                fresh_tokens,
                token: LockToken::generate()?,
                ttl: TTL,
            });
            subjects.push(Subject::new(label, Kind::Reference, op, Probe::none()).batched(MEMORY_BATCH));
        }
    }
    for row in collect(problems, run_subjects(subjects, 1, s.sequential, s.rounds).await) {
        if row.label == tokio_label {
            out.tokio = Some(row);
        } else if row.label == verrou_label {
            out.verrou = Some(row);
        } else {
            out.diagnostics.push(row);
        }
    }
    Ok(out)
}

/// Client CPU share of one core while the process does nothing.
async fn idle_cpu(window: Duration) -> BoxResult<f64> {
    let (t0, c0) = (Instant::now(), process_cpu()?);
    tokio::time::sleep(window).await;
    let (wall, cpu) = (t0.elapsed(), process_cpu()?.saturating_sub(c0));
    Ok(cpu.as_secs_f64() / wall.as_secs_f64().max(1e-9))
}

/// Scenario 7: many held locks under auto-renewal.
pub async fn renewals(lab: &mut Lab, s: &Settings, problems: &mut Vec<String>) -> BoxResult<Renewals> {
    let mut out = Renewals::default();
    let idle = idle_cpu(s.renew_window.min(Duration::from_secs(1))).await?;
    for backend in [Backend::Memory, Backend::RedisLua, Backend::Tair] {
        if !s.runs(backend.label()) {
            continue;
        }
        lab.flush().await?;
        let row = async {
            let options = LockOptions::with_ttl(s.renew_ttl);
            let renew_every = match options.renewal {
                Renewal::Auto { interval } => interval,
                _ => s.renew_ttl / 3,
            };
            let manager = verrou_manager(lab, backend, options).await?;
            let mut probe = lab.probe(backend).await?;
            let t0 = Instant::now();
            let guards = hold_many(&manager, backend.slug(), s.renew_locks).await?;
            let acquire_time = t0.elapsed();
            tokio::time::sleep(s.renew_settle).await;
            let before = probe.read().await?;
            tokio::time::sleep(s.renew_window).await;
            let after = probe.read().await?;
            let lost = guards.iter().flatten().filter(|g| g.is_lost()).count();
            release_many(guards).await?;
            let row = RenewRow {
                label: backend.label().to_owned(),
                locks: s.renew_locks,
                ttl: s.renew_ttl,
                renew_every,
                acquire_time,
                interval: after.since(&before),
                lost,
                idle_cpu: idle,
            };
            eprintln!(
                "  {:<36} {} locks: client {:>5.2}% of a core, server {:>6.0} cmds/s ({:>5.2}% core), {} lost",
                row.label,
                row.locks,
                row.client_core_share() * 100.0,
                row.commands_per_sec(),
                row.server_core_share() * 100.0,
                row.lost
            );
            BoxResult::Ok(row)
        }
        .await;
        if let Some(row) = keep(problems, backend.label(), row) {
            if row.lost > 0 {
                problems.push(format!(
                    "{}: {} of {} renewed leases were lost",
                    row.label, row.lost, row.locks
                ));
            }
            out.rows.push(row);
        }
    }
    lab.flush().await?;
    Ok(out)
}

/// Acquire `count` distinct keys with 64 tasks; one vector of guards per task.
async fn hold_many(manager: &LockManager, slug: &str, count: usize) -> BoxResult<Vec<Vec<LockGuard>>> {
    const TASKS: usize = 64;
    let mut set = JoinSet::new();
    for task in 0..TASKS {
        let manager = manager.clone();
        let slug = slug.to_owned();
        set.spawn(async move {
            let mut guards = Vec::with_capacity(count / TASKS + 1);
            for i in (task..count).step_by(TASKS) {
                guards.push(manager.lock(&format!("held:{slug}:{i}")).await?);
            }
            BoxResult::Ok(guards)
        });
    }
    let mut all = Vec::with_capacity(TASKS);
    while let Some(r) = set.join_next().await {
        all.push(r??);
    }
    Ok(all)
}

async fn release_many(guards: Vec<Vec<LockGuard>>) -> BoxResult<()> {
    let mut set = JoinSet::new();
    for chunk in guards {
        set.spawn(async move {
            for g in chunk {
                g.release().await?;
            }
            BoxResult::Ok(())
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    Ok(())
}
