//! `verrou lock --hold-at-least` (issue 47): a cron job started on two
//! machines whose clocks differ by a second runs once per tick.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use crate::common;

use std::time::Duration;

use common::{BUSY, verrou};
use lock_testkit::server::RedisServer;

/// One tick: the two "machines" start `verrou lock --no-wait` on the same
/// job, the second 1 s after the first; each run appends a line to `runs`.
/// Returns the two exit codes.
async fn tick(url: &str, runs: &std::path::Path, hold: Option<&str>) -> (Option<i32>, Option<i32>) {
    let start = |url: &str| {
        let mut cmd = verrou(url);
        cmd.args(["lock", "--no-wait"]);
        if let Some(hold) = hold {
            cmd.args(["--hold-at-least", hold]);
        }
        cmd.args(["cron-job", "--", "sh", "-c", "echo run >> \"$RUNS\""])
            .env("RUNS", runs);
        cmd.status()
    };
    let first = tokio::spawn(start(url));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second = start(url).await.expect("second machine");
    let first = first.await.expect("task").expect("first machine");
    (first.code(), second.code())
}

fn runs(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path).unwrap_or_default().lines().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_job_runs_once_per_tick_across_two_machines() {
    let server = RedisServer::start().await.expect("redis-server");
    let dir = tempfile::tempdir().expect("tempdir");
    // Without a minimum hold the job (a few ms) is over before the second
    // machine's tick: it runs twice.
    let twice = dir.path().join("without");
    assert_eq!(tick(&server.url(), &twice, None).await, (Some(0), Some(0)));
    assert_eq!(runs(&twice), 2, "the control tick ran the job twice");

    // Holding it 3 s, ticks 5 s apart: once per tick, the later machine busy.
    let once = dir.path().join("with");
    for n in 1..=3 {
        let started = tokio::time::Instant::now();
        let codes = tick(&server.url(), &once, Some("3s")).await;
        assert_eq!(runs(&once), n, "tick {n}: {codes:?}");
        assert!(
            matches!(codes, (Some(0), Some(BUSY)) | (Some(BUSY), Some(0))),
            "tick {n}: one machine runs the job, the other is busy: {codes:?}"
        );
        tokio::time::sleep_until(started + Duration::from_secs(5)).await;
    }
}
