//! An ACL user without pub/sub channel rights (Redis 7's default for new
//! users, `acl-pubsub-default resetchannels`): release notifications fail,
//! locks keep working (issue 11 items 2 and 11).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::{LockBackend, LockManager, LockOptions, LockToken};

use lock_core::{AcquireOutcome, ReleaseOutcome};
use lock_redis_lua::{RedisLuaBackend, RedisLuaBuilder};
use lock_testkit::server::RedisServer;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(30);

/// A server with user `u` (password `pw`): every key and command, no channel.
async fn server_without_channel_rights() -> RedisServer {
    let server = RedisServer::builder().start().await.expect("start redis-server");
    let reply = server
        .cmd(&["ACL", "SETUSER", "u", "on", ">pw", "~*", "+@all", "resetchannels"])
        .await
        .expect("ACL SETUSER");
    assert!(reply.is_ok(), "{reply:?}");
    server
}

fn user_url(server: &RedisServer) -> String {
    format!("redis://u:pw@127.0.0.1:{}", server.port())
}

async fn connected_clients(server: &RedisServer) -> u64 {
    server.info("clients").await.expect("INFO clients")["connected_clients"]
        .parse()
        .expect("a number")
}

fn token() -> LockToken {
    LockToken::generate().expect("token")
}

/// Issue 11 item 2: every SUBSCRIBE refused with NOPERM leaked a pub/sub
/// connection (and its reader task). Now the first refusal turns the
/// notifications off; 1,000 waits leave the client count where it was, and
/// a waiter still takes the lock once it is released (on its timer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_subscribes_leak_no_connections_and_waiters_still_acquire() {
    let server = server_without_channel_rights().await;
    let backend = RedisLuaBuilder::url(user_url(&server))
        .release_notifications(true)
        .build()
        .await
        .expect("connect as u");
    let holder = RedisLuaBackend::connect(&server.url()).await.expect("connect");
    let held = token();
    assert!(matches!(
        holder.try_acquire("busy", &held, TTL).await.expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    let before = connected_clients(&server).await;
    for _ in 0..1_000 {
        backend.wait_for_release("busy", Duration::from_millis(1)).await;
    }
    // Every refused pub/sub connection is closed (the server sees the close
    // shortly after): the count comes back to where it was, bounded wait.
    let give_up = Instant::now() + Duration::from_secs(5);
    let mut after = connected_clients(&server).await;
    while after > before && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(20)).await;
        after = connected_clients(&server).await;
    }
    assert!(after <= before, "connected_clients went from {before} to {after}");

    let locks = LockManager::with_options(
        backend.clone(),
        LockOptions::with_ttl(TTL).acquire_timeout(Duration::from_secs(20)),
    )
    .expect("options");
    let waiter = tokio::spawn(async move { locks.lock("busy").await.map(drop) });
    // Released once the waiter is queued (its waits show up as PTTL calls or
    // waiter markers; either way the release frees it).
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        holder.release("busy", &held).await.expect("release"),
        ReleaseOutcome::Released
    );
    waiter.await.expect("join").expect("the waiter acquires on its timer");
    let last = connected_clients(&server).await;
    assert!(last <= before + 1, "connected_clients went from {before} to {last}");
}

/// Issue 11 item 11: the release script deleted the lock and its waiter's
/// marker, then its PUBLISH was refused (NOPERM); the release was reported
/// as a failure that applied nothing, though the lock was gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_publish_is_refused_is_still_released() {
    let server = server_without_channel_rights().await;
    let backend = RedisLuaBuilder::url(user_url(&server))
        .release_notifications(true)
        .build()
        .await
        .expect("connect as u");
    let mine = token();
    assert!(matches!(
        backend.try_acquire("p11n", &mine, TTL).await.expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    // A waiter of another client (with channel rights) left its marker.
    let marker = format!("{}waiting:{{p11n}}", lock_redis_lua::RESERVED_KEY_PREFIX);
    assert!(
        server
            .cmd(&["SET", &marker, "1", "PX", "30000"])
            .await
            .expect("SET")
            .is_ok()
    );
    assert_eq!(
        backend.release("p11n", &mine).await.expect("release"),
        ReleaseOutcome::Released
    );
    assert!(server.cmd(&["GET", "p11n"]).await.expect("GET").is_null());
}
