//! Server settings a user may set that must not break the guarantees: the
//! default isolation level (per server, database, role or URL) and
//! `synchronous_commit = off`.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::raw::{PermitRequest, RwLockBackend, SemaphoreBackend};

use lock_core::AcquireOutcome;
use lock_core::{LockBackend, LockToken, RwMode};
use lock_postgres::PostgresBackend;
use lock_postgres::tokio_postgres::{self, Client, NoTls};
use lock_testkit::server::PostgresServer;

const ROUNDS: usize = 20;

async fn server_with(name: &str, value: &str) -> PostgresServer {
    PostgresServer::builder()
        .setting(name, value)
        .start()
        .await
        .expect("start postgres")
}

/// A session holding the row lock of a kind's name in an open transaction
/// (the name's row created first), so that the acquires sent meanwhile all
/// start, and take their snapshot, before the first of them is granted.
async fn hold_name(server: &PostgresServer, kind: char, name: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(&server.url(), NoTls).await.expect("connect");
    tokio::spawn(connection);
    // Two strings: one string's statements before a BEGIN join its transaction.
    client
        .batch_execute(&format!(
            "INSERT INTO verrou.names (kind, name) VALUES ('{kind}', '{name}') ON CONFLICT DO NOTHING"
        ))
        .await
        .expect("the name's row");
    client
        .batch_execute(&format!("BEGIN; SELECT verrou.lock_name('{kind}', '{name}')"))
        .await
        .expect("hold the name");
    client
}

/// Two writers racing for a read-write lock, then three one-permit
/// acquires of a two-permit semaphore, each from its own connection, queued
/// behind a session holding the name, on a server whose default isolation
/// is `level`: never two writers, never more permits than the size (the
/// kinds' functions decided on a snapshot taken before the name's row lock
/// under REPEATABLE READ).
async fn exclusion_holds_under(level: &str) {
    let server = server_with("default_transaction_isolation", level).await;
    let backends = [
        PostgresBackend::connect(&server.url()).await.expect("connect"),
        PostgresBackend::connect(&server.url()).await.expect("connect"),
        PostgresBackend::connect(&server.url()).await.expect("connect"),
    ];
    let ttl = Duration::from_secs(30);
    // Lets the racing acquires reach the server and wait there (no
    // assertion depends on it).
    let queue_up = Duration::from_millis(100);
    for round in 0..ROUNDS {
        let name = format!("rw-{round}");
        let tokens = [
            LockToken::generate().expect("token"),
            LockToken::generate().expect("token"),
        ];
        let hold = hold_name(&server, 'w', &name).await;
        let race = async {
            tokio::join!(
                backends[0].try_acquire_rw(&name, RwMode::Write, false, &tokens[0], ttl),
                backends[1].try_acquire_rw(&name, RwMode::Write, false, &tokens[1], ttl),
            )
        };
        let unblock = async {
            tokio::time::sleep(queue_up).await;
            hold.batch_execute("COMMIT").await.expect("commit");
        };
        let ((a, b), ()) = tokio::join!(race, unblock);
        let granted = [a, b]
            .into_iter()
            .filter(|r| matches!(r, Ok(AcquireOutcome::Acquired(_))))
            .count();
        assert!(granted <= 1, "{level}: round {round}: {granted} writers");

        let name = format!("sem-{round}");
        let request = PermitRequest::new(2, 1);
        let tokens = [
            LockToken::generate().expect("token"),
            LockToken::generate().expect("token"),
            LockToken::generate().expect("token"),
        ];
        let hold = hold_name(&server, 's', &name).await;
        let race = async {
            tokio::join!(
                backends[0].acquire_permits(&name, &tokens[0], request, ttl),
                backends[1].acquire_permits(&name, &tokens[1], request, ttl),
                backends[2].acquire_permits(&name, &tokens[2], request, ttl),
            )
        };
        let unblock = async {
            tokio::time::sleep(queue_up).await;
            hold.batch_execute("COMMIT").await.expect("commit");
        };
        let ((a, b, c), ()) = tokio::join!(race, unblock);
        let granted = [a, b, c]
            .into_iter()
            .filter(|r| matches!(r, Ok(AcquireOutcome::Acquired(_))))
            .count();
        assert!(granted <= 2, "{level}: round {round}: {granted} permits of 2");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusion_holds_under_read_committed() {
    exclusion_holds_under("read committed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusion_holds_under_repeatable_read() {
    exclusion_holds_under("repeatable read").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusion_holds_under_serializable() {
    exclusion_holds_under("serializable").await;
}

/// `synchronous_commit = off` on the server (and a WAL writer that waits
/// long, so the loss is certain rather than likely): a lease confirmed
/// before a crash is still there after the restart, and the next fencing
/// token is above the one confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_lease_survives_a_crash_with_synchronous_commit_off() {
    let server = PostgresServer::builder()
        .setting("synchronous_commit", "off")
        .setting("wal_writer_delay", "10000ms")
        .start()
        .await
        .expect("start postgres");
    let a = PostgresBackend::connect(&server.url()).await.expect("connect");
    // Warm the sequence so that its first values were flushed long ago.
    let warm = LockToken::generate().expect("token");
    let long = Duration::from_secs(60);
    a.try_acquire("warm", &warm, long).await.expect("acquire");
    server.psql("CHECKPOINT").await.expect("checkpoint");
    let owner = LockToken::generate().expect("token");
    let fence = match a.try_acquire("crash", &owner, long).await.expect("acquire") {
        AcquireOutcome::Acquired(lease) => lease.fencing_token.expect("fence"),
        other => panic!("{other:?}"),
    };
    server.kill().expect("kill");
    server.restart().await.expect("restart");
    let b = PostgresBackend::connect(&server.url()).await.expect("connect");
    let other = LockToken::generate().expect("token");
    let held = b
        .try_acquire("crash", &other, long)
        .await
        .expect("acquire after restart");
    assert!(
        matches!(held, AcquireOutcome::Held { .. }),
        "the lease confirmed before the crash (fence {fence:?}) was lost: {held:?}"
    );
    match b.try_acquire("after-crash", &other, long).await.expect("acquire") {
        AcquireOutcome::Acquired(lease) => {
            assert!(
                lease.fencing_token.expect("fence") > fence,
                "fencing tokens went backwards"
            );
        }
        other => panic!("{other:?}"),
    }
}
