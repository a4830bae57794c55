//! Shared test support: servers with the project's Tair module (or the one
//! named by `VERROU_TAIR_MODULE`), and backends over them.

#![allow(dead_code)] // each test binary uses a subset

use std::sync::Arc;
use std::time::Duration;

use lock_tair::{TairBackend, TairBuilder};
use lock_testkit::server::{RedisCluster, RedisServer, RedisServerBuilder};

/// A server builder that loads the Tair module.
pub fn tair() -> RedisServerBuilder {
    RedisServer::builder().tair_module()
}

/// A fresh single server with the Tair module.
pub async fn tair_server() -> RedisServer {
    tair()
        .start()
        .await
        .unwrap_or_else(|e| panic!("cannot start redis-server with the Tair module: {e}"))
}

/// A backend over `url` with a short command timeout (tests).
pub fn builder(url: &str) -> TairBuilder {
    TairBuilder::url(url).response_timeout(Duration::from_millis(500))
}

/// Connect or fail the test with the error.
pub async fn connect(builder: TairBuilder) -> TairBackend {
    builder
        .build()
        .await
        .unwrap_or_else(|e| panic!("cannot connect the Tair backend: {e}"))
}

/// The URL a cluster client is seeded with.
pub fn cluster_url(cluster: &RedisCluster) -> String {
    cluster.seed_url().replacen("redis://", "redis-cluster://", 1)
}

/// The shared cluster of this test binary. Tests hold clones; at exit the
/// last reference is dropped here, which kills the nodes and removes their
/// directories.
static CLUSTER: tokio::sync::Mutex<Option<Arc<RedisCluster>>> = tokio::sync::Mutex::const_new(None);

extern "C" fn drop_shared_cluster() {
    if let Ok(mut shared) = CLUSTER.try_lock() {
        shared.take();
    }
}

/// One 3-master cluster (no replicas) with the Tair module on every node,
/// shared by the tests of one test binary (cluster creation takes seconds).
pub async fn shared_cluster() -> Arc<RedisCluster> {
    let mut shared = CLUSTER.lock().await;
    if let Some(cluster) = shared.as_ref() {
        return cluster.clone();
    }
    let cluster = RedisCluster::start(3, 0, tair())
        .await
        .unwrap_or_else(|e| panic!("cannot start a Redis Cluster with the Tair module: {e}"));
    let cluster = Arc::new(cluster);
    *shared = Some(cluster.clone());
    // SAFETY: registers a plain `extern "C" fn()` to run at process exit.
    unsafe {
        libc::atexit(drop_shared_cluster);
    }
    cluster
}
