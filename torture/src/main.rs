//! verrou-torture: independent clients contend on a few keys while faults
//! are injected (server pause, kill and restart with or without data,
//! network blackhole, a client's runtime stalled past its TTL, failover,
//! Redlock node loss; with clients as OS processes: the holder killed with
//! `kill -9` or stopped with SIGSTOP, see `process`); a checker records every critical section on one
//! monotonic clock and checks exclusion, fencing, loss signals, liveness and
//! the linearizability of concurrent versioned updates. Writes SAFETY.md and
//! one SVG timeline per fault kind.
//!
//! ```text
//! cargo run --release -p verrou-torture                 # full run: SAFETY.md + safety/*.svg at the repo root
//! cargo run -p verrou-torture -- --quick                # CI: a sample of the rows, about two minutes
//! cargo run --release -p verrou-torture -- --url redis://host:6379 [--backend lua|tair]
//! cargo run -p verrou-torture -- --soak 60s                # leaks: RSS, fds, connections, keys, scripts
//! cargo run --release -p verrou-torture -- --soak 30m --out .   # the long soak, into SAFETY.md's soak section
//! ```

mod backends;
mod chart;
mod check;
mod child;
mod client;
mod clock;
mod kinds;
mod linearize;
mod matrix;
mod netrows;
mod plan;
mod probe;
mod process;
mod record;
mod report;
mod run;
mod sentinel;
mod sentinel_split;
mod soak;
mod switch;

use std::path::PathBuf;
use std::process::ExitCode;

use crate::plan::{Backend, Scenario};
use crate::run::{External, Outcome, Params};

/// Errors of the program.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
/// Result alias.
pub type BoxResult<T> = Result<T, BoxError>;

const USAGE: &str = "\
usage: verrou-torture [--quick] [--seed N] [--out DIR] [--only TEXT] [--url URL [--backend lua|tair]]
       verrou-torture --soak DURATION [--out DIR]
       verrou-torture --matrix FILE

  --quick        CI mode: the claimed-safe rows that cover each mechanism once, short
                 rows (well under a minute); writes under target/verrou-torture/
  --seed N       replay the random choices of an earlier run (printed at the start)
  --out DIR      where SAFETY.md and the SVGs go (default: the repository root for the
                 full run, target/verrou-torture/ otherwise)
  --only TEXT    run only the rows whose backend or fault name, or '<backend> <fault>'
                 (e.g. --only 'nats leader-partitioned'), contains TEXT (with --quick,
                 also the rows kept out of CI, e.g. --quick --only etcd); the lock kinds' rows
                 match on 'kinds/<kind> <backend> <fault>' (e.g. --only kinds/,
                 --only kinds/read-write, --only 'kinds/election tair'); the client-process rows
                 match on process-holder (--only process-holder-killed, --only process-holder-stopped)
  --url URL      check your own deployment (client-side faults only: no fault, one
                 client's connections blackholed, one client's runtime stalled);
                 keys are prefixed verrou-torture:<seed>:
  --backend B    with --url: lua (default) or tair
  --matrix FILE  rebuild the backend × fault matrix that opens FILE (a SAFETY.md) from that
                 file's own Results table, in place; runs nothing (every run writes it too)
  --every-row    also draw one timeline per row, under safety/rows/ (for digging into a row)
  --soak D       steady contention and periodic faults on every backend for D in all (e.g. 60s,
                 30m); samples RSS, open fds, the servers' clients, keys and script cache, and
                 fails (exit 1) when one keeps growing; writes SOAK.md (default target/verrou-torture-soak/),
                 and with --out . the soak section of SAFETY.md (full runs keep it); with --only,
                 the backends whose name contains TEXT

Exit status: 0 when every claimed-safe row holds and the control row shows overlaps,
1 when a claim is broken (overlap, stale write accepted, late loss signal,
non-linearizable history, no recovery, hang), 2 on usage or setup errors.";

#[derive(Debug, Default)]
struct Args {
    quick: bool,
    seed: Option<u64>,
    out: Option<PathBuf>,
    only: Option<String>,
    url: Option<String>,
    backend: Option<String>,
    every_row: bool,
    soak: Option<std::time::Duration>,
    matrix: Option<PathBuf>,
}

