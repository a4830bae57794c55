//! Shared by the test files: servers started once per test binary, and
//! clients of them.
#![allow(dead_code, unused_macros, unused_imports, clippy::expect_used)]

use std::time::Duration;

use lock_core::LockBackend;
use lock_etcd::{EtcdBackend, EtcdBuilder};
use lock_testkit::server::EtcdCluster;
use tokio::sync::OnceCell;

/// One single-member etcd for the whole test binary (a plain child
/// process, killed when the test process exits).
pub async fn single() -> &'static EtcdCluster {
    static SERVER: OnceCell<EtcdCluster> = OnceCell::const_new();
    SERVER
        .get_or_init(|| async { EtcdCluster::single().await.expect("start etcd") })
        .await
}

/// One three-member cluster for the whole test binary.
pub async fn three() -> &'static EtcdCluster {
    static SERVER: OnceCell<EtcdCluster> = OnceCell::const_new();
    SERVER
        .get_or_init(|| async { EtcdCluster::three().await.expect("start etcd") })
        .await
}

/// A client of `endpoints` (one per call: each test has its own runtime).
pub async fn connect(endpoints: Vec<String>) -> EtcdBackend {
    EtcdBuilder::new(endpoints)
        .response_timeout(Duration::from_secs(3))
        .build()
        .await
        .expect("connect to etcd")
}

/// The suites' base TTL on this server: their default (400 ms) raised to
/// what the backend can honour ([`lock_core::Capabilities::min_ttl`]).
pub fn suite_ttl(backend: &EtcdBackend, default: Duration) -> Duration {
    default.max(backend.capabilities().min_ttl)
}

/// A suite of `Suite` over clients of `endpoints`, its base TTL raised to
/// the backend's minimum (one macro, as the suites share no trait).
macro_rules! suite_on {
    ($suite:ty, $endpoints:expr) => {{
        let endpoints: Vec<String> = $endpoints;
        let probe = common::connect(endpoints.clone()).await;
        let suite = <$suite>::new(move || common::connect(endpoints.clone()));
        let ttl = common::suite_ttl(&probe, suite.ttl);
        suite.ttl(ttl)
    }};
}
pub(crate) use suite_on;
