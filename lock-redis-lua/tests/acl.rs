//! An ACL user without pub/sub channel rights (Redis 7's default for new
//! users, `acl-pubsub-default resetchannels`): release notifications fail,
//! locks keep working (issue 11 items 2 and 11).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::{AcquireOutcome, LockBackend, LockToken, ReleaseOutcome};
use lock_redis_lua::RedisLuaBackend;
use lock_testkit::server::RedisServer;

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

fn token() -> LockToken {
    LockToken::generate().expect("token")
}

/// Issue 11 item 11: the release script deleted the lock and its waiter's
/// marker, then its PUBLISH was refused (NOPERM); the release was reported
/// as a failure that applied nothing, though the lock was gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_publish_is_refused_is_still_released() {
    let server = server_without_channel_rights().await;
    let backend = RedisLuaBackend::builder_url(user_url(&server))
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
