//! The lock kinds reached from `verrou::connect`'s `Backend`: semaphores,
//! elections, read-write and multi-key locks on `memory://` and `redis://`;
//! a typed `Unsupported` from a `redlock://` URL.
#![cfg(all(feature = "memory", feature = "redis-lua", feature = "redlock"))]
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_testkit::server::RedisServer;
use verrou::{Backend, Error, LockOptions};

fn options() -> LockOptions {
    LockOptions::with_ttl(Duration::from_millis(500)).acquire_timeout(Duration::from_secs(5))
}

/// Each kind works through the `Backend`: bounds hold, holders exclude.
async fn every_kind(backend: &Backend) {
    let semaphores = backend.semaphores(options()).expect("semaphores");
    let jobs = semaphores.semaphore("jobs", 2).expect("semaphore");
    let first = jobs.acquire(1).await.expect("permit 1");
    let second = jobs.acquire(1).await.expect("permit 2");
    assert!(jobs.try_acquire(1).await.expect("try").is_none(), "a third permit of 2");
    first.release().await.expect("release");
    let third = jobs.try_acquire(1).await.expect("try").expect("a freed permit");
    drop((second, third));

    let elections = backend.elections(options()).expect("elections");
    let leadership = elections.campaign("leader", b"node-a").await.expect("campaign");
    assert!(
        elections
            .try_campaign("leader", b"node-b")
            .await
            .expect("try")
            .is_none(),
        "two leaders"
    );
    let leader = elections.leader("leader").await.expect("leader").expect("a leader");
    assert_eq!(leader.identity, b"node-a");
    assert_eq!(leadership.term(), leader.term);
    leadership.resign().await.expect("resign");

    let rw = backend.rw_locks(options()).expect("rw locks");
    let reader = rw.read("doc").await.expect("read");
    let other_reader = rw.read("doc").await.expect("a second reader");
    assert!(
        rw.try_lock("doc", verrou::RwMode::Write).await.expect("try").is_none(),
        "a writer among readers"
    );
    drop((reader, other_reader));

    let multi = backend.multi_locks(options()).expect("multi-key locks");
    let both = multi.lock(&["a", "b"]).await.expect("lock a, b");
    assert!(
        multi.try_lock(&["b", "c"]).await.expect("try").is_none(),
        "b held twice"
    );
    both.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinds_from_a_memory_url() {
    every_kind(&verrou::connect("memory://").await.expect("memory")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinds_from_a_redis_lua_url() {
    let server = RedisServer::start().await.expect("redis-server");
    every_kind(&verrou::connect(&server.url()).await.expect("redis")).await;
    let fenced = verrou::connect(&format!("{}?fencing=true", server.url()))
        .await
        .expect("redis");
    every_kind(&fenced).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_without_a_kind_answers_unsupported() {
    let backend = verrou::connect("redlock://?node=memory://&node=memory://&node=memory://")
        .await
        .expect("redlock");
    let unsupported = |r: Result<(), Error>, kind: &str| match r {
        Err(Error::Unsupported { what, .. }) => assert!(what.contains(kind), "{what}"),
        other => panic!("{kind}: expected Unsupported, got {other:?}"),
    };
    unsupported(backend.semaphores(options()).map(drop), "semaphores");
    unsupported(backend.elections(options()).map(drop), "election");
    unsupported(backend.rw_locks(options()).map(drop), "read-write");
    unsupported(backend.multi_locks(options()).map(drop), "multi-key");
}
