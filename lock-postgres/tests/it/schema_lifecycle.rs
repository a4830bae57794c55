//! The schema over its life: a build bounded by the response timeout.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_postgres::PostgresBackend;
use lock_postgres::tokio_postgres::{self, NoTls};
use lock_testkit::server::PostgresServer;

/// Another session holds the schema-creation lock: a build with a 300 ms
/// response timeout fails with a typed error instead of waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_is_bounded_by_the_response_timeout() {
    let server = PostgresServer::start().await.expect("start postgres");
    let (client, connection) = tokio_postgres::connect(&server.url(), NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
        .batch_execute("BEGIN; SELECT pg_advisory_xact_lock(hashtext('verrou schema verrou'))")
        .await
        .expect("take the schema lock");
    let build = PostgresBackend::builder(&server.url())
        .expect("url")
        .response_timeout(Duration::from_millis(300))
        .build();
    // A liveness bound, far above the timeout: not a timing assertion.
    match tokio::time::timeout(Duration::from_secs(20), build).await {
        Ok(Err(e)) => assert!(e.is_backend(), "{e}"),
        Ok(Ok(_)) => panic!("built while the schema could not be created"),
        Err(_) => panic!("the build ignored its response timeout"),
    }
    client.batch_execute("ROLLBACK").await.expect("release");
    PostgresBackend::connect(&server.url()).await.expect("builds once free");
}
