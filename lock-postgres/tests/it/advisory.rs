//! The advisory mode's own behaviour on real servers: locks of many keys on
//! a few multiplexed sessions (or one session per held lock), the loss signal when the session ends (terminated, its connection
//! cut, the server restarted), a cancelled acquire leaving nothing held (a
//! cancelled release freeing only its own lock),
//! the URL's checks and the refusal of a transaction pooler.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::raw::{BackendConfig, Connector, SchemeTable};
use lock_core::{AcquireOutcome, Error, LockBackend, LockManager, LockOptions, LockToken, LossReason};
use lock_core::{ReleaseOutcome, RenewOutcome};
use lock_postgres::{AdvisoryBackend, PostgresBackend, PostgresConfig, PostgresConnector, PostgresMode};
use lock_testkit::server::{PgBouncer, PostgresServer, TcpProxy};
use tokio::time::Instant;

const TTL: Duration = Duration::from_millis(600);
/// Liveness bound of the waits below (never a timing assertion).
const BOUND: Duration = Duration::from_secs(20);

async fn advisory(url: &str) -> AdvisoryBackend {
    AdvisoryBackend::builder(url)
        .expect("url")
        .response_timeout(Duration::from_millis(800))
        .build()
        .await
        .expect("connect")
}

fn url_via(proxy: &TcpProxy) -> String {
    format!("postgres://verrou@127.0.0.1:{}/postgres", proxy.port())
}

/// An advisory backend through `proxy` with a pool of two and
/// `multiplexed` sessions, whose calls wait long enough (10 s) for the
/// proxy's added latency.
async fn patient_via(proxy: &TcpProxy, multiplexed: usize) -> AdvisoryBackend {
    AdvisoryBackend::builder(&url_via(proxy))
        .expect("url")
        .pool_size(2)
        .multiplexed_sessions(multiplexed)
        .response_timeout(Duration::from_secs(10))
        .build()
        .await
        .expect("connect")
}

