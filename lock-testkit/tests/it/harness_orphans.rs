//! Servers die with the test process, even when it is SIGKILLed, and their
//! directories go too: at exit when the values were never dropped (kept in
//! a `static`, or `std::process::exit`), or at the next start of a server
//! by any process when the owner was killed (issue #28: never leak).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lock_testkit::server::{EtcdCluster, Instances, RedisServer};

const CHILD_ENV: &str = "VERROU_HARNESS_ORPHAN_CHILD";
/// How `dir_helper` ends: `static`, `exit` or `start` (drops its server).
const DIR_MODE_ENV: &str = "VERROU_HARNESS_DIR_MODE";

/// Run by `servers_die_with_a_killed_test_process` in a child process:
/// starts servers, prints their pids and directories, and waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper, run in a child process by servers_die_with_a_killed_test_process"]
async fn orphan_helper() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let instances = Instances::start(2, RedisServer::builder()).await.unwrap();
    instances[1].pause().unwrap();
    for s in instances.servers() {
        println!("SERVER {} {}", s.pid().unwrap(), s.dir().display());
    }
    println!("READY");
    tokio::time::sleep(Duration::from_secs(60)).await;
}

#[test]
fn servers_die_with_a_killed_test_process() {
    let exe = std::env::current_exe().unwrap();
    let child = Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            "harness_orphans::orphan_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let mut servers = Vec::new();
    for line in BufReader::new(child.0.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        // libtest may print "test orphan_helper ... " in front.
        if let Some((_, rest)) = line.split_once("SERVER ") {
            let (pid, dir) = rest.split_once(' ').unwrap();
            servers.push((pid.parse::<u32>().unwrap(), dir.to_owned()));
        }
        if line.contains("READY") {
            break;
        }
    }
    assert_eq!(servers.len(), 2);
    for (pid, _) in &servers {
        assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    }
    child.0.kill().unwrap(); // SIGKILL: no destructor runs
    child.0.wait().unwrap();

    // The kernel kills the servers (they are reaped by init); their temp
    // directories are left behind, as nothing could remove them.
    let deadline = Instant::now() + Duration::from_secs(5);
    for (pid, _) in &servers {
        loop {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if !String::from_utf8_lossy(&cmdline).contains("redis") {
                break;
            }
            assert!(Instant::now() < deadline, "server pid {pid} survived its test process");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // Their directories stay (nothing could remove them) until the next
    // process starts a server.
    for (_, dir) in &servers {
        assert!(Path::new(dir).is_dir(), "{dir}");
    }
    let fresh = run_dir_helper("start");
    for (_, dir) in &servers {
        assert!(!Path::new(dir).exists(), "{dir} of a killed process was not reclaimed");
    }
    assert!(!fresh[0].exists());
}

/// Servers of the helper that are never dropped.
static KEPT: Mutex<Vec<RedisServer>> = Mutex::new(Vec::new());
static KEPT_ETCD: Mutex<Option<EtcdCluster>> = Mutex::new(None);

/// Run by the tests below in a child process: starts servers, prints their
/// directories, and ends as `VERROU_HARNESS_DIR_MODE` says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper, run in a child process by the directory tests"]
async fn dir_helper() {
    let Some(mode) = std::env::var_os(DIR_MODE_ENV) else {
        return;
    };
    let server = RedisServer::start().await.unwrap();
    println!("DIR {}", server.dir().display());
    match mode.to_str().unwrap() {
        "static" => {
            // Shared servers of a test binary: never dropped, the process
            // exits when the tests are done.
            let etcd = EtcdCluster::single().await.unwrap();
            println!("DIR {}", etcd.dir().display());
            *KEPT_ETCD.lock().unwrap() = Some(etcd);
            KEPT.lock().unwrap().push(server);
        }
        "exit" => {
            // As the client processes of verrou-torture end.
            println!("READY");
            std::process::exit(0);
        }
        _ => drop(server),
    }
    println!("READY");
}

/// Runs `dir_helper` in `mode` to its end; the directories it made.
fn run_dir_helper(mode: &str) -> Vec<PathBuf> {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "harness_orphans::dir_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_MODE_ENV, mode)
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "{mode}: {}", out.status);
    let text = String::from_utf8_lossy(&out.stdout);
    let dirs: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.split_once("DIR ").map(|(_, d)| PathBuf::from(d)))
        .collect();
    assert!(text.contains("READY") && !dirs.is_empty(), "{text}");
    dirs
}

#[test]
fn servers_never_dropped_leave_no_directory_at_exit() {
    let dirs = run_dir_helper("static");
    assert_eq!(dirs.len(), 2);
    for dir in &dirs {
        assert!(!dir.exists(), "{} is left behind", dir.display());
    }
}

#[test]
fn std_process_exit_leaves_no_directory() {
    let dirs = run_dir_helper("exit");
    for dir in &dirs {
        assert!(!dir.exists(), "{} is left behind", dir.display());
    }
}

/// Kills the child test process if an assertion fails first.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
