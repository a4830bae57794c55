//! The lock conformance suites on the advisory mode (`mode=advisory`), with
//! and without fencing tokens, on one real PostgreSQL server shared by every
//! case of this file. The suites check what `lease_expires = false` says
//! (the lock lives with its session) where the lease backends expire.
#![allow(clippy::expect_used, missing_docs)]

use lock_postgres::AdvisoryBackend;
use lock_testkit::LockSuite;
use lock_testkit::server::PostgresServer;
use tokio::sync::OnceCell;

/// One server for the whole file.
async fn server_url() -> String {
    static SERVER: OnceCell<PostgresServer> = OnceCell::const_new();
    SERVER
        .get_or_init(|| async { PostgresServer::start().await.expect("start postgres") })
        .await
        .url()
}

async fn lock_suite(params: &'static str) -> LockSuite {
    let url = format!("{}?mode=advisory{params}", server_url().await);
    LockSuite::new(move || {
        let url = url.clone();
        async move { AdvisoryBackend::connect(&url).await.expect("connect") }
    })
}

lock_testkit::lock_conformance!(real, lock_suite(""));

mod fair {
    use super::*;
    lock_testkit::fair_conformance!(real, lock_suite(""));
}

mod fenced {
    use super::*;
    lock_testkit::lock_conformance!(real, lock_suite("&fencing=true"));
}

/// Every held lock on a session of its own (no multiplexed sessions).
mod own_sessions {
    use super::*;
    lock_testkit::lock_conformance!(real, lock_suite("&multiplexed_sessions=0"));
}
