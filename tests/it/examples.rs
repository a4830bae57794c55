//! Every example runs here: the backend examples against servers the test
//! starts (their `main` only picks the URLs from the command line or the
//! environment), the in-process ones as the binaries `cargo test` builds. An
//! example that stops working fails here, not in a reader's terminal.
#![cfg(all(feature = "redis-lua", feature = "tair", feature = "redlock"))]
#![allow(clippy::expect_used, clippy::panic)]

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

#[cfg(feature = "postgres")]
#[allow(dead_code, missing_docs)]
#[path = "../../examples/postgres.rs"]
mod postgres_example;

#[cfg(feature = "etcd")]
#[allow(dead_code, missing_docs)]
#[path = "../../examples/etcd.rs"]
mod etcd_example;

#[cfg(feature = "nats")]
#[allow(dead_code, missing_docs)]
#[path = "../../examples/nats.rs"]
mod nats_example;

use std::path::PathBuf;
use std::process::Command;

use crate::support::workspace;

/// The examples this file runs, by file name.
const RUN_HERE: [&str; 8] = [
    "redis_lua",
    "tair",
    "redlock",
    "postgres",
    "etcd",
    "nats",
    "quickstart",
    "observability",
];

#[test]
fn every_example_runs_here() {
    let mut found: Vec<String> = std::fs::read_dir(workspace().join("examples"))
        .expect("examples/")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".rs").map(str::to_owned))
        .collect();
    found.sort();
    let mut listed: Vec<String> = RUN_HERE.iter().map(|s| (*s).to_owned()).collect();
    listed.sort();
    assert_eq!(found, listed, "a new example needs a test here");
}

/// An example binary of this build (`cargo test` builds the examples next to
/// the test binaries' `deps/`), run to completion.
fn run_example_binary(name: &str) -> String {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let path: PathBuf = profile_dir.join("examples").join(name);
    let out = Command::new(&path)
        .env_remove("RUST_LOG")
        .output()
        .unwrap_or_else(|e| panic!("run {} (built by `cargo test --all-features`): {e}", path.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn quickstart_runs_and_names_every_backend() {
    let out = run_example_binary("quickstart");
    for backend in ["redis-lua", "tair", "redlock", "postgres", "etcd", "nats"] {
        assert!(out.contains(backend), "the quickstart names {backend}:\n{out}");
    }
}

#[cfg(feature = "metrics")]
#[test]
fn observability_runs() {
    let out = run_example_binary("observability");
    assert!(out.contains("Prometheus"), "{out}");
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_example_runs() {
    let server = lock_testkit::server::PostgresServer::start()
        .await
        .expect("start postgres");
    postgres_example::run(&server.url())
        .await
        .expect("the postgres example");
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_example_runs() {
    let cluster = lock_testkit::server::EtcdCluster::single().await.expect("start etcd");
    etcd_example::run(&cluster.url()).await.expect("the etcd example");
}

#[cfg(feature = "nats")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_example_runs() {
    let server = lock_testkit::server::NatsCluster::single().await.expect("start nats");
    nats_example::run(&server.url()).await.expect("the nats example");
}

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
