//! Servers die with the test process, even when it is SIGKILLed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lock_testkit::server::{Instances, RedisServer};

const CHILD_ENV: &str = "VERROU_HARNESS_ORPHAN_CHILD";

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
    for (pid, dir) in &servers {
        loop {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if !String::from_utf8_lossy(&cmdline).contains("redis") {
                break;
            }
            assert!(Instant::now() < deadline, "server pid {pid} survived its test process");
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_dir_all(dir);
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
