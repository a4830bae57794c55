//! The kill sequence ends by the lease's local deadline: a program under
//! `verrou` never overlaps the next holder, even one that takes its time
//! to stop on SIGTERM, while the server stops answering.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{
    LOST, SLOW_TO_STOP, STARTS, exit_within, file, last_stamp, now_ns, signal, stamp, verrou, wait_for_stamp,
};
use lock_testkit::server::RedisServer;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Child;

/// Run SLOW_TO_STOP under `verrou <first>`, pause the server for longer
/// than the TTL (renewals fail; the server-side lease expires meanwhile),
/// resume it, and start `verrou <second>` at once: the second program must
/// start after the first one's last sign of life.
async fn no_overlap_after_a_pause(first: &[&str], second: &[&str]) {
    let server = RedisServer::start().await.expect("redis-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("{}?connect_timeout=200ms&response_timeout=200ms", server.url());
    let (a, b) = (file(&dir, "a"), file(&dir, "b"));
    let mut first_run = verrou(&url)
        .args(first)
        .args(["--", "sh", "-c", SLOW_TO_STOP])
        .env("OUT", &a)
        .spawn()
        .expect("spawn the first verrou");
    wait_for_stamp(&a, "start", &mut first_run).await;
    server.pause().expect("pause");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.resume().expect("resume");
    let status = verrou(&url)
        .args(second)
        .args(["--", "sh", "-c", STARTS])
        .env("OUT", &b)
        .status()
        .await
        .expect("run the second verrou");
    assert!(status.success(), "the second holder: {status}");
    let status = exit_within(&mut first_run, Duration::from_secs(60)).await;
    assert_eq!(status.code(), Some(LOST), "the first holder: {status}");
    assert_no_overlap(&a, &b);
}

fn assert_no_overlap(first: &Path, second: &Path) {
    let first_last = last_stamp(first).expect("the first program wrote nothing");
    let second_start = stamp(second, "start").expect("the second program did not run");
    assert!(
        first_last < second_start,
        "the first program was still running {} ms after the second one started",
        (first_last - second_start) / 1_000_000
    );
    assert!(
        stamp(first, "term").is_some(),
        "the first program got no SIGTERM before it was killed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_a_sigterm_handling_program_never_overlaps_the_next_holder() {
    no_overlap_after_a_pause(
        &["lock", "--ttl", "1s", "x"],
        &["lock", "--ttl", "1s", "--wait", "60s", "x"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grace_that_does_not_fit_in_the_ttl_is_refused() {
    let server = RedisServer::start().await.expect("redis-server");
    for grace in ["1s", "5s", "950ms"] {
        let out = verrou(&server.url())
            .args(["lock", "--ttl", "1s", "--kill-grace", grace, "g", "--", "true"])
            .output()
            .await
            .expect("run verrou");
        assert_eq!(out.status.code(), Some(78), "--kill-grace {grace}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--kill-grace"), "--kill-grace {grace}: {stderr}");
    }
    let out = verrou(&server.url())
        .args(["lock", "--ttl", "1s", "--kill-grace", "500ms", "g", "--", "true"])
        .output()
        .await
        .expect("run verrou");
    assert!(out.status.success(), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_a_sigterm_handling_program_never_overlaps_the_next_holder() {
    no_overlap_after_a_pause(
        &["semaphore", "--permits", "1", "--ttl", "1s", "s"],
        &["semaphore", "--permits", "1", "--ttl", "1s", "--wait", "60s", "s"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_a_deposed_leaders_program_is_stopped_before_the_next_leader_starts() {
    no_overlap_after_a_pause(
        &["elect", "--ttl", "1s", "--identity", "first", "e"],
        &["elect", "--ttl", "1s", "--wait", "60s", "--identity", "second", "e"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_to_another_owner_stops_the_program_at_once() {
    let server = RedisServer::start().await.expect("redis-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = file(&dir, "out");
    let mut child = verrou(&server.url())
        .args(["lock", "--ttl", "1s", "--kill-grace", "600ms", "taken"])
        .args(["--", "sh", "-c", SLOW_TO_STOP])
        .env("OUT", &out)
        .spawn()
        .expect("spawn verrou");
    wait_for_stamp(&out, "start", &mut child).await;
    // Another owner: the next renewal gets a definite "not owner".
    server.cmd(&["SET", "taken", "someone-else"]).await.expect("SET");
    let status = exit_within(&mut child, Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(LOST), "{status}");
    assert!(
        stamp(&out, "end").is_none(),
        "the program was given its 2 s clean-up although another owner holds the lock"
    );
}

/// Start SLOW_TO_STOP (printing its pid first) under `verrou lock --ttl 1s
/// NAME`; the running verrou, the stamp file and the program's pid.
async fn orphan_candidate(server: &RedisServer, dir: &tempfile::TempDir, name: &str) -> (Child, PathBuf, Pid) {
    let out = file(dir, name);
    let mut child = verrou(&server.url())
        .args(["lock", "--ttl", "1s", name])
        .args(["--", "sh", "-c", &format!("echo pid $$ >> \"$OUT\"; {SLOW_TO_STOP}")])
        .env("OUT", &out)
        .spawn()
        .expect("spawn verrou");
    wait_for_stamp(&out, "start", &mut child).await;
    let pid = stamp(&out, "pid").and_then(|p| i32::try_from(p).ok()).expect("pid");
    (child, out, Pid::from_raw(pid))
}

/// Running: it exists and is not a zombie.
fn running(pid: Pid) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_verrou_takes_its_program_with_it() {
    let server = RedisServer::start().await.expect("redis-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut child, _, program) = orphan_candidate(&server, &dir, "killed").await;
    signal(&child, Signal::SIGKILL);
    exit_within(&mut child, Duration::from_secs(30)).await;
    let mut gone = false;
    for _ in 0..100 {
        if !running(program) {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if !gone {
        let _ = killpg(program, Signal::SIGKILL);
    }
    assert!(gone, "the program outlived a killed verrou");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exception_a_stopped_verrou_leaves_its_program_running_until_it_resumes() {
    let server = RedisServer::start().await.expect("redis-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut child, out, program) = orphan_candidate(&server, &dir, "stopped").await;
    signal(&child, Signal::SIGSTOP);
    let stopped_at = now_ns();
    // Well past the lease's TTL the program still writes ticks: only a
    // fencing token can protect the resource from it now.
    let mut past_the_ttl = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if last_stamp(&out).is_some_and(|last| last > stopped_at + 2_000_000_000) {
            past_the_ttl = true;
            break;
        }
    }
    signal(&child, Signal::SIGCONT);
    // Resumed, verrou finds the deadline passed and stops it at once.
    let status = exit_within(&mut child, Duration::from_secs(30)).await;
    if running(program) {
        let _ = killpg(program, Signal::SIGKILL);
        panic!("a resumed verrou ({status}) left its program running");
    }
    assert_eq!(status.code(), Some(LOST), "{status}");
    assert!(past_the_ttl, "the program stopped while verrou was stopped");
}
