//! The program's whole process group, and its terminal: background children
//! are stopped and waited for before the release, a command interrupted
//! while it waits on a stalled server still cleans up its attempt, and an
//! interactive program reads its terminal.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use crate::common;

use std::io::{Read, Write};
use std::process::Stdio;
use std::time::Duration;

use common::{BUSY, exit_within, file, last_stamp, now_ns, signal, stamp, verrou};
use lock_testkit::server::RedisServer;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// The program exits at once, leaving a background loop in its group that
/// writes a tick every 50 ms: nothing of it may tick once verrou released,
/// and the next `--no-wait` holder is not busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_children_are_stopped_before_the_release() {
    let server = RedisServer::start().await.expect("redis-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, pgid) = (file(&dir, "ticks"), file(&dir, "group"));
    let mut first = verrou(&server.url())
        .args(["lock", "--ttl", "10s", "bg", "--", "sh", "-c"])
        .arg(
            "echo group $$ > \"$GROUP\"; \
             (while :; do echo tick $(date +%s%N) >> \"$OUT\"; sleep 0.05; done) & sleep 0.3",
        )
        .env("OUT", &out)
        .env("GROUP", &pgid)
        .spawn()
        .expect("spawn verrou");
    let status = exit_within(&mut first, Duration::from_secs(30)).await;
    let released_at = now_ns();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let last = last_stamp(&out);
    let mut second = verrou(&server.url())
        .args(["lock", "--no-wait", "bg", "--", "true"])
        .spawn()
        .expect("spawn verrou");
    let second = exit_within(&mut second, Duration::from_secs(30)).await;
    if let Some(group) = stamp(&pgid, "group").and_then(|g| i32::try_from(g).ok()) {
        let _ = killpg(Pid::from_raw(group), Signal::SIGKILL);
    }
    assert!(status.success(), "{status}");
    assert!(last.is_some(), "the background loop never ran");
    assert!(
        last < Some(released_at),
        "a background child of the program ran {} ms after verrou released the lock",
        (last.unwrap_or(0).saturating_sub(released_at)) / 1_000_000
    );
    assert!(second.success(), "the next holder: {second}");
}

/// Ctrl-C while an attempt is stuck on a stalled server: verrou exits only
/// after the attempt's clean-up release ran, so when the server resumes and
/// applies the late attempt, the release that follows it deletes the key.
/// Three rounds: a round where the waiter was between attempts (looking at
/// the key) when the server stalled has no attempt to clean up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_while_waiting_on_a_stalled_server_leaves_no_lease() {
    let server = RedisServer::start().await.expect("redis-server");
    let attempts = async || {
        server.command_calls("set").await.expect("INFO") + server.command_calls("evalsha").await.expect("INFO")
    };
    let mut leaked = Vec::new();
    for round in 0..3 {
        let key = format!("stall-{round}");
        // Held by another client for 2 s: verrou waits, retrying at its expiry.
        server
            .cmd(&["SET", key.as_str(), "someone-else", "PX", "2000"])
            .await
            .expect("SET");
        let held_at = tokio::time::Instant::now();
        let before = attempts().await;
        let mut waiter = verrou(&server.url())
            .args(["lock", "--ttl", "60s", key.as_str(), "--", "true"])
            .spawn()
            .expect("spawn verrou");
        // Its first attempt found the key held.
        for _ in 0..100 {
            if attempts().await > before {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        server.pause().expect("SIGSTOP the server");
        // Past the other holder's expiry: verrou's next attempt is in flight.
        tokio::time::sleep_until(held_at + Duration::from_millis(2_800)).await;
        signal(&waiter, Signal::SIGINT);
        tokio::time::sleep(Duration::from_millis(300)).await;
        server.resume().expect("SIGCONT the server");
        let status = exit_within(&mut waiter, Duration::from_secs(30)).await;
        assert_eq!(status.code(), Some(128 + 2), "{status}");
        let pttl = server.cmd(&["PTTL", key.as_str()]).await.expect("PTTL");
        if pttl != lock_testkit::server::RespValue::Integer(-2) {
            leaked.push((key, pttl));
        }
    }
    assert!(
        leaked.is_empty(),
        "interrupted attempts left leases nobody owns: {leaked:?}"
    );
    let mut next = verrou(&server.url())
        .args(["lock", "--no-wait", "stall-0", "--", "true"])
        .spawn()
        .expect("spawn verrou");
    let next = exit_within(&mut next, Duration::from_secs(30)).await;
    assert_ne!(
        next.code(),
        Some(BUSY),
        "the interrupted attempt left a lease nobody owns"
    );
    assert!(next.success(), "{next}");
}

/// `verrou lock tty -- sh -c 'read line; …'` in a new session whose
/// controlling terminal is a pseudo-terminal (`setsid -c`), verrou its
/// foreground process group as under an interactive shell; `typed` is
/// written to the terminal half a second in. The exit status and what the
/// program read.
async fn under_a_terminal(typed: &[&[u8]]) -> (std::process::ExitStatus, Option<String>) {
    let server = RedisServer::start().await.expect("redis-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = file(&dir, "read");
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let slave = std::fs::File::from(pty.slave);
    let mut child = tokio::process::Command::new("setsid")
        .args(["-w", "-c", env!("CARGO_BIN_EXE_verrou")])
        .args([
            "lock",
            "--ttl",
            "10s",
            "tty",
            "--",
            "sh",
            "-c",
            "read line; echo \"got $line\" > \"$OUT\"",
        ])
        .env("VERROU_URL", server.url())
        .env("OUT", &out)
        .stdin(Stdio::from(slave.try_clone().expect("dup")))
        .stdout(Stdio::from(slave.try_clone().expect("dup")))
        .stderr(Stdio::from(slave))
        .kill_on_drop(true)
        .spawn()
        .expect("spawn setsid verrou");
    let mut master = std::fs::File::from(pty.master);
    // Drain what verrou and the terminal echo write, so that they never block.
    let mut reader = master.try_clone().expect("dup");
    std::thread::spawn(move || {
        let mut buf = [0u8; 1024];
        while matches!(reader.read(&mut buf), Ok(n) if n > 0) {}
    });
    for bytes in typed {
        tokio::time::sleep(Duration::from_millis(500)).await;
        master.write_all(bytes).expect("type");
    }
    let status = match tokio::time::timeout(Duration::from_secs(20), child.wait()).await {
        Ok(status) => status.expect("wait"),
        Err(_) => {
            signal(&child, Signal::SIGKILL);
            panic!(
                "verrou hangs: the program never read its terminal ({:?})",
                std::fs::read_to_string(&out).ok()
            );
        }
    };
    (status, std::fs::read_to_string(&out).ok())
}

/// An interactive program reads the terminal verrou runs on: it is not
/// stopped by SIGTTIN, and verrou exits with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_program_reads_its_terminal() {
    let (status, read) = under_a_terminal(&[b"hello\n"]).await;
    assert!(status.success(), "{status}");
    assert_eq!(read.as_deref().map(str::trim), Some("got hello"));
}

/// Ctrl-Z stops the program (its group has the terminal); verrou sees the
/// stop, takes the terminal back and suspends itself, which the kernel
/// skips here (its session has no shell to resume it: an orphaned group),
/// then hands the terminal back and continues the program: no hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_z_on_the_terminal_never_leaves_verrou_hanging() {
    let (status, read) = under_a_terminal(&[b"\x1a", b"hello\n"]).await;
    assert!(status.success(), "{status}");
    assert_eq!(read.as_deref().map(str::trim), Some("got hello"));
}
