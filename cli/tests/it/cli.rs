//! The `verrou` command as a real subprocess against real servers.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use crate::common;

use std::time::Duration;

use common::{BUSY, LOST, exit_within, file, now_ns, signal, stamp, verrou, wait_for_stamp};
use lock_testkit::server::RedisServer;
use nix::sys::signal::Signal;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_locks_on_one_name_serialize() {
    let server = RedisServer::start().await.expect("redis-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let args = ["lock", "--ttl", "2s", "--wait", "60s", "serial"];
    let intervals = common::concurrent_jobs(&server.url(), &args, 3, &dir).await;
    for pair in intervals.windows(2) {
        assert!(pair[0].1 < pair[1].0, "two programs ran at once: {intervals:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_wait_on_a_held_lock_exits_busy_at_once() {
    let server = RedisServer::start().await.expect("redis-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let ready = file(&dir, "ready");
    let mut holder = verrou(&server.url())
        .args([
            "lock",
            "--ttl",
            "30s",
            "busy",
            "--",
            "sh",
            "-c",
            "echo ready $(date +%s%N) > \"$OUT\"; exec sleep 120",
        ])
        .env("OUT", &ready)
        .spawn()
        .expect("spawn holder");
    wait_for_stamp(&ready, "ready", &mut holder).await;

    let ran = file(&dir, "ran");
    let started = std::time::Instant::now();
    // Without --no-wait this would wait as long as it takes (the holder holds
    // for two minutes).
    let status = verrou(&server.url())
        .args(["lock", "--no-wait", "busy", "--", "touch"])
        .arg(&ran)
        .status()
        .await
        .expect("run verrou");
    let took = started.elapsed();
    assert_eq!(status.code(), Some(BUSY), "{status}");
    assert!(took < Duration::from_secs(20), "--no-wait took {took:?}");
    assert!(!ran.exists(), "the program ran without the lock");

    signal(&holder, Signal::SIGTERM);
    let status = exit_within(&mut holder, Duration::from_secs(20)).await;
    assert_eq!(status.code(), Some(128 + 15), "SIGTERM was not forwarded: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_pass_through() {
    let server = RedisServer::start().await.expect("redis-server");
    for (program, expected) in [
        (vec!["sh", "-c", "exit 42"], 42),
        (vec!["sh", "-c", "exit 0"], 0),
        (vec!["sh", "-c", "kill -9 $$"], 128 + 9),
        (vec!["/nonexistent/verrou-test-program"], 127),
        (
            vec![
                "sh",
                "-c",
                "test \"$VERROU_KEY\" = codes && test -n \"$VERROU_FENCING_TOKEN\"",
            ],
            0,
        ),
    ] {
        let status = verrou(&format!("{}?fencing=true", server.url()))
            .args(["lock", "codes", "--"])
            .args(&program)
            .status()
            .await
            .expect("run verrou");
        assert_eq!(status.code(), Some(expected), "{program:?}");
        // Released every time, whatever the program did.
        let free = verrou(&server.url())
            .args(["status", "codes"])
            .status()
            .await
            .expect("status");
        assert_eq!(free.code(), Some(1), "{program:?} left the lock held");
    }
    // No fencing on the backend: no VERROU_FENCING_TOKEN.
    let status = verrou(&server.url())
        .args(["lock", "codes", "--", "sh", "-c", "test -z \"$VERROU_FENCING_TOKEN\""])
        .env("VERROU_FENCING_TOKEN", "inherited")
        .status()
        .await
        .expect("run verrou");
    assert_eq!(status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_outliving_its_lease_gets_sigterm_by_the_deadline() {
    let server = RedisServer::start().await.expect("redis-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = file(&dir, "out");
    let ttl = Duration::from_millis(1000);
    let program = "trap 'echo term $(date +%s%N) >> \"$OUT\"; kill $!; exit 0' TERM; \
                   echo start $(date +%s%N) >> \"$OUT\"; sleep 120 & wait $!";
    let url = format!("{}?connect_timeout=200ms&response_timeout=200ms", server.url());
    let mut child = verrou(&url)
        .args(["lock", "--ttl", "1s", "lease", "--", "sh", "-c", program])
        .env("OUT", &out)
        .spawn()
        .expect("spawn verrou");
    wait_for_stamp(&out, "start", &mut child).await;
    // Renewals now go unanswered: the local deadline passes at most one TTL
    // after the last renewal sent before this point.
    let paused_at = now_ns();
    server.pause().expect("pause");
    let status = exit_within(&mut child, Duration::from_secs(60)).await;
    server.resume().expect("resume");
    assert_eq!(status.code(), Some(LOST), "{status}");
    let term = stamp(&out, "term").expect("the program got no SIGTERM");
    assert!(term > paused_at, "SIGTERM before the server stopped answering");
    // Deadline <= paused_at + ttl; the slack covers signal delivery and the
    // shell's trap on a loaded machine.
    let slack = Duration::from_secs(2);
    let late_by = Duration::from_nanos(u64::try_from(term - paused_at).expect("ns"));
    assert!(
        late_by <= ttl + slack,
        "SIGTERM {late_by:?} after the pause, TTL {ttl:?}"
    );

    // A program that ignores SIGTERM gets SIGKILL after --kill-grace.
    let stubborn = file(&dir, "stubborn");
    let mut child = verrou(&url)
        .args([
            "lock",
            "--ttl",
            "1s",
            "--kill-grace",
            "300ms",
            "lease2",
            "--",
            "sh",
            "-c",
        ])
        .arg("trap '' TERM; echo start $(date +%s%N) >> \"$OUT\"; while :; do sleep 0.1; done")
        .env("OUT", &stubborn)
        .spawn()
        .expect("spawn verrou");
    wait_for_stamp(&stubborn, "start", &mut child).await;
    server.pause().expect("pause");
    let status = exit_within(&mut child, Duration::from_secs(60)).await;
    server.resume().expect("resume");
    assert_eq!(status.code(), Some(LOST), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_releases_the_lock_for_the_next_waiter() {
    let server = RedisServer::start().await.expect("redis-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let ready = file(&dir, "ready");
    let got = file(&dir, "got");
    let ttl = Duration::from_secs(30);
    let mut holder = verrou(&server.url())
        .args([
            "lock",
            "--ttl",
            "30s",
            "ctrl-c",
            "--",
            "sh",
            "-c",
            "echo ready $(date +%s%N) > \"$OUT\"; exec sleep 120",
        ])
        .env("OUT", &ready)
        .spawn()
        .expect("spawn holder");
    wait_for_stamp(&ready, "ready", &mut holder).await;
    let mut waiter = verrou(&server.url())
        .args([
            "lock",
            "--ttl",
            "30s",
            "--wait",
            "120s",
            "ctrl-c",
            "--",
            "sh",
            "-c",
            "echo got $(date +%s%N) > \"$OUT\"",
        ])
        .env("OUT", &got)
        .spawn()
        .expect("spawn waiter");
    let interrupted_at = now_ns();
    signal(&holder, Signal::SIGINT);
    let status = exit_within(&mut holder, Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(128 + 2), "SIGINT was not forwarded: {status}");
    let status = exit_within(&mut waiter, Duration::from_secs(120)).await;
    assert!(status.success(), "{status}");
    let acquired = stamp(&got, "got").expect("the waiter's program did not run");
    let after = Duration::from_nanos(u64::try_from(acquired.saturating_sub(interrupted_at)).expect("ns"));
    assert!(
        after < ttl / 2,
        "the waiter got the lock {after:?} after SIGINT: not released, waited for the TTL"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_versioned_values_from_the_shell() {
    let server = RedisServer::start().await.expect("redis-server");
    let url = format!("{}?fencing=true", server.url());
    let run = |args: &[&str]| {
        let mut cmd = verrou(&url);
        cmd.args(args);
        async move { cmd.output().await.expect("run verrou") }
    };
    let json = |out: &std::process::Output| -> serde_json::Value {
        serde_json::from_slice(&out.stdout).expect("JSON on stdout")
    };
    let out = run(&["--json", "status", "st"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json(&out)["held"], false);

    let out = run(&["--json", "set", "k", "one"]).await;
    assert!(out.status.success());
    let v1 = json(&out)["version"].as_u64().expect("version");
    let out = run(&["--json", "get", "k"]).await;
    assert_eq!(json(&out)["value"], "one");
    assert_eq!(json(&out)["version"].as_u64(), Some(v1));

    let out = run(&["--json", "cas", "k", &v1.to_string(), "two"]).await;
    assert!(out.status.success(), "{out:?}");
    let v2 = json(&out)["version"].as_u64().expect("version");
    // A stale version: conflict, exit 1, the current value and version shown.
    let out = run(&["--json", "cas", "k", &v1.to_string(), "three"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json(&out)["value"], "two");
    assert_eq!(json(&out)["version"].as_u64(), Some(v2));
    let out = run(&["cas", "k", "none", "x"]).await;
    assert_eq!(out.status.code(), Some(1), "create over an existing key");

    let out = run(&["delete", "k", "--version", &v1.to_string()]).await;
    assert_eq!(out.status.code(), Some(1), "delete at a stale version");
    let out = run(&["delete", "k"]).await;
    assert!(out.status.success());
    let out = run(&["get", "k"]).await;
    assert_eq!(out.status.code(), Some(1));

    // Human errors on stderr, with the documented codes.
    let out = run(&["lock", "x", "--", "true"]).await;
    assert!(out.status.success());
    let out = verrou("redis://127.0.0.1:1?bogus=1") // refused while parsing: nothing connects
        .args(["get", "k"])
        .output()
        .await
        .expect("run");
    assert_eq!(out.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown parameter `bogus`"));
    let out = verrou("memory://").args(["get", "k"]).output().await.expect("run");
    assert_eq!(out.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&out.stderr).contains("inside one process"));
    let out = verrou("redlock://?node=memory://&node=memory://")
        .args(["status", "k"])
        .output()
        .await
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(78),
        "a redlock over in-process nodes was accepted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_and_sigterm_are_forwarded_and_the_lock_released() {
    let server = RedisServer::start().await.expect("redis-server");
    let dir = tempfile::tempdir().expect("tempdir");
    for (sig, code) in [(Signal::SIGHUP, 128 + 1), (Signal::SIGTERM, 128 + 15)] {
        let ready = file(&dir, &format!("ready-{sig}"));
        let mut holder = verrou(&server.url())
            .args([
                "lock",
                "--ttl",
                "30s",
                "fwd",
                "--",
                "sh",
                "-c",
                "echo ready $(date +%s%N) > \"$OUT\"; exec sleep 120",
            ])
            .env("OUT", &ready)
            .spawn()
            .expect("spawn holder");
        wait_for_stamp(&ready, "ready", &mut holder).await;
        signal(&holder, sig);
        let status = exit_within(&mut holder, Duration::from_secs(30)).await;
        assert_eq!(status.code(), Some(code), "{sig} was not forwarded: {status}");
        let free = verrou(&server.url())
            .args(["status", "fwd"])
            .status()
            .await
            .expect("status");
        assert_eq!(free.code(), Some(1), "{sig}: the lock was not released");
    }
}
