//! Scenario 1: uncontended throughput, every implementation at the same
//! concurrency, next to redis-benchmark's ceiling for the same command.

#[allow(clippy::wildcard_imports)]
use super::*;

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
    // Not in `Lab::available`: scenario 1's row only (issue 44).
    let backend = Backend::PostgresAdvisory;
    if s.runs(backend.label()) {
        let subject = verrou_subject(lab, backend, backend.label(), backend.kind(), LockOptions::default()).await;
        add(&mut subjects, problems, backend.label(), subject);
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
    subjects.extend(postgres::uncontended_peers(lab, s, problems).await);
    subjects.extend(etcd::uncontended_peers(lab, s, problems).await);
    subjects.extend(nats::uncontended_peers(lab, s, problems).await);
    // Through Redis Sentinel and direct to its primary (issue 46).
    for (through, direct) in crate::sentinel::PAIRS {
        for label in [through, direct] {
            if s.runs(label) {
                let subject = lab.sentinel.subject(label).await;
                add(&mut subjects, problems, label, subject);
            }
        }
    }
    // Timers armed per pair: counted after the rounds, where the machine
    // allows a uprobe (see `crate::timers`).
    let timers = match crate::timers::TimerProbe::install() {
        Ok(probe) => Some(probe),
        Err(why) => {
            eprintln!("  timers per pair not counted: {why}");
            None
        }
    };
    out.rows = collect(
        problems,
        run_subjects(subjects, tasks, s.throughput, s.rounds, timers.as_ref()).await,
    );
    drop(timers);
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
