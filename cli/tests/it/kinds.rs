//! `verrou semaphore` and `verrou elect` as real subprocesses against a
//! real server.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use crate::common;

use std::time::Duration;

use common::{BUSY, exit_within, file, stamp, verrou, wait_for_stamp};
use lock_testkit::server::RedisServer;

/// The most `(start, end)` intervals that overlap at any instant.
fn most_at_once(intervals: &[(u128, u128)]) -> usize {
    intervals
        .iter()
        .map(|&(start, _)| intervals.iter().filter(|&&(s, e)| s <= start && start < e).count())
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_of_two_runs_at_most_two_programs_at_once() {
    let server = RedisServer::start().await.expect("redis-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let args = ["semaphore", "--permits", "2", "--ttl", "2s", "--wait", "60s", "jobs"];
    let intervals = common::concurrent_jobs(&server.url(), &args, 6, &dir).await;
    let most = most_at_once(&intervals);
    assert!(most <= 2, "{most} programs ran at once under 2 permits: {intervals:?}");

    // Every permit given back: two more run with --no-wait.
    for _ in 0..2 {
        let status = verrou(&server.url())
            .args(["semaphore", "--permits", "2", "--no-wait", "jobs", "--", "true"])
            .status()
            .await
            .expect("run verrou");
        assert!(status.success(), "a permit was not given back: {status}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_semaphore_is_busy_and_a_size_mismatch_is_refused() {
    let server = RedisServer::start().await.expect("redis-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let ready = file(&dir, "ready");
    let mut holder = verrou(&server.url())
        .args(["semaphore", "--permits", "1", "full", "--", "sh", "-c"])
        .arg("echo start $(date +%s%N) > \"$OUT\"; exec sleep 120")
        .env("OUT", &ready)
        .spawn()
        .expect("spawn holder");
    wait_for_stamp(&ready, "start", &mut holder).await;
    let ran = file(&dir, "ran");
    let status = verrou(&server.url())
        .args(["semaphore", "--permits", "1", "--no-wait", "full", "--", "touch"])
        .arg(&ran)
        .status()
        .await
        .expect("run verrou");
    assert_eq!(status.code(), Some(BUSY), "{status}");
    assert!(!ran.exists(), "the program ran without a permit");
    let out = verrou(&server.url())
        .args(["semaphore", "--permits", "3", "--no-wait", "full", "--", "true"])
        .output()
        .await
        .expect("run verrou");
    assert_eq!(out.status.code(), Some(78), "another size while held: {out:?}");
    let out = verrou(&server.url())
        .args(["semaphore", "--permits", "0", "zero", "--", "true"])
        .output()
        .await
        .expect("run verrou");
    assert_eq!(out.status.code(), Some(78), "a semaphore of 0: {out:?}");
    drop(holder);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_elect_runs_only_after_the_first_leaders_program_ends() {
    let server = RedisServer::start().await.expect("redis-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("{}?fencing=true", server.url());
    let (first_out, second_out) = (file(&dir, "first"), file(&dir, "second"));
    let program = "echo start $(date +%s%N) >> \"$OUT\"; echo term $VERROU_FENCING_TOKEN >> \"$OUT\"; \
                   sleep 0.5; echo end $(date +%s%N) >> \"$OUT\"";
    let mut first = verrou(&url)
        .args([
            "elect",
            "--ttl",
            "2s",
            "--identity",
            "a",
            "sched",
            "--",
            "sh",
            "-c",
            program,
        ])
        .env("OUT", &first_out)
        .spawn()
        .expect("spawn the first");
    wait_for_stamp(&first_out, "start", &mut first).await;
    let busy = verrou(&url)
        .args(["elect", "--no-wait", "sched", "--", "true"])
        .status()
        .await
        .expect("run verrou");
    assert_eq!(busy.code(), Some(BUSY), "two leaders: {busy}");
    let mut second = verrou(&url)
        .args([
            "elect",
            "--ttl",
            "2s",
            "--wait",
            "60s",
            "--identity",
            "b",
            "sched",
            "--",
        ])
        .args(["sh", "-c", program])
        .env("OUT", &second_out)
        .spawn()
        .expect("spawn the second");
    assert!(exit_within(&mut first, Duration::from_secs(60)).await.success());
    assert!(exit_within(&mut second, Duration::from_secs(60)).await.success());
    let first_end = stamp(&first_out, "end").expect("the first leader's end");
    let second_start = stamp(&second_out, "start").expect("the second leader's start");
    assert!(first_end < second_start, "two leaders' programs overlapped");
    // The fencing token is the term, higher for the later leader.
    let (first_term, second_term) = (
        stamp(&first_out, "term").expect("first term"),
        stamp(&second_out, "term").expect("second term"),
    );
    assert!(first_term < second_term, "terms {first_term} then {second_term}");
}
