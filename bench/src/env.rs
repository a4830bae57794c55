//! The machine and the versions a run used, for the report's header.

use std::path::Path;
use std::process::Command;

/// Where and with what the numbers were taken.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// `nproc`.
    pub cpus: usize,
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
    /// Kernel release.
    pub kernel: String,
    /// Total memory.
    pub memory: String,
    /// `redis-server --version`.
    pub redis: String,
    /// `rustc --version`.
    pub rustc: String,
    /// (crate, version) from Cargo.lock.
    pub crates: Vec<(String, String)>,
    /// Load average before the run.
    pub load_before: String,
    /// Load average after the run.
    pub load_after: String,
    /// Debug or release.
    pub profile: &'static str,
}

fn first_line(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_owned()
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// `/proc/loadavg`'s three averages.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Versions of `names` in the workspace's Cargo.lock.
fn locked_versions(lock: &str, names: &[&str]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in lock.lines() {
        if let Some(name) = line.strip_prefix("name = ") {
            current = Some(name.trim_matches('"').to_owned());
        } else if let Some(version) = line.strip_prefix("version = ")
            && let Some(name) = current.take()
            && names.contains(&name.as_str())
        {
            out.push((name, version.trim_matches('"').to_owned()));
        }
    }
    out.sort_by_key(|(name, _)| names.iter().position(|n| n == name));
    out
}

impl Environment {
    /// Gather everything (best effort: unknown fields say so).
    pub fn gather() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .and_then(|r| r.split_once(':'))
                    .map(|(_, v)| v.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        let memory = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines().find_map(|l| {
                    let kb: u64 = l
                        .strip_prefix("MemTotal:")?
                        .trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse()
                        .ok()?;
                    Some(format!("{:.1} GiB", kb as f64 / 1024.0 / 1024.0))
                })
            })
            .unwrap_or_else(|| "unknown".to_owned());
        let server = lock_testkit::server::redis_server_binary()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "redis-server".to_owned());
        let lock_file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock");
        let lock = std::fs::read_to_string(lock_file).unwrap_or_default();
        Environment {
            cpus: std::thread::available_parallelism().map(usize::from).unwrap_or(0),
            cpu_model,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|_| "unknown".to_owned()),
            memory,
            redis: first_line(&server, &["--version"]),
            rustc: first_line("rustc", &["--version"]),
            crates: locked_versions(
                &lock,
                &[
                    "tokio",
                    "fred",
                    "deadpool-redis",
                    "redis",
                    "rslock",
                    "redis-module",
                    "tokio-postgres",
                    "deadpool-postgres",
                    "sqlx",
                    "distributed-lock-postgres",
                    "etcd-client",
                    "async-nats",
                ],
            ),
            load_before: load_average(),
            load_after: String::new(),
            profile: if cfg!(debug_assertions) { "debug" } else { "release" },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_versions_from_a_lock_file() {
        let lock = "[[package]]\nname = \"fred\"\nversion = \"10.1.0\"\n\n[[package]]\nname = \"other\"\nversion = \"1\"\n\n\
                    [[package]]\nname = \"tokio\"\nversion = \"1.47.0\"\n";
        let v = locked_versions(lock, &["tokio", "fred"]);
        assert_eq!(
            v,
            vec![("tokio".into(), "1.47.0".into()), ("fred".into(), "10.1.0".into())]
        );
    }
}
