//! verrou-bench: runs every scenario of issues 7 and 16 against servers it starts
//! itself, for verrou's backends and their peers in the same run, and writes
//! `BENCHMARKS.md` and `BENCHMARKS.svg`.
//!
//! ```text
//! cargo run --release -p verrou-bench              # full run, writes BENCHMARKS.md/.svg at the repo root
//! cargo run --release -p verrou-bench -- --quick   # smoke test, writes under target/verrou-bench/
//! ```

mod budget;
mod chart;
mod contend;
mod drive;
mod env;
mod etcd;
mod holds;
mod lab;
mod locks;
mod measure;
mod nats;
mod ops;
mod pg;
mod report;
mod results;
mod rows;
mod scenarios;
mod sentinel;
mod settings;
mod targets;
mod timers;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::lab::Lab;
use crate::results::Results;
use crate::settings::Settings;

/// Errors of the benchmark program.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
/// Result alias.
pub type BoxResult<T> = Result<T, BoxError>;

const USAGE: &str = "\
usage: verrou-bench [--quick] [--out DIR] [--only 1,3,...] [--filter TEXT]

  --quick      smoke test (a few seconds), writes under target/verrou-bench/ by default
  --out DIR    where BENCHMARKS.md and BENCHMARKS.svg go (default: the repository root;
               target/verrou-bench/ with --quick)
  --only LIST  run only these scenarios (1 uncontended, 2 latency, 3 hot key,
               4 optimistic updates, 5 redlock, 6 memory, 7 many held locks,
               8 lock kinds)
  --filter TEXT  run only the rows whose label contains TEXT (for profiling one row)";

/// Parsed command line.
#[derive(Debug, Clone)]
struct Args {
    quick: bool,
    out: Option<PathBuf>,
    only: Option<Vec<u8>>,
    filter: Option<String>,
    raw: Vec<String>,
}

