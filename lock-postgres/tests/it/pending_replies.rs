//! Statements whose reply did not come (a response timeout, or the caller's
//! future dropped): their connection never serves another caller while the
//! reply is pending, and the clean-up of an unanswered grant takes effect
//! only after that grant finished on the server, for every kind.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::raw::{ElectionBackend, MultiLockBackend, PermitRequest, RwLockBackend, SemaphoreBackend};

use lock_core::{AcquireOutcome, ReleaseOutcome};
use lock_core::{LockBackend, LockToken, Result, RwMode};
use lock_postgres::PostgresBackend;
use lock_postgres::tokio_postgres::{self, Client, NoTls};
use lock_testkit::server::PostgresServer;

const TTL: Duration = Duration::from_secs(30);

/// A session that holds, in an open transaction, the lock the grant of
/// `kind` on `name` waits for.
async fn blocker(server: &PostgresServer, kind: Kind, name: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(&server.url(), NoTls).await.expect("connect");
    tokio::spawn(connection);
    let sql = match kind {
        Kind::Mutex | Kind::Multi => {
            format!("BEGIN; SELECT pg_advisory_xact_lock(hashtext('\"verrou\".locks'), hashtext('{name}'))")
        }
        Kind::Election => {
            format!("BEGIN; SELECT pg_advisory_xact_lock(hashtext('\"verrou\".leaders'), hashtext('{name}'))")
        }
        Kind::Rw => format!("BEGIN; SELECT verrou.lock_name('w', '{name}')"),
        Kind::Semaphore => format!("BEGIN; SELECT verrou.lock_name('s', '{name}')"),
    };
    client.batch_execute(&sql).await.expect("block");
    client
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Mutex,
    Rw,
    Semaphore,
    Multi,
    Election,
}

async fn grant(b: &PostgresBackend, kind: Kind, name: &str, token: &LockToken) -> Result<AcquireOutcome> {
    match kind {
        Kind::Mutex => b.try_acquire(name, token, TTL).await,
        Kind::Rw => b.try_acquire_rw(name, RwMode::Write, false, token, TTL).await,
        Kind::Semaphore => b.acquire_permits(name, token, PermitRequest::new(1, 1), TTL).await,
        Kind::Multi => b.try_acquire_all(&[name], token, TTL).await,
        Kind::Election => b.try_lead(name, token, b"me", TTL).await,
    }
}

async fn cleanup(b: &PostgresBackend, kind: Kind, name: &str, token: &LockToken) -> Result<ReleaseOutcome> {
    match kind {
        Kind::Mutex => b.release(name, token).await,
        Kind::Rw => b.release_rw(name, token).await,
        Kind::Semaphore => b.release_permits(name, token).await,
        Kind::Multi => b.release_all(&[name], token).await,
        Kind::Election => b.resign(name, token).await,
    }
}

/// A grant that times out while it waits in the server, then its clean-up
/// (as the manager sends it), then the wait ends: the grant runs, and the
/// key must not stay held by its token (which nobody owns) for the TTL.
async fn a_cleanup_is_not_overtaken_by_its_grant(kind: Kind) {
    let server = PostgresServer::start().await.expect("start postgres");
    let backend = PostgresBackend::builder(&server.url())
        .expect("url")
        .response_timeout(Duration::from_millis(300))
        .build()
        .await
        .expect("connect");
    let name = "overtaken";
    let block = blocker(&server, kind, name).await;
    let token = LockToken::generate().expect("token");
    let err = grant(&backend, kind, name, &token).await.expect_err("the grant waits");
    assert!(err.is_outcome_unknown(), "{kind:?}: {err}");
    // The clean-up: it may wait for the grant (and time out), but must not
    // take effect before it.
    let _ = cleanup(&backend, kind, name, &token).await;
    block.batch_execute("COMMIT").await.expect("unblock");
    let other = LockToken::generate().expect("token");
    let checker = PostgresBackend::connect(&server.url()).await.expect("connect");
    for _ in 0..50 {
        if let Ok(AcquireOutcome::Acquired(_)) = grant(&checker, kind, name, &other).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{kind:?}: the key stayed held by the cleaned-up token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutex_cleanup_is_not_overtaken_by_its_grant() {
    a_cleanup_is_not_overtaken_by_its_grant(Kind::Mutex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rw_cleanup_is_not_overtaken_by_its_grant() {
    a_cleanup_is_not_overtaken_by_its_grant(Kind::Rw).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_cleanup_is_not_overtaken_by_its_grant() {
    a_cleanup_is_not_overtaken_by_its_grant(Kind::Semaphore).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_cleanup_is_not_overtaken_by_its_grant() {
    a_cleanup_is_not_overtaken_by_its_grant(Kind::Multi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_cleanup_is_not_overtaken_by_its_grant() {
    a_cleanup_is_not_overtaken_by_its_grant(Kind::Election).await;
}

/// An acquire blocked in the server is dropped by its caller: with one
/// pooled connection, the next acquire (of a free, unrelated key) must not
/// get the connection that still waits for the dropped one's reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_statement_s_connection_serves_nobody_else() {
    let server = PostgresServer::start().await.expect("start postgres");
    let backend = PostgresBackend::builder(&server.url())
        .expect("url")
        .pool_size(1)
        .response_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("connect");
    let block = blocker(&server, Kind::Mutex, "blocked").await;
    let token = LockToken::generate().expect("token");
    let dropped = tokio::time::timeout(Duration::from_millis(200), backend.try_acquire("blocked", &token, TTL)).await;
    assert!(dropped.is_err(), "the acquire waits in the server: {dropped:?}");
    let free = LockToken::generate().expect("token");
    let outcome = backend.try_acquire("free", &free, TTL).await;
    assert!(matches!(outcome, Ok(AcquireOutcome::Acquired(_))), "{outcome:?}");
    block.batch_execute("ROLLBACK").await.expect("unblock");
}
