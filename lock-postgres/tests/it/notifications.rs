//! Release notifications: `LISTEN` on a direct connection wakes a waiter
//! at the release, long before its timer; also when the pool goes through
//! PgBouncer in transaction mode and the listener connects directly. A
//! release nobody waits for notifies nobody; a grant to a process that
//! waited for the key notifies at its release. In fair mode a release
//! wakes the queue's head only, also when it comes while the head's
//! attempt is in flight. The suites pass with notifications on (the
//! default).
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::{LockBackend, LockToken};

use lock_core::raw::FairWaiter;

use lock_core::{AcquireOutcome, ReleaseOutcome};
use lock_postgres::PostgresBackend;
use lock_testkit::LockSuite;
use lock_testkit::server::{PgBouncer, PostgresServer};
use tokio::sync::OnceCell;

async fn servers() -> &'static (PostgresServer, PgBouncer) {
    static BOTH: OnceCell<(PostgresServer, PgBouncer)> = OnceCell::const_new();
    BOTH.get_or_init(|| async {
        let server = PostgresServer::start().await.expect("start postgres");
        let bouncer = PgBouncer::start(&server).await.expect("start pgbouncer");
        (server, bouncer)
    })
    .await
}

async fn notified_direct() -> PostgresBackend {
    PostgresBackend::builder(&servers().await.0.url())
        .expect("url")
        .release_notifications(true)
        .build()
        .await
        .expect("connect")
}

/// As [`notified_direct`], in a schema of its own: its channel carries the
/// notifications of the test that uses it alone.
async fn notified_in(schema: &str) -> PostgresBackend {
    PostgresBackend::builder(&servers().await.0.url())
        .expect("url")
        .schema(schema)
        .release_notifications(true)
        .build()
        .await
        .expect("connect")
}

/// The pool through PgBouncer, the listener direct.
async fn notified_bounced() -> PostgresBackend {
    let (server, bouncer) = servers().await;
    PostgresBackend::builder(&bouncer.url())
        .expect("url")
        .listen_url(server.url())
        .build()
        .await
        .expect("connect")
}

/// A waiter whose timer is a minute wakes at the release (the bound is a
/// liveness bound, far below the timer, not a timing assertion).
async fn a_release_wakes_the_waiter(backend: PostgresBackend, key: &str) {
    assert!(backend.capabilities().release_notifications);
    let holder = LockToken::generate().expect("token");
    let ttl = Duration::from_secs(60);
    assert!(matches!(
        backend.try_acquire(key, &holder, ttl).await.expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    // The waiter's attempt finds the key held: it marks the lease as
    // waited for, which is what makes the release notify.
    let attempt = backend
        .try_acquire(key, &LockToken::generate().expect("token"), ttl)
        .await
        .expect("attempt");
    assert!(matches!(attempt, AcquireOutcome::Held { .. }), "{attempt:?}");
    let waiter = backend.clone();
    let key_owned = key.to_owned();
    let waiting = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        waiter.wait_for_release(&key_owned, Duration::from_secs(60)).await;
        started.elapsed()
    });
    // The LISTEN connection and the waiter are up well before this.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        backend.release(key, &holder).await.expect("release"),
        ReleaseOutcome::Released
    );
    let waited = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("woken by the release, not the 60 s timer")
        .expect("task");
    assert!(waited < Duration::from_secs(30), "{waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_on_a_direct_connection() {
    a_release_wakes_the_waiter(notified_direct().await, "notify:direct").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_when_the_pool_goes_through_pgbouncer() {
    a_release_wakes_the_waiter(notified_bounced().await, "notify:bounced").await;
}

#[tokio::test]
async fn notifications_over_an_application_pool_need_a_listen_url() {
    let config: lock_postgres::tokio_postgres::Config = "host=127.0.0.1 user=x".parse().expect("config");
    let manager = lock_postgres::deadpool_postgres::Manager::new(config, lock_postgres::tokio_postgres::NoTls);
    let pool = lock_postgres::deadpool_postgres::Pool::builder(manager)
        .build()
        .expect("pool");
    let err = PostgresBackend::builder_with_client(pool)
        .release_notifications(true)
        .build()
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("listen_url"), "{err}");
}

