//! The lock and versioned conformance suites on one real PostgreSQL server,
//! shared by every case of this file (each case uses its own keys).
#![allow(clippy::expect_used, missing_docs)]

use lock_postgres::PostgresBackend;
use lock_testkit::server::PostgresServer;
use lock_testkit::{LockSuite, VersionedSuite};
use tokio::sync::OnceCell;

/// One server for the whole file (a plain child process, killed when the
/// test process exits).
async fn server_url() -> String {
    static SERVER: OnceCell<PostgresServer> = OnceCell::const_new();
    SERVER
        .get_or_init(|| async { PostgresServer::start().await.expect("start postgres") })
        .await
        .url()
}

async fn backend(url: String) -> PostgresBackend {
    PostgresBackend::connect(&url).await.expect("connect")
}

async fn lock_suite() -> LockSuite {
    let url = server_url().await;
    LockSuite::new(move || backend(url.clone()))
}

async fn versioned_suite() -> VersionedSuite {
    let url = server_url().await;
    VersionedSuite::new(move || backend(url.clone()))
}

lock_testkit::lock_conformance!(real, lock_suite());

mod fair {
    use super::*;
    lock_testkit::fair_conformance!(real, lock_suite());
}

mod versioned {
    use super::*;
    lock_testkit::versioned_conformance!(real, versioned_suite());
}
