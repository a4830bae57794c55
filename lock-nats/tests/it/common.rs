//! Shared by the test files: servers started once per test binary, and
//! clients of them.
#![allow(dead_code, unused_macros, unused_imports, clippy::expect_used)]

use std::time::Duration;

use lock_core::LockBackend;
use lock_nats::NatsBackend;
use lock_testkit::server::NatsCluster;
use tokio::sync::OnceCell;

/// One JetStream server for the whole test binary.
pub async fn single() -> &'static NatsCluster {
    static SERVER: OnceCell<NatsCluster> = OnceCell::const_new();
    SERVER
        .get_or_init(|| async { NatsCluster::single().await.expect("start nats") })
        .await
}

/// One three-node JetStream cluster for the whole test binary.
pub async fn three() -> &'static NatsCluster {
    static SERVER: OnceCell<NatsCluster> = OnceCell::const_new();
    SERVER
        .get_or_init(|| async { NatsCluster::three().await.expect("start nats") })
        .await
}

/// The URL of a bucket of `cluster` with as many replicas as it can have.
pub fn url(cluster: &NatsCluster, bucket: &str) -> String {
    format!(
        "{}?bucket={bucket}&replicas={}&response_timeout=3s",
        cluster.url(),
        cluster.replicas()
    )
}

/// A client of `url` (one per call: each test has its own runtime).
pub async fn connect(url: String) -> NatsBackend {
    NatsBackend::connect(&url).await.expect("connect to nats")
}

/// The suites' base TTL here: their default raised to what the backend
/// can honour ([`lock_core::Capabilities::min_ttl`], 1 s).
pub fn suite_ttl(backend: &NatsBackend, default: Duration) -> Duration {
    default.max(backend.capabilities().min_ttl)
}

/// A suite of `Suite` over clients of `url`, its base TTL raised to the
/// backend's minimum.
macro_rules! suite_on {
    ($suite:ty, $url:expr) => {{
        let url: String = $url;
        let probe = common::connect(url.clone()).await;
        let suite = <$suite>::new(move || common::connect(url.clone()));
        let ttl = common::suite_ttl(&probe, suite.ttl);
        suite.ttl(ttl)
    }};
}
pub(crate) use suite_on;
