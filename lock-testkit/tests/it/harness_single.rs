//! One server: start/stop, clean-up, faults, RESP access.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lock_testkit::server::{HarnessError, RedisServer, RespClient, RespValue};

/// The process is gone (reaped) and its directory removed.
fn assert_gone(pid: u32, dir: &Path) {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&cmdline).contains("redis"),
        "pid {pid} still runs a server"
    );
    assert!(!dir.exists(), "{} was not removed", dir.display());
}

#[test]
fn handles_can_be_shared_across_tasks() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<RedisServer>();
    send_sync::<HarnessError>();
    send_sync::<lock_testkit::server::TcpProxy>();
    send_sync::<lock_testkit::server::RedisCluster>();
    fn send<T: Send + 'static>() {}
    send::<RespClient>();
}

fn bulk(s: &str) -> RespValue {
    RespValue::bulk(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_answers_and_cleans_up_on_drop() {
    let server = RedisServer::start().await.unwrap();
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    assert_eq!(server.addr().port(), server.port());
    assert!(server.is_running());
    assert_eq!(server.cmd(&["PING"]).await.unwrap(), RespValue::Simple("PONG".into()));
    assert!(server.cmd(&["SET", "k", "v"]).await.unwrap().is_ok());
    assert_eq!(server.cmd(&["GET", "k"]).await.unwrap(), bulk("v"));

    let info = server.info("server").await.unwrap();
    assert_eq!(info.get("tcp_port"), Some(&server.port().to_string()));
    assert!(info.contains_key("redis_version"));
    assert!(server.log_tail(50).contains("verrou harness: starting"));

    // Persistence is off by default.
    let save = server.cmd(&["CONFIG", "GET", "save"]).await.unwrap();
    assert_eq!(save, RespValue::Array(Some(vec![bulk("save"), bulk("")])));
    let aof = server.cmd(&["CONFIG", "GET", "appendonly"]).await.unwrap();
    assert_eq!(aof, RespValue::Array(Some(vec![bulk("appendonly"), bulk("no")])));

    let pid = server.pid().unwrap();
    let dir = server.dir().to_path_buf();
    let addr = server.addr();
    assert!(dir.is_dir());
    drop(server);
    assert_gone(pid, &dir);
    assert!(RespClient::connect(addr).await.unwrap_err().is_connection_refused());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleans_up_when_the_test_panics() {
    let (tx, rx) = tokio::sync::oneshot::channel::<(u32, PathBuf)>();
    let task = tokio::spawn(async move {
        let server = RedisServer::start().await.unwrap();
        server.pause().unwrap(); // even a stopped server is cleaned up
        tx.send((server.pid().unwrap(), server.dir().to_path_buf())).unwrap();
        panic!("test failure while holding a server");
    });
    let err = task.await.unwrap_err();
    assert!(err.is_panic());
    let (pid, dir) = rx.await.unwrap();
    assert_gone(pid, &dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_refuses_connections_and_restart_brings_it_back() {
    let server = RedisServer::start().await.unwrap();
    let mut open = server.client().await.unwrap();
    let old_pid = server.pid().unwrap();
    server.kill().unwrap();
    assert!(!server.is_running());
    assert_eq!(server.pid(), None);
    let err = server.client().await.unwrap_err();
    assert!(err.is_connection_refused(), "{err}");
    assert!(open.cmd(&["PING"]).await.is_err());
    assert!(matches!(server.pause(), Err(HarnessError::NotRunning { .. })));
    server.kill().unwrap(); // idempotent

    server.restart_keeping_data().await.unwrap();
    assert_ne!(server.pid(), Some(old_pid));
    assert_eq!(server.cmd(&["PING"]).await.unwrap(), RespValue::Simple("PONG".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stalls_commands_and_resume_answers() {
    let server = RedisServer::start().await.unwrap();
    let mut client = server.client().await.unwrap();
    client.set_timeout(Duration::from_millis(300));
    server.pause().unwrap();
    assert!(server.is_paused());

    let started = Instant::now();
    let err = client.cmd(&["PING"]).await.unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    // The connection is out of step now and says so.
    assert!(client.cmd(&["PING"]).await.is_err());

    // A new connection is accepted by the kernel but not answered either.
    let mut other = server.client().await.unwrap();
    other.set_timeout(Duration::from_secs(5));
    let pending = tokio::spawn(async move { other.cmd(&["PING"]).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!pending.is_finished());

    server.resume().unwrap();
    assert!(!server.is_paused());
    assert_eq!(pending.await.unwrap().unwrap(), RespValue::Simple("PONG".into()));
    assert_eq!(server.cmd(&["PING"]).await.unwrap(), RespValue::Simple("PONG".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeping_data_keeps_keys() {
    let server = RedisServer::start().await.unwrap();
    let port = server.port();
    server.cmd(&["SET", "k", "v"]).await.unwrap();
    server.cmd(&["PEXPIRE", "k", "600000"]).await.unwrap();
    let old_pid = server.pid();
    server.restart_keeping_data().await.unwrap();
    assert_ne!(server.pid(), old_pid);
    assert_eq!(server.port(), port);
    assert_eq!(server.cmd(&["GET", "k"]).await.unwrap(), bulk("v"));
    assert!(server.cmd(&["PTTL", "k"]).await.unwrap().as_int().unwrap() > 500_000);

    // Also from a paused server.
    server.pause().unwrap();
    server.restart_keeping_data().await.unwrap();
    assert_eq!(server.cmd(&["GET", "k"]).await.unwrap(), bulk("v"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_empty_drops_keys() {
    let server = RedisServer::start().await.unwrap();
    server.cmd(&["SET", "k", "v"]).await.unwrap();
    server.cmd(&["SAVE"]).await.unwrap(); // even saved data goes
    server.restart_empty().await.unwrap();
    assert_eq!(server.cmd(&["GET", "k"]).await.unwrap(), RespValue::Bulk(None));
    assert_eq!(server.cmd(&["DBSIZE"]).await.unwrap(), RespValue::Integer(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistence_keeps_writes_across_a_kill() {
    let server = RedisServer::builder().persistence(true).start().await.unwrap();
    let aof = server.cmd(&["CONFIG", "GET", "appendonly"]).await.unwrap();
    assert_eq!(aof, RespValue::Array(Some(vec![bulk("appendonly"), bulk("yes")])));
    server.cmd(&["SET", "k", "v"]).await.unwrap();
    server.kill().unwrap();
    server.restart_keeping_data().await.unwrap();
    assert_eq!(server.cmd(&["GET", "k"]).await.unwrap(), bulk("v"));
    server.restart_empty().await.unwrap();
    assert_eq!(server.cmd(&["GET", "k"]).await.unwrap(), RespValue::Bulk(None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_replies_are_byte_exact() {
    let server = RedisServer::start().await.unwrap();
    let mut c = server.client().await.unwrap();
    assert_eq!(c.cmd_raw(&["GET", "missing"]).await.unwrap(), b"$-1\r\n");
    assert_eq!(c.cmd_raw(&["SET", "k", "v"]).await.unwrap(), b"+OK\r\n");
    assert_eq!(c.cmd_raw(&["INCR", "n"]).await.unwrap(), b":1\r\n");
    let err = c.cmd_raw(&["INCR", "k"]).await.unwrap();
    assert_eq!(err, b"-ERR value is not an integer or out of range\r\n");
    assert!(c.cmd(&["INCR", "k"]).await.unwrap().is_error());

    let binary: &[u8] = b"a\r\nb\0c";
    assert_eq!(
        c.cmd_raw(&[b"SET".as_slice(), b"bin", binary]).await.unwrap(),
        b"+OK\r\n"
    );
    assert_eq!(c.cmd_raw(&["GET", "bin"]).await.unwrap(), b"$6\r\na\r\nb\0c\r\n");
    assert_eq!(c.cmd(&["GET", "bin"]).await.unwrap(), RespValue::bulk(binary));

    c.cmd(&["RPUSH", "l", "x", "", "yz"]).await.unwrap();
    let raw = c.cmd_raw(&["LRANGE", "l", "0", "-1"]).await.unwrap();
    assert_eq!(raw, b"*3\r\n$1\r\nx\r\n$0\r\n\r\n$2\r\nyz\r\n");
    assert_eq!(lock_testkit::server::parse_reply(&raw).unwrap().to_bytes(), raw);
    assert_eq!(c.cmd_raw(&["LRANGE", "none", "0", "-1"]).await.unwrap(), b"*0\r\n");

    // Pipelining and inline commands through the raw interface.
    c.send_raw(b"PING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n").await.unwrap();
    assert_eq!(c.read_raw().await.unwrap(), b"+PONG\r\n");
    assert_eq!(c.read().await.unwrap(), bulk("hi"));

    // RESP3 replies can be read raw (not parsed).
    c.cmd_raw(&["HELLO", "3"]).await.unwrap();
    assert_eq!(c.cmd_raw(&["GET", "missing"]).await.unwrap(), b"_\r\n");
    assert!(c.cmd(&["GET", "missing"]).await.is_err());
    assert_eq!(c.cmd_raw(&["PING"]).await.unwrap(), b"+PONG\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_args_are_passed_and_override_defaults() {
    let server = RedisServer::builder()
        .arg("--maxmemory")
        .arg("12mb")
        .args(["--save", "3600 1"])
        .start()
        .await
        .unwrap();
    let mm = server.cmd(&["CONFIG", "GET", "maxmemory"]).await.unwrap();
    assert_eq!(mm, RespValue::Array(Some(vec![bulk("maxmemory"), bulk("12582912")])));
    let save = server.cmd(&["CONFIG", "GET", "save"]).await.unwrap();
    assert_eq!(save, RespValue::Array(Some(vec![bulk("save"), bulk("3600 1")])));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_does_not_start_reports_its_log() {
    let err = RedisServer::builder()
        .arg("--no-such-directive")
        .arg("1")
        .start()
        .await
        .unwrap_err();
    match &err {
        HarnessError::StartFailed { log_tail, .. } => {
            assert!(log_tail.contains("no-such-directive"), "{log_tail}")
        }
        other => panic!("unexpected error {other}"),
    }
    assert!(err.to_string().contains("log tail"));

    // A "server" that never answers: the start gives up with StartTimeout
    // (whatever the machine's speed), and says so.
    let mute = tempfile::Builder::new().suffix(".sh").tempfile().unwrap();
    std::fs::write(mute.path(), "#!/bin/sh\nexec sleep 30\n").unwrap();
    let mut perms = std::fs::metadata(mute.path()).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(mute.path(), perms).unwrap();
    let mute = mute.into_temp_path();
    let err = RedisServer::builder()
        .binary(&*mute)
        .start_timeout(Duration::from_millis(500))
        .start()
        .await
        .unwrap_err();
    assert!(matches!(err, HarnessError::StartTimeout { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modules_missing_or_broken_are_errors() {
    let err = RedisServer::builder()
        .module("/nonexistent/module.so")
        .start()
        .await
        .unwrap_err();
    assert!(matches!(err, HarnessError::NotFound { .. }), "{err}");

    let bogus = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(bogus.path(), b"not a shared object").unwrap();
    let err = RedisServer::builder()
        .module_with_args(bogus.path(), ["some-arg"])
        .start()
        .await
        .unwrap_err();
    match &err {
        HarnessError::StartFailed { log_tail, .. } => {
            assert!(log_tail.contains("Module"), "{log_tail}")
        }
        other => panic!("unexpected error {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tair_module_loads_or_says_how_to_build_it() {
    // The test command builds the module first; a missing one fails here
    // with the command that builds it (that message is checked, with the
    // module made missing on purpose, in harness_env.rs).
    let path = lock_testkit::server::tair_module_path().unwrap_or_else(|e| panic!("{e}"));
    let server = RedisServer::builder().tair_module().start().await.unwrap();
    let modules = server.cmd(&["MODULE", "LIST"]).await.unwrap();
    let listed = modules.as_array().map_or(0, <[_]>::len);
    assert_eq!(listed, 1, "{} not listed: {modules:?}", path.display());
}
