//! Helpers shared by the `verrou` command's tests: spawning it, and reading
//! the `label nanos` stamps its test programs write.
#![allow(clippy::expect_used, clippy::panic, dead_code, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

pub const BUSY: i32 = 75;
pub const LOST: i32 = 79;

/// The `verrou` binary with `VERROU_URL=url`, killed if the test drops it.
pub fn verrou(url: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_verrou"));
    cmd.env("VERROU_URL", url).stdin(Stdio::null()).kill_on_drop(true);
    cmd
}

/// Wall-clock nanoseconds, the unit `date +%s%N` writes.
pub fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_nanos()
}

/// Lines `label nanos` written by the test programs.
pub fn stamps(path: &Path) -> Vec<(String, u128)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (label, ns) = l.split_once(' ')?;
            Some((label.to_owned(), ns.trim().parse().ok()?))
        })
        .collect()
}

/// The first `label` stamp in `path`.
pub fn stamp(path: &Path, label: &str) -> Option<u128> {
    stamps(path).into_iter().find(|(l, _)| l == label).map(|(_, ns)| ns)
}

/// The latest stamp of any label in `path`: a lower bound of when the
/// program that wrote them was last running.
pub fn last_stamp(path: &Path) -> Option<u128> {
    stamps(path).into_iter().map(|(_, ns)| ns).max()
}

/// Wait (bounded) until `path` has a `label` line.
pub async fn wait_for_stamp(path: &Path, label: &str, child: &mut Child) -> u128 {
    for _ in 0..600 {
        if let Some(ns) = stamp(path, label) {
            return ns;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("verrou exited ({status}) before {label} appeared in {}", path.display());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{label} never appeared in {}", path.display());
}

pub async fn exit_within(child: &mut Child, limit: Duration) -> ExitStatus {
    tokio::time::timeout(limit, child.wait())
        .await
        .expect("verrou did not exit in time")
        .expect("wait")
}

pub fn signal(child: &Child, sig: Signal) {
    let pid = i32::try_from(child.id().expect("running")).expect("pid");
    kill(Pid::from_raw(pid), sig).expect("kill");
}

pub fn file(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

/// A program that writes `start`, then a `tick` every 50 ms until SIGTERM,
/// then cleans up for about 2 s (`term`, ticks, `end`): the program of the
/// issue, whose clean-up overlapped the next holder.
pub const SLOW_TO_STOP: &str = "trap 'echo term $(date +%s%N) >> \"$OUT\"; i=0; \
    while [ $i -lt 40 ]; do echo tick $(date +%s%N) >> \"$OUT\"; sleep 0.05; i=$((i+1)); done; \
    echo end $(date +%s%N) >> \"$OUT\"; exit 0' TERM; \
    echo start $(date +%s%N) >> \"$OUT\"; \
    while :; do echo tick $(date +%s%N) >> \"$OUT\"; sleep 0.05; done";

/// A program that writes `start` and exits.
pub const STARTS: &str = "echo start $(date +%s%N) >> \"$OUT\"";

/// Writes `start`, works for a while, writes `end`.
pub const JOB: &str = "echo start $(date +%s%N) >> \"$OUT\"; sleep 0.3; echo end $(date +%s%N) >> \"$OUT\"";

/// Start `copies` of `verrou ARGS -- sh -c JOB` at once, each must succeed;
/// each program's `(start, end)`, sorted.
pub async fn concurrent_jobs(url: &str, args: &[&str], copies: usize, dir: &tempfile::TempDir) -> Vec<(u128, u128)> {
    let mut children = Vec::new();
    for i in 0..copies {
        let out = file(dir, &format!("job{i}"));
        let child = verrou(url)
            .args(args)
            .args(["--", "sh", "-c", JOB])
            .env("OUT", &out)
            .spawn()
            .expect("spawn verrou");
        children.push((child, out));
    }
    let mut intervals = Vec::new();
    for (mut child, out) in children {
        let status = exit_within(&mut child, Duration::from_secs(60)).await;
        assert!(status.success(), "{status}");
        intervals.push((stamp(&out, "start").expect("start"), stamp(&out, "end").expect("end")));
    }
    intervals.sort_unstable();
    intervals
}
