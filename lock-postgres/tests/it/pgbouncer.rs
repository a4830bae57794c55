//! The lock and versioned conformance suites through PgBouncer in
//! transaction pooling mode (a few server connections shared by every
//! client: consecutive statements of one client land on different server
//! connections). Nothing of the backend's is session state, so it passes
//! as on a direct connection.
#![allow(clippy::expect_used, missing_docs)]

use lock_postgres::PostgresBackend;
use lock_testkit::server::{PgBouncer, PostgresServer};
use lock_testkit::{LockSuite, VersionedSuite};
use tokio::sync::OnceCell;

/// One server and one PgBouncer for the whole file.
async fn bouncer_url() -> String {
    static BOTH: OnceCell<(PostgresServer, PgBouncer)> = OnceCell::const_new();
    BOTH.get_or_init(|| async {
        let server = PostgresServer::start().await.expect("start postgres");
        let bouncer = PgBouncer::start(&server).await.expect("start pgbouncer");
        (server, bouncer)
    })
    .await
    .1
    .url()
}

async fn backend(url: String) -> PostgresBackend {
    PostgresBackend::connect(&url).await.expect("connect through pgbouncer")
}

async fn lock_suite() -> LockSuite {
    let url = bouncer_url().await;
    LockSuite::new(move || backend(url.clone()))
}

async fn versioned_suite() -> VersionedSuite {
    let url = bouncer_url().await;
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

/// PgBouncer really runs in transaction mode (its admin console says so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bouncer_is_in_transaction_mode() {
    let url = bouncer_url().await;
    let admin = url.replace("/postgres", "/pgbouncer");
    let (client, connection) = lock_postgres::tokio_postgres::connect(&admin, lock_postgres::tokio_postgres::NoTls)
        .await
        .expect("admin console");
    tokio::spawn(connection);
    let mut mode = None;
    for message in client.simple_query("SHOW CONFIG").await.expect("SHOW CONFIG") {
        if let lock_postgres::tokio_postgres::SimpleQueryMessage::Row(row) = message
            && row.get(0) == Some("pool_mode")
        {
            mode = row.get(1).map(str::to_owned);
        }
    }
    assert_eq!(mode.as_deref(), Some("transaction"));
}