/// A session listening on `channel`: its payloads, in commit order.
struct Listener {
    _client: lock_postgres::tokio_postgres::Client,
    payloads: tokio::sync::mpsc::UnboundedReceiver<String>,
    pump: tokio::task::JoinHandle<()>,
}

impl Listener {
    async fn start(url: &str, channel: &str) -> Listener {
        use futures::StreamExt;
        use lock_postgres::tokio_postgres::{AsyncMessage, NoTls, connect};
        let (client, mut connection) = connect(url, NoTls).await.expect("listener");
        let (tx, payloads) = tokio::sync::mpsc::unbounded_channel();
        let pump = tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(Ok(message)) = messages.next().await {
                if let AsyncMessage::Notification(n) = message {
                    let _ = tx.send(n.payload().to_owned());
                }
            }
        });
        client
            .batch_execute(&format!("LISTEN \"{channel}\""))
            .await
            .expect("LISTEN");
        Listener {
            _client: client,
            payloads,
            pump,
        }
    }

    async fn next(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(20), self.payloads.recv())
            .await
            .expect("a notification")
            .expect("the listener is up")
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.pump.abort();
    }
}

/// A release that nobody waits for sends no notification (a commit that
/// notifies holds a database-wide lock while it flushes): the first one
/// the channel carries is the release of a key a waiter tried, although
/// the quiet key was released first. A grant to a process that waited for
/// the key lately starts marked, so its release notifies too (a waiter
/// whose wake-up came before its wait began has no other).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_releases_someone_waits_for_notify() {
    let server = &servers().await.0;
    let backend = notified_in("notify_quiet").await;
    let mut listener = Listener::start(&server.url(), &backend.lock_statements().channel).await;
    let ttl = Duration::from_secs(60);
    let acquire = |key: &'static str| {
        let backend = backend.clone();
        async move {
            let token = LockToken::generate().expect("token");
            let got = backend.try_acquire(key, &token, ttl).await.expect("acquire");
            (got, token)
        }
    };
    let release = |key: &'static str, token: LockToken| {
        let backend = backend.clone();
        async move {
            let got = backend.release(key, &token).await.expect("release");
            assert_eq!(got, ReleaseOutcome::Released, "{key}");
        }
    };
    // Nobody waits for the quiet key; a waiter tries the busy one.
    let (got, quiet) = acquire("notify:quiet").await;
    assert!(matches!(got, AcquireOutcome::Acquired(_)), "{got:?}");
    release("notify:quiet", quiet).await;
    let (got, busy) = acquire("notify:busy").await;
    assert!(matches!(got, AcquireOutcome::Acquired(_)), "{got:?}");
    let (refused, _) = acquire("notify:busy").await;
    assert!(matches!(refused, AcquireOutcome::Held { .. }), "{refused:?}");
    release("notify:busy", busy).await;
    assert_eq!(listener.next().await, "knotify:busy");

    // This process waited for the busy key: its next grant starts marked.
    backend.wait_for_release("notify:busy", Duration::from_millis(1)).await;
    let (got, after_wait) = acquire("notify:busy").await;
    assert!(matches!(got, AcquireOutcome::Acquired(_)), "{got:?}");
    let (got, quiet) = acquire("notify:quiet").await;
    assert!(matches!(got, AcquireOutcome::Acquired(_)), "{got:?}");
    release("notify:quiet", quiet).await;
    release("notify:busy", after_wait).await;
    assert_eq!(listener.next().await, "knotify:busy");
}