fn parse_args(args: Vec<String>) -> Result<Args, String> {
    let mut parsed = Args {
        quick: false,
        out: None,
        only: None,
        filter: None,
        raw: args.clone(),
    };
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => parsed.quick = true,
            "--out" => parsed.out = Some(it.next().ok_or("--out needs a directory")?.into()),
            "--only" => {
                let list = it.next().ok_or("--only needs a list like 1,3")?;
                let only = list
                    .split(',')
                    .map(|n| n.trim().parse::<u8>().ok().filter(|n| (1..=8).contains(n)))
                    .collect::<Option<Vec<u8>>>()
                    .ok_or_else(|| format!("--only: not a list of scenarios 1-8: {list}"))?;
                parsed.only = Some(only);
            }
            "--filter" => parsed.filter = Some(it.next().ok_or("--filter needs a text")?),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(parsed)
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1).collect()) {
        Ok(a) => a,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("verrou-bench: {msg}");
            }
            eprintln!("{USAGE}");
            return if msg.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
    };
    match run(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("verrou-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The two runtimes: a multi-threaded one (as many workers as CPUs) for the
/// concurrent scenarios, and a current-thread one for the single-task
/// scenarios, so one task's latency does not depend on which worker each
/// connection's driver task happened to land on.
struct Runtimes {
    multi: tokio::runtime::Runtime,
    single: tokio::runtime::Runtime,
}

/// Runs everything; `Ok(false)` when some row had a problem (the report is
/// written anyway).
fn run(args: Args) -> BoxResult<bool> {
    let mut settings = if args.quick {
        Settings::quick()
    } else {
        Settings::full()
    };
    settings.filter = args.filter.clone();
    let settings = settings.with_env_overrides();
    let out_dir = match &args.out {
        Some(d) => d.clone(),
        None if args.quick => repo_root().join("target").join("verrou-bench"),
        None => repo_root(),
    };
    let wants = |n: u8| args.only.as_ref().is_none_or(|o| o.contains(&n));
    let rt = Runtimes {
        multi: tokio::runtime::Builder::new_multi_thread().enable_all().build()?,
        single: tokio::runtime::Builder::new_current_thread().enable_all().build()?,
    };
    let mut environment = env::Environment::gather();
    if environment.profile == "debug" && !settings.quick {
        eprintln!("verrou-bench: warning: a debug build; use --release for real numbers");
    }
    let started = std::time::Instant::now();
    let mut lab = rt.multi.block_on(Lab::start())?;
    let mut results = Results::default();
    let s = &settings;
    let problems = &mut results.problems;
    if wants(1) {
        eprintln!("1. uncontended throughput ({} tasks)", s.throughput_tasks);
        results.uncontended = Some(rt.multi.block_on(scenarios::uncontended(&mut lab, s, problems))?);
    }
    if wants(2) {
        eprintln!("2. sequential latency (1 task, current-thread runtime)");
        let single = scenarios::latency(&mut lab, s, "current-thread", problems);
        results.latency = Some(rt.single.block_on(single)?);
        eprintln!("2. sequential latency (1 task, multi-thread runtime)");
        let multi = scenarios::latency(&mut lab, s, "multi-thread", problems);
        results.latency_multi = Some(rt.multi.block_on(multi)?);
    }
    if wants(3) {
        eprintln!("3. hot key ({} contenders)", s.contenders);
        results.hot_keys = Some(rt.multi.block_on(scenarios::hot_keys(&mut lab, s, problems))?);
    }
    if wants(4) {
        eprintln!(
            "4. optimistic updates ({} tasks × {})",
            s.update_tasks, s.updates_per_task
        );
        results.updates = Some(rt.multi.block_on(scenarios::updates(&mut lab, s, problems))?);
    }
    if wants(5) {
        eprintln!(
            "5. redlock over {} instances (1 task, current-thread runtime)",
            lab::REDLOCK_N
        );
        let single = scenarios::redlock(&mut lab, s, "current-thread", problems);
        results.redlock = Some(rt.single.block_on(single)?);
        eprintln!(
            "5. redlock over {} instances (1 task, multi-thread runtime)",
            lab::REDLOCK_N
        );
        let multi = scenarios::redlock(&mut lab, s, "multi-thread", problems);
        results.redlock_multi = Some(rt.multi.block_on(multi)?);
    }
    if wants(6) {
        eprintln!("6. memory backend (1 task, current-thread runtime)");
        results.memory = Some(rt.single.block_on(scenarios::memory(&mut lab, s, problems))?);
    }
    if wants(7) {
        eprintln!("7. {} held locks under auto-renewal", s.renew_locks);
        results.renewals = Some(rt.multi.block_on(scenarios::renewals(&mut lab, s, problems))?);
    }
    if wants(8) {
        eprintln!("8. lock kinds (semaphore, read-write, multi-key, election)");
        results.kinds = Some(rt.multi.block_on(scenarios::kinds(&mut lab, s, problems))?);
    }
    drop(lab);
    environment.load_after = env::load_average();
    let elapsed = started.elapsed();
    let command = command_line(&args, environment.profile);
    std::fs::create_dir_all(&out_dir)?;
    let md_path = out_dir.join("BENCHMARKS.md");
    let svg_path = out_dir.join("BENCHMARKS.svg");
    let chart = chart::render(&results);
    let markdown = report::render(&report::Context {
        results: &results,
        settings: &settings,
        environment: &environment,
        command: &command,
        elapsed,
        chart_file: "BENCHMARKS.svg",
    });
    std::fs::write(&svg_path, chart)?;
    std::fs::write(&md_path, markdown)?;
    eprintln!(
        "wrote {} and {} in {:.1} s",
        md_path.display(),
        svg_path.display(),
        elapsed.as_secs_f64()
    );
    for p in &results.problems {
        eprintln!("problem: {p}");
    }
    Ok(results.problems.is_empty())
}

fn command_line(args: &Args, profile: &str) -> String {
    let release = if profile == "release" { " --release" } else { "" };
    let extra = if args.raw.is_empty() {
        String::new()
    } else {
        let quoted: Vec<String> = args.raw.iter().map(|a| shell_quote(a)).collect();
        format!(" -- {}", quoted.join(" "))
    };
    format!("cargo run{release} -p verrou-bench{extra}")
}

/// `arg` as a POSIX shell word.
fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty() && arg.chars().all(|c| c.is_ascii_alphanumeric() || "_-./,=:".contains(c));
    if plain {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_command_line() {
        let a = parse_args(vec!["--quick".into(), "--only".into(), "1,7".into()]);
        assert!(a.as_ref().is_ok_and(|a| a.quick && a.only == Some(vec![1, 7])));
        assert!(parse_args(vec!["--only".into(), "8".into()]).is_ok_and(|a| a.only == Some(vec![8])));
        assert!(parse_args(vec!["--only".into(), "9".into()]).is_err());
        assert!(parse_args(vec!["--bogus".into()]).is_err());
        assert_eq!(
            command_line(
                &Args {
                    quick: true,
                    out: None,
                    only: None,
                    filter: None,
                    raw: vec!["--quick".into()]
                },
                "release"
            ),
            "cargo run --release -p verrou-bench -- --quick"
        );
        assert_eq!(shell_quote("verrou tair$"), "'verrou tair$'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