/// Tries `key` with `token` until it is granted (bounded): a reserved id
/// answers `Held` until the server answered its unlock.
async fn acquire_once_free(backend: &AdvisoryBackend, key: &str, token: &LockToken) {
    let give_up = Instant::now() + BOUND;
    loop {
        match backend.try_acquire(key, token, TTL).await.expect("try") {
            AcquireOutcome::Acquired(_) => return,
            _ => assert!(Instant::now() < give_up, "the key stayed reserved"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A direct client of the server, its connection driven in the background.
async fn direct(url: &str) -> lock_postgres::tokio_postgres::Client {
    let (client, connection) = lock_postgres::tokio_postgres::connect(url, lock_postgres::tokio_postgres::NoTls)
        .await
        .expect("direct connection");
    tokio::spawn(connection);
    client
}

/// The server process holding `key`'s advisory lock, if a session does.
async fn holder_pid(client: &lock_postgres::tokio_postgres::Client, key: &str) -> Option<i32> {
    let id = lock_postgres::advisory_key(key);
    client
        .query_opt(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 \
             AND classid = (($1::int8 >> 32) & 4294967295)::oid AND objid = ($1::int8 & 4294967295)::oid",
            &[&id],
        )
        .await
        .expect("pg_locks")
        .map(|row| row.get(0))
}

/// Waits (bounded) until no session holds `key`'s advisory lock; `why` is
/// the failure when one still does at the bound.
async fn until_no_session_holds(admin: &lock_postgres::tokio_postgres::Client, key: &str, why: &str) {
    let give_up = Instant::now() + BOUND;
    while holder_pid(admin, key).await.is_some() {
        assert!(Instant::now() < give_up, "{why}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (bounded) until another client can take `key`.
async fn taken_by_another(url: &str, key: &str) {
    let other = LockManager::new(advisory(url).await).expect("manager");
    let give_up = Instant::now() + BOUND;
    loop {
        if let Some(g) = other.try_lock(key).await.expect("try_lock") {
            assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
            return;
        }
        assert!(Instant::now() < give_up, "{key} was never freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Advisory locks are re-entrant per session: two guards of one manager
/// (one backend, one pool) on one key still exclude each other, because
/// each held lock keeps a session of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_guards_of_one_process_on_one_key_exclude_each_other() {
    let server = PostgresServer::start().await.expect("start postgres");
    let backend = advisory(&server.url()).await;
    let locks =
        LockManager::with_options(backend.clone(), LockOptions::with_ttl(TTL).acquire_timeout(TTL)).expect("manager");
    let first = locks.lock("reentrant").await.expect("lock");
    assert!(locks.try_lock("reentrant").await.expect("try_lock").is_none());
    let err = locks
        .lock("reentrant")
        .await
        .expect_err("a second guard must wait, then time out");
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    // The raw backend too, with another token: refused.
    let token = LockToken::generate().expect("token");
    assert!(matches!(
        backend.try_acquire("reentrant", &token, TTL).await.expect("try"),
        AcquireOutcome::Held { .. }
    ));
    assert_eq!(backend.held_locks(), 1);
    assert_eq!(first.release().await.expect("release"), ReleaseOutcome::Released);
    assert_eq!(backend.held_locks(), 0);
    let second = locks.lock("reentrant").await.expect("free once released");
    assert_eq!(second.release().await.expect("release"), ReleaseOutcome::Released);
}

/// The server terminates the holder's session (`pg_terminate_backend`):
/// the lock ends at once (another client takes it), and the holder learns
/// at its next liveness check: `lost()` fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_backend_fires_the_loss_signal() {
    let server = PostgresServer::start().await.expect("start postgres");
    let locks = LockManager::with_options(advisory(&server.url()).await, LockOptions::with_ttl(TTL)).expect("manager");
    let guard = locks.lock("terminated").await.expect("lock");
    let admin = direct(&server.url()).await;
    let pid = holder_pid(&admin, "terminated")
        .await
        .expect("a session holds the lock");
    let ended: bool = admin
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .expect("terminate")
        .get(0);
    assert!(ended);
    let reason = tokio::time::timeout(BOUND, guard.lost())
        .await
        .expect("lost() must fire");
    assert_eq!(reason, LossReason::NotOwner);
    assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Missing);
    taken_by_another(&server.url(), "terminated").await;
}

/// The holder's connection fails (the network between them is reset): the
/// liveness check fails, `lost()` fires, and the server ends the session,
/// so the key is free for another client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_connection_fires_the_loss_signal() {
    let server = PostgresServer::start().await.expect("start postgres");
    let proxy = TcpProxy::start(server.addr()).await.expect("proxy");
    let locks =
        LockManager::with_options(advisory(&url_via(&proxy)).await, LockOptions::with_ttl(TTL)).expect("manager");
    let guard = locks.lock("cut").await.expect("lock");
    proxy.cut_all();
    let reason = tokio::time::timeout(BOUND, guard.lost())
        .await
        .expect("lost() must fire");
    assert_eq!(reason, LossReason::NotOwner);
    taken_by_another(&server.url(), "cut").await;
}

/// A server restart ends every session and its locks: the holder's
/// `lost()` fires, and after the restart the key is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_fires_the_loss_signal() {
    let server = PostgresServer::start().await.expect("start postgres");
    let locks = LockManager::with_options(advisory(&server.url()).await, LockOptions::with_ttl(TTL)).expect("manager");
    let guard = locks.lock("restart").await.expect("lock");
    server.kill().expect("kill");
    server.restart().await.expect("restart");
    let reason = tokio::time::timeout(BOUND, guard.lost())
        .await
        .expect("lost() must fire");
    assert!(
        matches!(reason, LossReason::NotOwner | LossReason::DeadlinePassed),
        "{reason:?}"
    );
    drop(guard);
    taken_by_another(&server.url(), "restart").await;
}

/// An acquire cancelled after the server granted it (its reply held back by
/// the proxy's latency) leaves nothing held, on a session of its own
/// (closed, never pooled) as on a multiplexed one (the id unlocked there
/// by the runtime, then free for the next try).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_acquire_leaves_nothing_held() {
    let server = PostgresServer::start().await.expect("start postgres");
    let admin = direct(&server.url()).await;
    for multiplexed in [0, 1] {
        let proxy = TcpProxy::start(server.addr()).await.expect("proxy");
        let backend = patient_via(&proxy, multiplexed).await;
        let token = LockToken::generate().expect("token");
        proxy.set_latency(Duration::from_millis(300));
        let give_up = Instant::now() + BOUND;
        tokio::select! {
            r = backend.try_acquire("cancelled", &token, TTL) => panic!("the delayed grant answered: {r:?}"),
            () = async {
                while holder_pid(&admin, "cancelled").await.is_none() {
                    assert!(Instant::now() < give_up, "the grant never reached the server");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            } => {}
        }
        proxy.set_latency(Duration::ZERO);
        assert_eq!(backend.held_locks(), 0, "a cancelled grant is not recorded");
        until_no_session_holds(
            &admin,
            "cancelled",
            &format!("the cancelled grant's session still holds the key ({multiplexed} multiplexed)"),
        )
        .await;
        let held: i64 = admin
            .query_one("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'", &[])
            .await
            .expect("pg_locks")
            .get(0);
        assert_eq!(
            held, 0,
            "a session still holds an advisory lock ({multiplexed} multiplexed)"
        );
        // The manager's clean-up release of the token finds nothing.
        assert_eq!(
            backend.release("cancelled", &token).await.expect("release"),
            ReleaseOutcome::Missing
        );
        // And the key can be taken again through the same backend (on a
        // multiplexed session, once the unlock's reply freed the id).
        let again = LockToken::generate().expect("token");
        acquire_once_free(&backend, "cancelled", &again).await;
        assert_eq!(
            backend.release("cancelled", &again).await.expect("release"),
            ReleaseOutcome::Released
        );
    }
}

/// A release cancelled before the server answered (the session's first
/// unlock, so the cancellation may come while its statement is still being
/// prepared; every reply held back by the proxy's latency) on a multiplexed
/// session: the key ends up free, its id is taken again only after the
/// clean-up unlock was answered, and a second release of the cancelled
/// token (the manager's clean-up) never frees the next holder's lock on the
/// same session. Fails when the dropped release frees the id at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_release_on_a_multiplexed_session_frees_only_its_own_lock() {
    let server = PostgresServer::start().await.expect("start postgres");
    let admin = direct(&server.url()).await;
    let proxy = TcpProxy::start(server.addr()).await.expect("proxy");
    let backend = patient_via(&proxy, 1).await;
    let first = LockToken::generate().expect("token");
    assert!(matches!(
        backend.try_acquire("unlock", &first, TTL).await.expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    let session = holder_pid(&admin, "unlock").await.expect("held on the server");
    proxy.set_latency(Duration::from_millis(300));
    tokio::select! {
        r = backend.release("unlock", &first) => panic!("the delayed unlock answered: {r:?}"),
        () = tokio::time::sleep(Duration::from_millis(100)) => {}
    }
    assert_eq!(backend.held_locks(), 0, "a cancelled release is not held any more");
    // The next holder, on the same session, tried at once: while the
    // unlock is in flight its id stays reserved (a grant queued behind the
    // unlock would be taken back by the clean-up unlock sent after it).
    let next = LockToken::generate().expect("token");
    acquire_once_free(&backend, "unlock", &next).await;
    proxy.set_latency(Duration::ZERO);
    // Time for a stray unlock to land, if the release had left one behind
    // the grant (none does: the id was free only once the unlock answered).
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        holder_pid(&admin, "unlock").await,
        Some(session),
        "one multiplexed session"
    );
    assert_ne!(
        backend.release("unlock", &first).await.expect("release"),
        ReleaseOutcome::Released,
        "the cancelled token released the next holder's lock"
    );
    assert_eq!(
        holder_pid(&admin, "unlock").await,
        Some(session),
        "the next holder still holds the key"
    );
    assert_eq!(
        backend.release("unlock", &next).await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_eq!(holder_pid(&admin, "unlock").await, None);
}

/// Locks of many keys share the multiplexed sessions. The server ends one
/// of those sessions: every lock it held is lost (`lost()` fires, the keys
/// are free for others), the locks on the other session stay held, and
/// the backend opens a new session for its next tries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_multiplexed_session_loses_exactly_its_locks() {
    let server = PostgresServer::start().await.expect("start postgres");
    let backend = advisory(&server.url()).await;
    let locks = LockManager::with_options(backend.clone(), LockOptions::with_ttl(TTL)).expect("manager");
    let admin = direct(&server.url()).await;
    let mut guards = Vec::new();
    for i in 0..8 {
        let key = format!("shared-{i}");
        let guard = locks.lock(&key).await.expect("lock");
        let pid = holder_pid(&admin, &key).await.expect("a session holds it");
        guards.push((key, pid, guard));
    }
    let pids: std::collections::BTreeSet<i32> = guards.iter().map(|(_, pid, _)| *pid).collect();
    assert_eq!(
        pids.len(),
        2,
        "eight keys on the two default multiplexed sessions: {pids:?}"
    );
    let victim = guards[0].1;
    let ended: bool = admin
        .query_one("SELECT pg_terminate_backend($1)", &[&victim])
        .await
        .expect("terminate")
        .get(0);
    assert!(ended);
    for (key, pid, guard) in guards {
        if pid == victim {
            let reason = tokio::time::timeout(BOUND, guard.lost())
                .await
                .expect("lost() must fire");
            assert_eq!(reason, LossReason::NotOwner, "{key}");
            assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Missing);
            // Taken again through the same manager, on a new session.
            let again = locks.lock(&key).await.expect("lock again");
            assert_ne!(holder_pid(&admin, &key).await, Some(victim));
            assert_eq!(again.release().await.expect("release"), ReleaseOutcome::Released);
        } else {
            assert_eq!(holder_pid(&admin, &key).await, Some(pid), "{key}");
            assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Released);
        }
    }
    assert_eq!(backend.held_locks(), 0);
}

/// Another client's token is answered from pg_locks: `HeldByOther` while a
/// session holds the key, `Missing` when none does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_token_is_answered_from_pg_locks() {
    let server = PostgresServer::start().await.expect("start postgres");
    let (a, b) = (advisory(&server.url()).await, advisory(&server.url()).await);
    let (mine, theirs) = (
        LockToken::generate().expect("token"),
        LockToken::generate().expect("token"),
    );
    assert!(matches!(
        a.try_acquire("foreign", &mine, TTL).await.expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    assert_eq!(
        b.renew("foreign", &mine, TTL).await.expect("renew"),
        RenewOutcome::HeldByOther
    );
    assert_eq!(
        b.release("foreign", &mine).await.expect("release"),
        ReleaseOutcome::HeldByOther
    );
    assert_eq!(
        a.release("foreign", &mine).await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_eq!(
        b.release("foreign", &theirs).await.expect("release"),
        ReleaseOutcome::Missing
    );
    assert_eq!(
        b.renew("foreign", &theirs, TTL).await.expect("renew"),
        RenewOutcome::Missing
    );
}

/// Fencing tokens (opt-in) grow across holders and across a crash of the
/// server (the sequence's value is flushed before a grant is confirmed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_grow_across_a_crash() {
    let server = PostgresServer::builder()
        .setting("synchronous_commit", "off")
        .start()
        .await
        .expect("start postgres");
    let url = format!("{}?mode=advisory&fencing=true", server.url());
    let backend = advisory(&url).await;
    assert!(backend.capabilities().fencing_tokens);
    let mut last = 0;
    for _ in 0..3 {
        let token = LockToken::generate().expect("token");
        let AcquireOutcome::Acquired(lease) = backend.try_acquire("fenced", &token, TTL).await.expect("acquire") else {
            panic!("free key");
        };
        let fence = lease.fencing_token.expect("fencing on").0;
        assert!(fence > last, "{fence} after {last}");
        last = fence;
        assert_eq!(
            backend.release("fenced", &token).await.expect("release"),
            ReleaseOutcome::Released
        );
    }
    server.kill().expect("kill");
    server.restart().await.expect("restart");
    let after = advisory(&url).await;
    let token = LockToken::generate().expect("token");
    let AcquireOutcome::Acquired(lease) = after.try_acquire("fenced", &token, TTL).await.expect("acquire") else {
        panic!("free after the restart");
    };
    let fence = lease.fencing_token.expect("fencing on").0;
    assert!(
        fence > last,
        "a fencing token went backwards after a crash: {fence} after {last}"
    );
    // Without fencing, none is claimed or issued.
    let plain = advisory(&server.url()).await;
    assert!(!plain.capabilities().fencing_tokens);
    assert!(!plain.capabilities().lease_expires);
}

/// `mode=advisory` on the URL contract: the connector builds the advisory
/// backend (locks only); lease-only parameters and unknown modes are typed
/// errors; the lease backend's own builder refuses the mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_url_selects_and_checks_the_mode() {
    let config = PostgresConfig::from_url("postgres://app@db/app?mode=advisory&fencing=true").expect("parse");
    assert_eq!((config.mode, config.fencing), (PostgresMode::Advisory, Some(true)));
    let default = PostgresConfig::from_url("postgres://app@db/app").expect("parse");
    assert_eq!(default.mode, PostgresMode::Lease);
    for (url, says) in [
        (
            "postgres://app@db/app?mode=advisory&release_notifications=true",
            "release_notifications",
        ),
        (
            "postgres://app@db/app?listen_url=postgres%3A%2F%2Fapp%40db%2Fapp&mode=advisory",
            "listen_url",
        ),
        ("postgres://app@db/app?mode=rows", "mode must be"),
        ("postgres://app@db/app?fencing=false", "fencing=false"),
        ("postgres://app@db/app?mode=advisory&fencing=maybe", "fencing"),
        (
            "postgres://app@db/app?mode=advisory&pool_size=2&multiplexed_sessions=2",
            "below pool_size",
        ),
        ("postgres://app@db/app?multiplexed_sessions=1", "mode=advisory"),
        (
            "postgres://app@db/app?mode=advisory&multiplexed_sessions=-1",
            "multiplexed_sessions",
        ),
    ] {
        match PostgresConfig::from_url(url) {
            Err(Error::InvalidArgument(m)) => assert!(m.contains(says), "{url}: {m}"),
            other => panic!("{url}: {other:?}"),
        }
    }
    let refused = PostgresBackend::builder("postgres://app@db/app?mode=advisory").map(drop);
    assert!(
        matches!(refused, Err(Error::InvalidArgument(ref m)) if m.contains("AdvisoryBackend")),
        "{refused:?}"
    );

    let server = PostgresServer::start().await.expect("start postgres");
    let table = SchemeTable::new("test", Vec::new());
    let url = format!("{}?mode=advisory", server.url());
    PostgresConnector.check(&url, &table).expect("check");
    let connected = PostgresConnector.connect(&url, &table).await.expect("connect");
    assert_eq!(connected.locks.capabilities().name, "postgres-advisory");
    assert!(connected.store.is_none() && connected.semaphores.is_none());
    let lease = PostgresConnector.connect(&server.url(), &table).await.expect("connect");
    assert_eq!(lease.locks.capabilities().name, "postgres");
}

/// Through PgBouncer in transaction mode two clients share server
/// sessions, where advisory locks are re-entrant: the build refuses it with
/// `Unsupported`, naming the pooler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_pooler_is_refused() {
    let server = PostgresServer::start().await.expect("start postgres");
    let bouncer = PgBouncer::start(&server).await.expect("start pgbouncer");
    let url = format!("{}?mode=advisory", bouncer.url());
    match AdvisoryBackend::connect(&url).await {
        Err(Error::Unsupported { what, .. }) => assert!(what.contains("PgBouncer"), "{what}"),
        other => panic!("through transaction pooling: {other:?}"),
    }
    // A direct connection passes the same check.
    advisory(&server.url()).await;
}

/// Each held lock keeps one pooled connection: with a pool of one, a second
/// key cannot be tried while the first is held (a typed backend error that
/// names `pool_size`), and can once it is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_bounds_the_locks_held_at_once() {
    let server = PostgresServer::start().await.expect("start postgres");
    let backend = AdvisoryBackend::builder(&server.url())
        .expect("url")
        .pool_size(1)
        .response_timeout(Duration::from_millis(300))
        .build()
        .await
        .expect("connect");
    let (a, b) = (
        LockToken::generate().expect("token"),
        LockToken::generate().expect("token"),
    );
    assert!(matches!(
        backend.try_acquire("bound-a", &a, TTL).await.expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    match backend.try_acquire("bound-b", &b, TTL).await {
        Err(e @ Error::Backend { .. }) => assert!(e.to_string().contains("pool_size"), "{e}"),
        other => panic!("every connection holds a lock: {other:?}"),
    }
    assert_eq!(
        backend.release("bound-a", &a).await.expect("release"),
        ReleaseOutcome::Released
    );
    assert!(matches!(
        backend.try_acquire("bound-b", &b, TTL).await.expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    assert_eq!(
        backend.release("bound-b", &b).await.expect("release"),
        ReleaseOutcome::Released
    );
}

/// The grant's statement takes the lock, then draws the fencing token; a
/// role that may not use the sequence gets the typed refusal, and the lock
/// the failed statement took (a session-level advisory lock outlives its
/// statement's rollback) is unlocked again on its multiplexed session: the
/// key is free for others, and no session holds an advisory lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_refused_by_the_fencing_sequence_leaves_nothing_held() {
    let server = PostgresServer::start().await.expect("start postgres");
    let fenced = format!("{}?mode=advisory&fencing=true", server.url());
    // The owner creates the schema and its sequence.
    let owner = advisory(&fenced).await;
    let admin = direct(&server.url()).await;
    admin
        .batch_execute(
            "CREATE ROLE limited LOGIN; GRANT USAGE ON SCHEMA verrou TO limited; \
             REVOKE ALL ON SEQUENCE verrou.fence_seq FROM limited",
        )
        .await
        .expect("a role without rights on the sequence");
    let limited_url = format!(
        "postgres://limited@127.0.0.1:{}/postgres?mode=advisory&fencing=true",
        server.port()
    );
    let limited = advisory(&limited_url).await;
    let token = LockToken::generate().expect("token");
    match limited.try_acquire("acl", &token, TTL).await {
        Err(Error::Refused { reason, .. }) => assert_eq!(reason, lock_core::RefusalReason::PermissionDenied),
        other => panic!("nextval without rights: {other:?}"),
    }
    assert_eq!(limited.held_locks(), 0);
    until_no_session_holds(&admin, "acl", "the refused grant's lock stayed on its session").await;
    let other = LockToken::generate().expect("token");
    assert!(matches!(
        owner.try_acquire("acl", &other, TTL).await.expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    assert_eq!(
        owner.release("acl", &other).await.expect("release"),
        ReleaseOutcome::Released
    );
}

/// The builder keeps a pool connection for the statements that are not
/// grants: as many multiplexed sessions as the pool has connections is a
/// typed error, and so is the URL's form of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multiplexed_sessions_must_leave_a_pool_connection() {
    let server = PostgresServer::start().await.expect("start postgres");
    let built = AdvisoryBackend::builder(&server.url())
        .expect("url")
        .pool_size(2)
        .multiplexed_sessions(2)
        .build()
        .await;
    match built {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("multiplexed_sessions"), "{m}"),
        other => panic!("two multiplexed sessions in a pool of two: {other:?}"),
    }
    let one = AdvisoryBackend::builder(&server.url())
        .expect("url")
        .pool_size(2)
        .multiplexed_sessions(1)
        .build()
        .await
        .expect("one multiplexed session in a pool of two");
    let token = LockToken::generate().expect("token");
    assert!(matches!(
        one.try_acquire("bounds", &token, TTL).await.expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    assert_eq!(
        one.release("bounds", &token).await.expect("release"),
        ReleaseOutcome::Released
    );
}