/// A release that names a fair waiter the head of its queue is sent to the
/// head's process alone (its inbox), not to every listening process: the
/// schema's channel carries only the marker released after it, and the
/// head, in another process than the holder, wakes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_release_wakes_the_head_in_its_process_alone() {
    let server = &servers().await.0;
    let holder_side = notified_in("notify_inbox").await;
    let head_side = notified_in("notify_inbox").await;
    let mut listener = Listener::start(&server.url(), &holder_side.lock_statements().channel).await;
    let key = "notify:fair-inbox";
    let ttl = Duration::from_secs(60);
    let holder = LockToken::generate().expect("token");
    assert!(matches!(
        holder_side.try_acquire(key, &holder, ttl).await.expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    let head = FairWaiter::new(LockToken::generate().expect("token"), Duration::from_secs(60));
    let got = head_side
        .try_acquire_fair(key, &LockToken::generate().expect("token"), ttl, &head)
        .await
        .expect("attempt");
    assert!(matches!(got, AcquireOutcome::Held { .. }), "{got:?}");
    // The LISTEN connections are up well before this.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        holder_side.release(key, &holder).await.expect("release"),
        ReleaseOutcome::Released
    );
    tokio::time::timeout(
        Duration::from_secs(20),
        head_side.wait_fair(key, &head, Duration::from_secs(60)),
    )
    .await
    .expect("the head wakes on the release, not on its 60 s timer");
    // A broadcast after it: the first payload on the schema's channel.
    let marker = "notify:fair-inbox-marker";
    let marker_holder = LockToken::generate().expect("token");
    assert!(matches!(
        holder_side
            .try_acquire(marker, &marker_holder, ttl)
            .await
            .expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    let refused = head_side
        .try_acquire(marker, &LockToken::generate().expect("token"), ttl)
        .await
        .expect("attempt");
    assert!(matches!(refused, AcquireOutcome::Held { .. }), "{refused:?}");
    assert_eq!(
        holder_side.release(marker, &marker_holder).await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_eq!(listener.next().await, format!("k{marker}"));
}

/// Two fair waiters queue behind a holder; the release comes after the
/// head's attempt and before its wait (the race of a hot key). The head's
/// wait ends at once, on the wake-up kept since its attempt; the waiter
/// behind it is not woken (its wait runs on after the head's ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_fair_head_only_even_between_its_attempt_and_its_wait() {
    let backend = notified_direct().await;
    let key = "notify:fair-head";
    let ttl = Duration::from_secs(60);
    let claim = Duration::from_secs(60);
    let holder = LockToken::generate().expect("token");
    assert!(matches!(
        backend.try_acquire(key, &holder, ttl).await.expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    let head = FairWaiter::new(LockToken::generate().expect("token"), claim);
    let behind = FairWaiter::new(LockToken::generate().expect("token"), claim);
    for waiter in [&head, &behind] {
        let token = LockToken::generate().expect("token");
        let got = backend
            .try_acquire_fair(key, &token, ttl, waiter)
            .await
            .expect("attempt");
        assert!(matches!(got, AcquireOutcome::Held { .. }), "{got:?}");
    }
    let behind_waits = {
        let backend = backend.clone();
        tokio::spawn(async move { backend.wait_fair(key, &behind, Duration::from_secs(60)).await })
    };
    // The LISTEN connection is up well before this.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        backend.release(key, &holder).await.expect("release"),
        ReleaseOutcome::Released
    );
    // The notification arrives while the head is not waiting yet.
    tokio::time::sleep(Duration::from_millis(500)).await;
    tokio::time::timeout(
        Duration::from_secs(20),
        backend.wait_fair(key, &head, Duration::from_secs(60)),
    )
    .await
    .expect("the head wakes on the release it missed, not on its 60 s timer");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!behind_waits.is_finished(), "the waiter behind the head was woken");
    behind_waits.abort();
    let token = LockToken::generate().expect("token");
    let got = backend
        .try_acquire_fair(key, &token, ttl, &head)
        .await
        .expect("attempt");
    assert!(matches!(got, AcquireOutcome::Acquired(_)), "{got:?}");
}

mod suites_with_notifications {
    use super::*;
    lock_testkit::lock_conformance!(real, async { LockSuite::new(notified_bounced) });
    mod fair {
        use super::*;
        lock_testkit::fair_conformance!(real, async { LockSuite::new(notified_direct) });
    }
}
