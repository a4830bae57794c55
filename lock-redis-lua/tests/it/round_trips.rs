//! README claims about what goes over the wire, from the server's `MONITOR`
//! stream (commands run inside scripts left out): one command per lock
//! operation, `update` retrying without re-reading, and the script acquire
//! path used on servers without `SET NX GET` (Redis < 7.0), forced here on
//! the installed Redis 7 by hiding its version (`HELLO` renamed away): the
//! backend then acquires exactly as on Redis 6. On a server with `SET
//! IFEQ` (Valkey 8.1), a renewal is that command instead of a script.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::{CasOutcome, CreateOutcome, Expiry, LockBackend, LockToken, VersionedStore, VersionedStoreExt};

use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_redis_lua::{RedisLuaBackend, RedisLuaBuilder};
use lock_testkit::server::{Monitor, RedisServer, RespValue};

const TTL: Duration = Duration::from_secs(30);

fn token() -> LockToken {
    LockToken::generate().expect("token")
}

/// The names of the commands `monitor` saw since its last call.
async fn sent(monitor: &mut Monitor, server: &RedisServer) -> Vec<String> {
    monitor
        .client_commands(server)
        .await
        .expect("MONITOR")
        .into_iter()
        .map(|args| args[0].clone())
        .collect()
}

/// Warm-up: scripts cached, connections open, so that only the operation
/// under test is seen.
async fn warm(backend: &RedisLuaBackend) {
    let t = token();
    backend.try_acquire("warm", &t, TTL).await.unwrap();
    backend.renew("warm", &t, TTL).await.unwrap();
    backend.renew_many(&[("warm", &t)], TTL).await;
    backend.release("warm", &t).await.unwrap();
}

/// What a renewal sends: `SET IFEQ` where the server has it, else the script.
async fn renew_command(server: &RedisServer) -> &'static str {
    let reply = server
        .cmd(&["SET", "ifeq-probe", "x", "IFEQ", "y"])
        .await
        .expect("SET IFEQ probe");
    if reply == RespValue::Bulk(None) {
        "set"
    } else {
        "evalsha"
    }
}

async fn lock_ops_are_one_command_each(server: &RedisServer, backend: &RedisLuaBackend, acquire: &str) {
    let renew = renew_command(server).await;
    warm(backend).await;
    let mut monitor = Monitor::start(server).await.expect("MONITOR");
    let mine = token();
    assert!(matches!(
        backend.try_acquire("k", &mine, TTL).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    assert_eq!(sent(&mut monitor, server).await, [acquire], "acquire");
    assert!(matches!(
        backend.try_acquire("k", &token(), TTL).await.unwrap(),
        AcquireOutcome::Held { .. }
    ));
    assert_eq!(sent(&mut monitor, server).await, [acquire], "refused acquire");
    assert_eq!(backend.renew("k", &mine, TTL).await.unwrap(), RenewOutcome::Renewed);
    assert_eq!(sent(&mut monitor, server).await, [renew], "renew");
    let batch = backend.renew_many(&[("k", &mine), ("gone", &mine)], TTL).await;
    assert_eq!(batch.len(), 2);
    assert_eq!(sent(&mut monitor, server).await, ["evalsha"], "renew_many");
    assert_eq!(backend.release("k", &mine).await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(sent(&mut monitor, server).await, ["evalsha"], "release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_lock_operation_is_one_command() {
    let server = RedisServer::start().await.expect("start");
    let plain = RedisLuaBuilder::url(server.url())
        .release_notifications(false)
        .build()
        .await
        .unwrap();
    lock_ops_are_one_command_each(&server, &plain, "set").await;
    let fenced = RedisLuaBuilder::url(server.url())
        .fencing(true)
        .release_notifications(false)
        .build()
        .await
        .unwrap();
    lock_ops_are_one_command_each(&server, &fenced, "evalsha").await;
}

/// Without a server version (as on Redis < 6.2, where `HELLO` does not
/// exist, and Redis 6.x, which answers 6), the acquire is the script: one
/// `EVALSHA`, never `SET NX GET`, with the same outcomes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_server_version_the_acquire_is_the_script() {
    let server = RedisServer::builder()
        .args(["--rename-command", "HELLO", ""])
        .start()
        .await
        .expect("start");
    let backend = RedisLuaBuilder::url(server.url())
        .release_notifications(false)
        .build()
        .await
        .unwrap();
    lock_ops_are_one_command_each(&server, &backend, "evalsha").await;
    // A re-sent acquire finds its own token: granted, TTL refreshed.
    let mine = token();
    backend.try_acquire("again", &mine, TTL).await.unwrap();
    assert!(matches!(
        backend.try_acquire("again", &mine, TTL).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
}

/// `update` reads once, then each attempt is one script call whose conflict
/// reply carries the current value: a stale start costs one extra script
/// call and no read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_retries_without_re_reading() {
    let server = RedisServer::start().await.expect("start");
    let store = RedisLuaBuilder::url(server.url())
        .release_notifications(false)
        .build()
        .await
        .unwrap();
    let CreateOutcome::Created { version } = store.create("n", b"1", Expiry::Keep).await.unwrap() else {
        panic!("create")
    };
    let stale = store.get("n").await.unwrap().expect("present");
    assert!(matches!(
        store.compare_and_set("n", version, b"2", Expiry::Keep).await.unwrap(),
        CasOutcome::Written { .. }
    ));
    let incr = |old: Option<&[u8]>| {
        let n: u64 = old.and_then(|b| std::str::from_utf8(b).ok()?.parse().ok()).unwrap_or(0);
        Some((n + 1).to_string().into_bytes())
    };
    let mut monitor = Monitor::start(&server).await.expect("MONITOR");
    let done = store.update_from("n", Some(stale), incr).await.unwrap();
    assert_eq!(
        done.expect("written").value,
        b"3",
        "the conflict brought the current value"
    );
    assert_eq!(
        sent(&mut monitor, &server).await,
        ["evalsha", "evalsha"],
        "a conflicting write, then the write: no read in between"
    );
    let done = store.update("n", incr).await.unwrap();
    assert_eq!(done.expect("written").value, b"4");
    assert_eq!(
        sent(&mut monitor, &server).await,
        ["hmget", "evalsha"],
        "update: one read, one write"
    );
}
