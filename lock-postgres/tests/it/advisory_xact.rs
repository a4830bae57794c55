//! Transaction-scoped advisory locks on the caller's own transaction
//! (`try_xact_lock`, `xact_lock`): held to commit or rollback, a second
//! transaction is refused or waits, and the wait is bounded.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::{AcquireOutcome, Error, LockBackend, LockToken};
use lock_postgres::tokio_postgres::{Client, NoTls};
use lock_postgres::{AdvisoryBackend, try_xact_lock, xact_lock};
use lock_testkit::server::PostgresServer;

async fn client(url: &str) -> Client {
    let (client, connection) = lock_postgres::tokio_postgres::connect(url, NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
}

/// Commit and rollback both free the lock; while a transaction holds it a
/// second transaction's try is refused and its wait times out with
/// `Error::Timeout` (its transaction aborted), and a waiter is granted once
/// the holder commits. The advisory backend's lock of the same key is
/// excluded too (one id space).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_and_rollback_free_the_lock_and_a_second_transaction_waits() {
    let server = PostgresServer::start().await.expect("start postgres");
    let (mut a, mut b) = (client(&server.url()).await, client(&server.url()).await);
    let backend = AdvisoryBackend::connect(&server.url()).await.expect("advisory");
    for commit in [true, false] {
        let tx = a.transaction().await.expect("begin");
        assert!(try_xact_lock(&tx, "xact").await.expect("try"));
        {
            let other = b.transaction().await.expect("begin");
            assert!(
                !try_xact_lock(&other, "xact").await.expect("try"),
                "held by the first transaction"
            );
            match xact_lock(&other, "xact", Duration::from_millis(200)).await {
                Err(Error::Timeout { key, .. }) => assert_eq!(key, "xact"),
                other => panic!("a bounded wait on a held key: {other:?}"),
            }
            other.rollback().await.expect("rollback the aborted transaction");
        }
        let token = LockToken::generate().expect("token");
        assert!(matches!(
            backend
                .try_acquire("xact", &token, Duration::from_secs(1))
                .await
                .expect("try"),
            AcquireOutcome::Held { .. }
        ));
        if commit {
            tx.commit().await.expect("commit");
        } else {
            tx.rollback().await.expect("rollback");
        }
        let other = b.transaction().await.expect("begin");
        assert!(
            try_xact_lock(&other, "xact").await.expect("try"),
            "freed by the end of the transaction"
        );
        other.rollback().await.expect("rollback");
    }
    // A waiter is granted when the holder commits, and its transaction's
    // own lock_timeout is put back.
    let tx = a.transaction().await.expect("begin");
    xact_lock(&tx, "xact-wait", Duration::from_secs(5)).await.expect("free");
    let waiter = tokio::spawn(async move {
        let other = b.transaction().await.expect("begin");
        other.batch_execute("SET LOCAL lock_timeout = '7s'").await.expect("set");
        xact_lock(&other, "xact-wait", Duration::from_secs(30))
            .await
            .expect("granted at the commit");
        let kept: String = other
            .query_one("SELECT current_setting('lock_timeout')", &[])
            .await
            .expect("read")
            .get(0);
        other.commit().await.expect("commit");
        kept
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    tx.commit().await.expect("commit");
    assert_eq!(waiter.await.expect("waiter"), "7s");
    let tx = a.transaction().await.expect("begin");
    for bad in [Duration::ZERO, Duration::from_micros(10)] {
        assert!(matches!(
            xact_lock(&tx, "xact", bad).await,
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(matches!(try_xact_lock(&tx, "").await, Err(Error::InvalidArgument(_))));
}
