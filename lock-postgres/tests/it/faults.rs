//! Faults on a real PostgreSQL server: killed and restarted (fsync on),
//! paused (SIGSTOP), its connections terminated (`pg_terminate_backend`),
//! and the client's network cut (the harness's TCP proxy).
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::{LockBackend, LockManager, LockOptions, LockToken};

use lock_core::{ReleaseOutcome, RenewOutcome};
use lock_postgres::PostgresBackend;
use lock_testkit::server::{PostgresServer, TcpProxy};

const TTL: Duration = Duration::from_millis(500);
/// Liveness bound for a loss signal past the local deadline (a loaded
/// machine fires timers late); never a timing assertion.
const SLACK: Duration = Duration::from_secs(5);

async fn backend(url: &str) -> PostgresBackend {
    PostgresBackend::builder(url)
        .expect("url")
        .response_timeout(Duration::from_millis(400))
        .build()
        .await
        .expect("connect")
}

fn url_via(proxy: &TcpProxy) -> String {
    format!("postgres://verrou@127.0.0.1:{}/postgres", proxy.port())
}

/// A confirmed lease survives a crash: after kill and restart the row is
/// still there (another client is refused, the owner releases it), and
/// fencing tokens keep growing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_lock_survives_kill_and_restart() {
    let server = PostgresServer::start().await.expect("start postgres");
    let a = backend(&server.url()).await;
    let owner = LockToken::generate().expect("token");
    let long = Duration::from_secs(60);
    let lease = match a.try_acquire("crash", &owner, long).await.expect("acquire") {
        lock_core::AcquireOutcome::Acquired(lease) => lease,
        other => panic!("{other:?}"),
    };
    let fence = lease.fencing_token.expect("fence");
    server.kill().expect("kill");
    server.restart().await.expect("restart");

    let b = backend(&server.url()).await;
    let other = LockToken::generate().expect("token");
    let held = b
        .try_acquire("crash", &other, long)
        .await
        .expect("acquire after restart");
    assert!(matches!(held, lock_core::AcquireOutcome::Held { .. }), "{held:?}");
    // The first client's pool had only dead connections: they are replaced.
    let mut released = None;
    for _ in 0..5 {
        match a.release("crash", &owner).await {
            Ok(r) => {
                released = Some(r);
                break;
            }
            Err(e) => assert!(e.is_backend(), "{e}"),
        }
    }
    assert_eq!(released, Some(ReleaseOutcome::Released));
    match b.try_acquire("crash", &other, long).await.expect("acquire") {
        lock_core::AcquireOutcome::Acquired(lease) => {
            assert!(
                lease.fencing_token.expect("fence") > fence,
                "fencing tokens only grow across a crash"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// A paused server: the holder's loss is signalled by its local deadline;
/// after resume the backend works again and the lease has expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_costs_the_lease_by_the_deadline_and_then_recovers() {
    let server = PostgresServer::start().await.expect("start postgres");
    let locks = LockManager::with_options(backend(&server.url()).await, LockOptions::with_ttl(TTL)).expect("manager");
    let guard = locks.lock("paused").await.expect("lock");
    let deadline = guard.deadline();
    server.pause().expect("pause");
    tokio::time::timeout(TTL + SLACK, guard.lost())
        .await
        .expect("loss signalled");
    assert!(tokio::time::Instant::now() >= deadline, "lost before the deadline");
    server.resume().expect("resume");
    let other = LockManager::with_options(
        backend(&server.url()).await,
        LockOptions::with_ttl(TTL).acquire_timeout(Duration::from_secs(10)),
    )
    .expect("manager");
    let next = other.lock("paused").await.expect("the lease expired on the server");
    next.release().await.expect("release");
    drop(guard);
    // The first client recovers too (its stalled connections were closed).
    let again = locks
        .lock_opts(
            "paused",
            &locks.options().clone().acquire_timeout(Duration::from_secs(10)),
        )
        .await;
    again.expect("lock after resume").release().await.expect("release");
}

/// `pg_terminate_backend` on every connection: the renewer's next statement
/// fails at most once per connection, new connections replace them, and the
/// lease is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_connections_are_replaced_and_the_lease_kept() {
    let server = PostgresServer::start().await.expect("start postgres");
    let a = backend(&server.url()).await;
    let token = LockToken::generate().expect("token");
    let ttl = Duration::from_secs(5);
    assert!(matches!(
        a.try_acquire("terminated", &token, ttl).await.expect("acquire"),
        lock_core::AcquireOutcome::Acquired(_)
    ));
    let killed = server
        .psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = 'verrou' AND pid <> pg_backend_pid()")
        .await
        .expect("terminate");
    assert_ne!(killed, "0", "the backend's connections were terminated");
    let mut renewed = false;
    for _ in 0..20 {
        match a.renew("terminated", &token, ttl).await {
            Ok(RenewOutcome::Renewed) => {
                renewed = true;
                break;
            }
            Ok(other) => panic!("the lease was lost: {other:?}"),
            Err(e) => assert!(e.is_backend(), "{e}"),
        }
    }
    assert!(renewed, "no renewal succeeded after the terminations");
    assert_eq!(
        a.release("terminated", &token).await.expect("release"),
        ReleaseOutcome::Released
    );
}

/// The client's network cut: its loss is signalled by its local deadline,
/// another client takes the key once the server's expiry passed, and when
/// the network is back the stale holder can neither renew nor release it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_client_loses_by_its_deadline_and_cannot_touch_the_next_holder() {
    let server = PostgresServer::start().await.expect("start postgres");
    let proxy = TcpProxy::start(server.addr()).await.expect("proxy");
    let cut = backend(&url_via(&proxy)).await;
    let locks = LockManager::with_options(cut.clone(), LockOptions::with_ttl(TTL)).expect("manager");
    let guard = locks.lock("cut").await.expect("lock");
    proxy.set_blackhole(true);
    tokio::time::timeout(TTL + SLACK, guard.lost())
        .await
        .expect("loss signalled");

    let other = LockManager::with_options(
        backend(&server.url()).await,
        LockOptions::with_ttl(Duration::from_secs(30)).acquire_timeout(Duration::from_secs(10)),
    )
    .expect("manager");
    let next = other.lock("cut").await.expect("the cut holder's lease expired");
    proxy.set_blackhole(false);
    proxy.cut_all();
    drop(guard);
    let stale = LockToken::generate().expect("token");
    // Whatever the stale side sends now finds another owner.
    for _ in 0..5 {
        if let Ok(outcome) = cut.release("cut", &stale).await {
            assert_eq!(outcome, ReleaseOutcome::HeldByOther);
            break;
        }
    }
    // The dropped guard's background release (its own token) touched
    // nothing either: the new holder still renews.
    tokio::time::sleep(Duration::from_millis(200)).await;
    next.extend(Duration::from_secs(30))
        .await
        .expect("the new holder kept its lock");
    next.release().await.expect("release");
}