fn parse_args(args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args::default();
    let mut it = args;
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => parsed.quick = true,
            "--every-row" => parsed.every_row = true,
            "--seed" => {
                let s = it.next().ok_or("--seed needs a number")?;
                parsed.seed = Some(s.parse().map_err(|_| format!("--seed: not a number: {s}"))?);
            }
            "--out" => parsed.out = Some(it.next().ok_or("--out needs a directory")?.into()),
            "--matrix" => parsed.matrix = Some(it.next().ok_or("--matrix needs a SAFETY.md")?.into()),
            "--only" => parsed.only = Some(it.next().ok_or("--only needs a text")?),
            "--url" => parsed.url = Some(it.next().ok_or("--url needs a redis:// URL")?),
            "--backend" => {
                let b = it.next().ok_or("--backend needs lua or tair")?;
                if b != "lua" && b != "tair" {
                    return Err(format!("--backend: lua or tair, not {b}"));
                }
                parsed.backend = Some(b);
            }
            "--soak" => {
                let d = it.next().ok_or("--soak needs a duration, e.g. 60s")?;
                parsed.soak = Some(humantime::parse_duration(&d).map_err(|e| format!("--soak {d}: {e}"))?);
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if parsed.backend.is_some() && parsed.url.is_none() {
        return Err("--backend goes with --url".into());
    }
    Ok(parsed)
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn main() -> ExitCode {
    // A client process of a process row (hidden: the run starts these).
    if std::env::args().nth(1).as_deref() == Some(child::FLAG) {
        return child::main();
    }
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("{e}\n");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tokio runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match rt.block_on(main_async(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("verrou-torture: {e}");
            ExitCode::from(2)
        }
    }
}

async fn external(url: &str) -> BoxResult<External> {
    let hp = run::host_port(url).ok_or_else(|| format!("--url: cannot read host:port from {url}"))?;
    let addr = tokio::net::lookup_host(hp.as_str())
        .await?
        .next()
        .ok_or_else(|| format!("--url: {hp} resolves to nothing"))?;
    Ok(External {
        url: url.to_owned(),
        addr,
    })
}

/// Runs the plan; true when every claim held.
async fn main_async(args: Args) -> BoxResult<bool> {
    if let Some(path) = &args.matrix {
        let text = std::fs::read_to_string(path).map_err(|e| format!("--matrix {}: {e}", path.display()))?;
        let rebuilt = matrix::with_matrix(&text).map_err(|e| format!("--matrix {}: {e}", path.display()))?;
        std::fs::write(path, rebuilt)?;
        println!("rebuilt the matrix of {}", path.display());
        return Ok(true);
    }
    clock::init();
    if let Some(total) = args.soak {
        let out = args
            .out
            .unwrap_or_else(|| repo_root().join("target/verrou-torture-soak"));
        return soak::soak(total, &out, args.only.as_deref()).await;
    }
    let seed = args.seed.unwrap_or_else(|| fastrand::u64(..));
    let ext = match &args.url {
        Some(url) => Some(external(url).await?),
        None => None,
    };
    let (mut plan, params, default_out, command): (Vec<Scenario>, Params, PathBuf, String) = if ext.is_some() {
        let backend = if args.backend.as_deref() == Some("tair") {
            Backend::Tair
        } else {
            Backend::Lua
        };
        let p = if args.quick { Params::quick() } else { Params::full() };
        let cmd = "cargo run --release -p verrou-torture -- --url URL".to_owned();
        (
            plan::external(backend),
            p,
            repo_root().join("target/verrou-torture-url"),
            cmd,
        )
    } else if args.quick {
        let cmd = "cargo run -p verrou-torture -- --quick".to_owned();
        (
            plan::quick(),
            Params::quick(),
            repo_root().join("target/verrou-torture"),
            cmd,
        )
    } else {
        let cmd = "cargo run --release -p verrou-torture".to_owned();
        (plan::full(), Params::full(), repo_root(), cmd)
    };
    // The lock kinds' rows (none against --url).
    let mut kind_plan = match (&ext, args.quick) {
        (Some(_), _) => Vec::new(),
        (None, true) => kinds::quick(),
        (None, false) => kinds::full(),
    };
    if let Some(only) = &args.only {
        if args.quick && ext.is_none() {
            plan.extend(plan::quick_on_request());
            // The kind rows kept out of CI too (each once).
            for row in kinds::full() {
                if !kind_plan.iter().any(|r| r.filter_text() == row.filter_text()) {
                    kind_plan.push(row);
                }
            }
        }
        plan.retain(|s| {
            let both = format!("{} {}", s.backend.label(), s.fault.slug());
            s.backend.label().contains(only.as_str()) || s.fault.slug().contains(only.as_str()) || both.contains(only)
        });
        kind_plan.retain(|r| r.filter_text().contains(only.as_str()));
        if plan.is_empty() && kind_plan.is_empty() {
            return Err(format!("--only {only}: no row matches").into());
        }
    }
    let needs_tair = plan.iter().any(|s| s.backend == Backend::Tair)
        || kind_plan.iter().any(|r| r.scenario.backend == Backend::Tair);
    if ext.is_none() && needs_tair {
        // From a clean clone the module is not built yet: build it.
        lock_testkit::server::build_tair_module_if_missing()?;
    }
    let out = args.out.clone().unwrap_or(default_out);
    println!(
        "verrou-torture: seed {seed} ({} rows, TTL {} ms, {:.1} s each); replay with --seed {seed}",
        plan.len() + kind_plan.len(),
        params.ttl.as_millis(),
        params.duration.as_secs_f64()
    );
    let mut seeds = fastrand::Rng::with_seed(seed);
    let mut outcomes: Vec<Outcome> = Vec::new();
    let mut all_ok = true;
    for (idx, sc) in plan.iter().enumerate() {
        let row_seed = seeds.u64(..);
        let label = format!("{} · {} · {}", sc.backend.label(), sc.topology.label(), sc.fault);
        match run::run(*sc, idx, row_seed, &params, ext.as_ref()).await {
            Ok(o) => {
                let c = report::cells(&o);
                println!(
                    "{label}: {} acq, overlaps {}, stale acc/rej {}, late {}, linearizable {}, recovery {} -> {}",
                    c.acquisitions, c.overlaps, c.stale, c.late, c.linear, c.recovery, c.result
                );
                all_ok &= o.violations.is_empty();
                outcomes.push(o);
            }
            Err(e) => {
                println!("{label}: SETUP FAILED: {e}");
                all_ok = false;
            }
        }
    }
    let mut kind_outcomes = Vec::new();
    for (idx, row) in kind_plan.iter().enumerate() {
        let row_seed = seeds.u64(..);
        match kinds::run_row(*row, idx, row_seed, &params).await {
            Ok(o) => {
                println!("{}", kinds::console_line(&o));
                all_ok &= o.violations.is_empty();
                kind_outcomes.push(o);
            }
            Err(e) => {
                println!("{}: SETUP FAILED: {e}", row.label());
                all_ok = false;
            }
        }
    }
    std::fs::create_dir_all(out.join("safety"))?;
    let mut svgs = Vec::new();
    let mut slugs: Vec<String> = Vec::new();
    for o in &outcomes {
        let slug = o.scenario.fault.slug();
        if !slugs.contains(&slug) {
            slugs.push(slug);
        }
    }
    for slug in slugs {
        // One picture per fault kind: the redis-lua row where there is one.
        let rows: Vec<&Outcome> = outcomes.iter().filter(|o| o.scenario.fault.slug() == slug).collect();
        let Some(pick) = rows
            .iter()
            .find(|o| o.scenario.backend == Backend::Lua)
            .or_else(|| rows.first())
        else {
            continue;
        };
        let file = format!("safety/{slug}.svg");
        std::fs::write(out.join(&file), chart::timeline(pick, params.lock_clients, params.keys))?;
        svgs.push((slug, file));
    }
    if args.every_row {
        std::fs::create_dir_all(out.join("safety/rows"))?;
        for (i, o) in outcomes.iter().enumerate() {
            let file = format!(
                "safety/rows/{i:02}-{}-{}.svg",
                o.scenario.backend.label().replace(' ', "-"),
                o.scenario.fault.slug()
            );
            std::fs::write(out.join(file), chart::timeline(o, params.lock_clients, params.keys))?;
        }
    }
    let mut md = report::markdown(&outcomes, &params, seed, &command, &svgs);
    md.push_str(&process::markdown());
    md.push_str(&sentinel::markdown());
    if !kind_outcomes.is_empty() {
        md.push_str(&kinds::markdown(&kind_outcomes, &params));
    }
    let path = out.join("SAFETY.md");
    // The last long soak's section stays (written by `--soak`, not by this run).
    if let Some(section) = std::fs::read_to_string(&path)
        .ok()
        .and_then(|old| soak::soak_section(&old).map(str::to_owned))
    {
        md = format!("{}\n\n{section}\n", md.trim_end());
    }
    // The first screen: the backend × fault matrix of the rows above (none
    // when no lock row ran, e.g. `--only kinds/`).
    if let Ok(with_matrix) = matrix::with_matrix(&md) {
        md = with_matrix;
    }
    std::fs::write(&path, md)?;
    println!("wrote {}", path.display());
    if !all_ok {
        eprintln!("verrou-torture: a claim was broken (see the rows marked VIOLATED); seed {seed}");
    }
    Ok(all_ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_credentials_and_db_when_pointed_at_a_proxy() {
        let addr: std::net::SocketAddr = "127.0.0.1:4000".parse().expect("addr");
        assert_eq!(
            run::with_addr("redis://u:p@db.example:6380/2", addr).as_deref(),
            Some("redis://u:p@127.0.0.1:4000/2")
        );
        assert_eq!(run::host_port("redis://db.example").as_deref(), Some("db.example:6379"));
        assert_eq!(run::host_port("rediss://u:p@h:1/0").as_deref(), Some("h:1"));
    }

    #[test]
    fn bad_arguments_are_refused() {
        let parse = |v: &[&str]| parse_args(v.iter().map(|s| (*s).to_owned()));
        assert!(parse(&["--seed", "x"]).is_err());
        assert!(parse(&["--backend", "tair"]).is_err());
        assert!(parse(&["--bogus"]).is_err());
        assert!(parse(&["--soak", "soon"]).is_err());
        assert!(parse(&["--soak", "60s"]).is_ok_and(|a| a.soak == Some(std::time::Duration::from_secs(60))));
        assert!(parse(&["--quick", "--seed", "7"]).is_ok_and(|a| a.quick && a.seed == Some(7)));
    }
}
