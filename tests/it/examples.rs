//! The backend examples run against servers the test starts (their `main`
//! only picks the URLs from the environment): an example that stops working
//! fails here, not in a reader's terminal.
#![cfg(all(feature = "redis-lua", feature = "tair", feature = "redlock"))]
#![allow(clippy::expect_used)]

use lock_testkit::server::{Instances, RedisServer};

#[allow(dead_code, missing_docs)] // its `main` is the binary's
#[path = "../../examples/redis_lua.rs"]
mod redis_lua_example;

#[allow(dead_code, missing_docs)]
#[path = "../../examples/tair.rs"]
mod tair_example;

#[allow(dead_code, missing_docs)]
#[path = "../../examples/redlock.rs"]
mod redlock_example;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_lua_example_runs() {
    let server = RedisServer::start().await.expect("start redis-server");
    redis_lua_example::run(server.url())
        .await
        .expect("the redis_lua example");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tair_example_runs() {
    let server = RedisServer::builder()
        .tair_module()
        .start()
        .await
        .expect("start redis-server with the Tair module");
    tair_example::run(server.url()).await.expect("the tair example");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_example_runs() {
    let servers = Instances::start(3, RedisServer::builder())
        .await
        .expect("start 3 redis-servers");
    redlock_example::run(servers.urls()).await.expect("the redlock example");
}
