//! `inspect` on the Lua backend (issue 47): a read that leaves the fence
//! counter as it was, and that reports a reserved key as free.

use std::time::Duration;

use lock_core::{LockBackend, LockManager, LockOptions};
use lock_redis_lua::{RedisLuaBackend, RedisLuaBuilder};
use lock_testkit::server::{RedisServer, RespValue};

async fn fenced(server: &RedisServer) -> RedisLuaBackend {
    RedisLuaBuilder::url(server.url())
        .fencing(true)
        .build()
        .await
        .expect("connect")
}

async fn exists(server: &RedisServer, key: &str) -> bool {
    let reply = server.cmd(&["EXISTS", key]).await.expect("EXISTS");
    matches!(reply, RespValue::Integer(1))
}

/// The measurement: `verrou status` (a probing acquire) of a
/// never-used name left `verrou:lua:fence:{name}` behind, without a TTL,
/// and advanced it on every run. An inspection writes neither the key nor
/// its fence counter, and leaves an existing counter at its value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspecting_writes_neither_the_key_nor_its_fence_counter() {
    let server = RedisServer::builder().start().await.expect("start redis-server");
    let backend = fenced(&server).await;
    let fence = RedisLuaBackend::fence_key("i47");
    for _ in 0..5 {
        assert!(!backend.inspect("i47").await.expect("inspect").held);
    }
    assert!(!exists(&server, "i47").await, "the lock key was written");
    assert!(!exists(&server, &fence).await, "the fence counter was written");
    let locks =
        LockManager::with_options(backend.clone(), LockOptions::with_ttl(Duration::from_secs(30))).expect("options");
    let g = locks.lock("i47").await.expect("lock");
    let counter = server.cmd(&["GET", &fence]).await.expect("GET");
    let seen = locks.inspect("i47").await.expect("inspect");
    assert_eq!(seen.info.fencing_token, g.fencing_token());
    g.release().await.expect("release");
    for _ in 0..5 {
        assert!(!backend.inspect("i47").await.expect("inspect").held);
    }
    assert_eq!(
        server.cmd(&["GET", &fence]).await.expect("GET"),
        counter,
        "the counter moved"
    );
}

/// A key reserved for a woken waiter (its value is a reservation, not a
/// token) has no holder: free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserved_key_has_no_holder() {
    let server = RedisServer::builder().start().await.expect("start redis-server");
    let backend = fenced(&server).await;
    // `verrou:reserved:` and a waiter's id (`lock_redis_family::wake::RESERVED_PREFIX`).
    let reservation = format!("verrou:reserved:{}", "0".repeat(64));
    server
        .cmd(&["SET", "i47r", &reservation, "PX", "30000"])
        .await
        .expect("SET");
    assert!(!backend.inspect("i47r").await.expect("inspect").held);
    server
        .cmd(&["SET", "i47r", "not-a-reservation", "PX", "30000"])
        .await
        .expect("SET");
    let held = backend.inspect("i47r").await.expect("inspect");
    assert!(held.held);
    assert!(held.remaining.is_some_and(|r| r <= Duration::from_secs(30)), "{held:?}");
}
