//! `observe` by pub/sub on the Lua backend with release notifications: a
//! campaign won and a resignation are seen at once, not at the next poll.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use std::time::Duration;

use futures::StreamExt;
use lock_core::ElectionManager;
use lock_redis_lua::RedisLuaBackend;
use lock_testkit::server::RedisServer;
use tokio::time::Instant;

/// Calls of `command` so far.
async fn calls(server: &RedisServer, command: &str) -> u64 {
    server.command_calls(command).await.expect("INFO commandstats")
}

/// Waits (at most 5 s) until someone is subscribed to the election's
/// channel, so that the change below goes through the publication; an
/// observer that never subscribes fails the test on the change not seen.
async fn until_subscribed(server: &RedisServer, channel: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n = server.cmd(&["PUBSUB", "NUMSUB", channel]).await.unwrap();
        if n.as_array().and_then(|a| a.get(1)?.as_int()) == Some(1) {
            return;
        }
        if Instant::now() > deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The observer polls every 60 s; each change must reach it within 10 s
/// (in practice milliseconds), and each was announced by one PUBLISH.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_change_is_observed_without_waiting_for_the_poll_interval() {
    let (poll, seen_within) = (Duration::from_secs(60), Duration::from_secs(10));
    let server = RedisServer::start().await.expect("start");
    let observer = ElectionManager::new(RedisLuaBackend::connect(&server.url()).await.unwrap()).unwrap();
    let campaigner = ElectionManager::new(RedisLuaBackend::connect(&server.url()).await.unwrap()).unwrap();
    let mut changes = Box::pin(observer.observe("scheduler", poll));
    let first = tokio::time::timeout(seen_within, changes.next())
        .await
        .expect("first item");
    assert_eq!(first.map(|r| r.expect("read")), Some(None), "nobody leads yet");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(change) = changes.next().await {
            if tx.send(change.expect("the server is up")).is_err() {
                return;
            }
        }
    });
    let channel = "verrou:leader:verrou:lua:leader:{scheduler}";
    until_subscribed(&server, channel).await;
    let published = calls(&server, "publish").await;
    let leadership = campaigner.campaign("scheduler", b"node-a").await.expect("campaign");
    let change = tokio::time::timeout(seen_within, rx.recv())
        .await
        .expect("the new leader is observed before the next poll")
        .expect("the stream goes on");
    assert_eq!(change.map(|l| l.identity), Some(b"node-a".to_vec()));
    assert_eq!(calls(&server, "publish").await, published + 1, "the win was published");
    until_subscribed(&server, channel).await;
    leadership.resign().await.expect("resign");
    let change = tokio::time::timeout(seen_within, rx.recv())
        .await
        .expect("the resignation is observed before the next poll")
        .expect("the stream goes on");
    assert_eq!(change, None);
    assert_eq!(
        calls(&server, "publish").await,
        published + 2,
        "the resignation was published"
    );
}
