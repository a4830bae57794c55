//! The schema over its life: a build bounded by the response timeout, a
//! re-created schema that never repeats a token or a version, an earlier
//! release's schema completed in place, and tables that do not keep rows
//! of names nobody holds.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::raw::{PermitRequest, RwLockBackend, SemaphoreBackend};

use lock_core::AcquireOutcome;
use lock_core::{CreateOutcome, Expiry, LockBackend, LockToken, RwMode, VersionedStore};
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

fn fence(outcome: AcquireOutcome) -> u64 {
    match outcome {
        AcquireOutcome::Acquired(lease) => lease.fencing_token.expect("fence").0,
        other => panic!("{other:?}"),
    }
}

/// The schema dropped and re-created by the next build: the fencing tokens
/// and the store's versions it issues are above every earlier one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_schema_never_repeats_a_token_or_version() {
    let server = PostgresServer::start().await.expect("start postgres");
    let backend = PostgresBackend::connect(&server.url()).await.expect("connect");
    let ttl = Duration::from_secs(30);
    let mut top = 0;
    for i in 0..5 {
        let token = LockToken::generate().expect("token");
        top = top.max(fence(
            backend
                .try_acquire(&format!("k{i}"), &token, ttl)
                .await
                .expect("acquire"),
        ));
    }
    let version = match backend.create("v", b"x", Expiry::Keep).await.expect("create") {
        CreateOutcome::Created { version } => version,
        other => panic!("{other:?}"),
    };
    server.psql("DROP SCHEMA verrou CASCADE").await.expect("drop");
    let again = PostgresBackend::connect(&server.url()).await.expect("re-create");
    let token = LockToken::generate().expect("token");
    let next = fence(again.try_acquire("k0", &token, ttl).await.expect("acquire"));
    assert!(next > top, "fence {next} after {top}");
    match again.create("v", b"x", Expiry::Keep).await.expect("create") {
        CreateOutcome::Created { version: v } => assert!(v > version, "version {v} after {version}"),
        other => panic!("{other:?}"),
    }
}

/// A schema made by an earlier release (no `waited` column, no
/// `acquire_marking`), a lease held in it: the next build completes it in
/// place, the lease still held, and a refused attempt marks it as waited
/// for; with `create_schema(false)` the build is refused instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_from_before_the_waited_mark_is_completed_in_place() {
    let server = PostgresServer::start().await.expect("start postgres");
    let old = PostgresBackend::connect(&server.url()).await.expect("connect");
    let ttl = Duration::from_secs(30);
    let holder = LockToken::generate().expect("token");
    fence(old.try_acquire("kept", &holder, ttl).await.expect("acquire"));
    server
        .psql(
            "DROP FUNCTION verrou.acquire_marking(text, bytea, bigint, boolean); \
             ALTER TABLE verrou.locks DROP COLUMN waited",
        )
        .await
        .expect("make the schema an earlier release's");
    let refused = PostgresBackend::builder(&server.url())
        .expect("url")
        .create_schema(false)
        .build()
        .await
        .expect_err("an incomplete schema is refused without create_schema");
    assert!(refused.to_string().contains("schema"), "{refused}");
    let backend = PostgresBackend::connect(&server.url()).await.expect("completed");
    let other = LockToken::generate().expect("token");
    let got = backend.try_acquire("kept", &other, ttl).await.expect("attempt");
    assert!(matches!(got, AcquireOutcome::Held { .. }), "{got:?}");
    let marked = server
        .psql("SELECT waited FROM verrou.locks WHERE key = 'kept'")
        .await
        .expect("psql");
    assert_eq!(marked, "t", "the refused attempt marked the lease");
    assert_eq!(
        backend.release("kept", &holder).await.expect("release"),
        lock_core::ReleaseOutcome::Released
    );
}

async fn count(server: &PostgresServer, table: &str) -> u64 {
    server
        .psql(&format!("SELECT count(*) FROM verrou.{table}"))
        .await
        .expect("count")
        .parse()
        .expect("a number")
}

/// 200 read-write locks and 200 semaphores, each acquired and released:
/// no row of theirs is left in `names` (nor in `holders`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_names_leave_no_rows() {
    let server = PostgresServer::start().await.expect("start postgres");
    let backend = PostgresBackend::connect(&server.url()).await.expect("connect");
    let ttl = Duration::from_secs(30);
    for i in 0..200 {
        let token = LockToken::generate().expect("token");
        let name = format!("rw-{i}");
        backend
            .try_acquire_rw(&name, RwMode::Write, false, &token, ttl)
            .await
            .expect("acquire");
        backend.release_rw(&name, &token).await.expect("release");
        let name = format!("sem-{i}");
        backend
            .acquire_permits(&name, &token, PermitRequest::new(2, 1), ttl)
            .await
            .expect("acquire");
        backend.release_permits(&name, &token).await.expect("release");
    }
    assert_eq!(count(&server, "names").await, 0);
    assert_eq!(count(&server, "holders").await, 0);
}

/// Rows that expired (locks, store keys, queue entries, holders and their
/// names) of keys never used again are swept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_rows_are_swept() {
    let server = PostgresServer::start().await.expect("start postgres");
    let backend = PostgresBackend::connect(&server.url()).await.expect("connect");
    let short = Duration::from_millis(50);
    for i in 0..20 {
        let token = LockToken::generate().expect("token");
        backend
            .try_acquire(&format!("l{i}"), &token, short)
            .await
            .expect("acquire");
        backend
            .create(&format!("v{i}"), b"x", Expiry::After(short))
            .await
            .expect("create");
        backend
            .try_acquire_rw(&format!("rw{i}"), RwMode::Read, false, &token, short)
            .await
            .expect("acquire");
    }
    server
        .psql("INSERT INTO verrou.queue SELECT 'q' || i, '\\x00', i, clock_timestamp() FROM generate_series(1, 20) i")
        .await
        .expect("queue rows");
    tokio::time::sleep(Duration::from_millis(200)).await;
    backend.sweep().await.expect("sweep");
    for table in ["locks", "kv", "queue", "holders", "names"] {
        assert_eq!(count(&server, table).await, 0, "{table}");
    }
}
