//! Safety rules of the Tair backend (issue 11), against real servers with
//! the Tair module: fencing tokens never go back, a clean-up release never
//! overtakes the acquire it cleans up, and with replica acknowledgement a
//! renewal counts only once replicas have it.

#![allow(clippy::expect_used, clippy::panic)] // test helpers

use crate::common;

use std::time::Duration;

use lock_core::{LockBackend, LockManager, LockOptions, LockToken, Replication};

use lock_core::{AcquireOutcome, RenewOutcome};
use lock_tair::{OnShortfall, ReplicaAck, TairBackend};
use lock_testkit::server::{RedisServer, ReplicatedPair};

/// Generous bound for anything a loaded machine should finish well within.
const PATIENCE: Duration = Duration::from_secs(20);

async fn fenced_acquire(backend: &TairBackend, key: &str, ttl: Duration) -> lock_core::Result<(LockToken, u64)> {
    let token = LockToken::generate()?;
    match backend.try_acquire(key, &token, ttl).await? {
        AcquireOutcome::Acquired(lease) => Ok((token, lease.fencing_token.expect("fencing is on").0)),
        other => panic!("{key} should be free, got {other:?}"),
    }
}

/// Tokens 1..5, then a restart without data: the Lua backend's rule
/// `max(counter + 1, server time in µs)` keeps the next token above them.
#[tokio::test]
async fn fencing_tokens_keep_increasing_after_a_restart_without_data() {
    let server = common::tair_server().await;
    let backend = common::connect(common::builder(&server.url()).fencing(true)).await;
    let ttl = Duration::from_millis(500);
    let mut tokens = Vec::new();
    for _ in 0..5 {
        let (token, fence) = fenced_acquire(&backend, "fenced", ttl).await.expect("acquire");
        backend.release("fenced", &token).await.expect("release");
        tokens.push(fence);
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "not increasing: {tokens:?}");
    let highest = *tokens.iter().max().expect("five tokens");

    server.restart_empty().await.expect("restart without data");
    let give_up = tokio::time::Instant::now() + PATIENCE;
    let next = loop {
        match fenced_acquire(&backend, "fenced", ttl).await {
            Ok((_, fence)) => break fence,
            Err(e) if tokio::time::Instant::now() < give_up => {
                tracing_free_note(&e);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("no acquire after the restart: {e}"),
        }
    };
    assert!(
        next > highest,
        "the first token after a restart without data ({next}) is not above all earlier ones {tokens:?}"
    );
}

/// The backend reconnects after a restart: errors meanwhile are expected.
fn tracing_free_note(e: &lock_core::Error) {
    eprintln!("acquire after restart failed (reconnecting): {e}");
}

async fn info_field(server: &RedisServer, section: &str, field: &str) -> Option<String> {
    server.info(section).await.ok()?.get(field).cloned()
}

/// `calls` of one command in `INFO commandstats`.
async fn calls(server: &RedisServer, command: &str) -> u64 {
    info_field(server, "commandstats", &format!("cmdstat_{command}"))
        .await
        .and_then(|v| {
            v.split(',')
                .find_map(|kv| kv.strip_prefix("calls=").and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

/// Releases run: `CAD`, or the release script of release notifications
/// (no other script runs in these tests).
async fn releases(server: &RedisServer) -> u64 {
    calls(server, "cad").await + calls(server, "evalsha").await + calls(server, "eval").await
}

async fn wait_for(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let give_up = tokio::time::Instant::now() + PATIENCE;
    while !done().await {
        assert!(tokio::time::Instant::now() < give_up, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One write connection for WAITs and no replica, so every WAIT blocks for
/// its whole timeout: client A's acquire waits there, client B's `SET NX`
/// queues behind A's WAIT and times out locally. B's manager then cleans
/// up; that clean-up must run after B's `SET NX`, or the `SET NX` lands
/// afterwards and the key stays held by a token nobody owns.
#[tokio::test]
async fn a_cleanup_release_never_overtakes_the_acquire_it_cleans_up() {
    let server = common::tair_server().await;
    let wait = Duration::from_millis(500);
    let backend = common::connect(
        common::builder(&server.url())
            .response_timeout(Duration::from_millis(100))
            .replica_ack(ReplicaAck::new(1, wait))
            .ack_connections(1),
    )
    .await;
    let ttl = Duration::from_secs(5);

    let a = {
        let backend = backend.clone();
        tokio::spawn(async move {
            let token = LockToken::generate().expect("token");
            backend.try_acquire("a", &token, ttl).await
        })
    };
    // A's WAIT is blocking the write connection.
    wait_for("A's WAIT to block", async || {
        info_field(&server, "clients", "blocked_clients").await.as_deref() == Some("1")
    })
    .await;

    let locks = LockManager::with_options(backend.clone(), LockOptions::with_ttl(ttl)).expect("manager");
    let b = locks.try_lock("b").await;
    assert!(
        matches!(&b, Err(e) if e.is_outcome_unknown()),
        "B's SET NX should time out behind A's WAIT: {:?}",
        b.as_ref().map(Option::is_some)
    );
    // A: no replica acknowledged, so it gave its lock back and failed.
    let a = a.await.expect("task A");
    assert!(a.is_err(), "no replica: A's acquire must fail, got {a:?}");

    // Both SETs ran, and both releases (A's and B's clean-up) ran.
    wait_for("both SET NX and both releases to run", async || {
        calls(&server, "set").await >= 2 && releases(&server).await >= 2
    })
    .await;
    let exists = server.cmd(&["EXISTS", "b"]).await.expect("EXISTS");
    assert_eq!(
        exists.as_int(),
        Some(0),
        "key b is held by a token nobody owns: the clean-up ran before B's SET NX"
    );
}

/// The server stops (SIGSTOP) while `lock()` sends its `SET NX`: the
/// acquire times out locally and the manager cleans up while both commands
/// wait in the server's socket buffers. Once it resumes, the clean-up must
/// still run after the `SET NX`.
#[tokio::test]
async fn a_cleanup_release_sent_while_the_server_is_paused_runs_after_the_acquire() {
    let server = common::tair_server().await;
    let backend = common::connect(
        common::builder(&server.url())
            .response_timeout(Duration::from_millis(100))
            // Long enough that fred keeps the paused connection (it gives up
            // on one after twice the command timeout plus this).
            .replica_ack(ReplicaAck::new(1, Duration::from_secs(3))),
    )
    .await;
    let locks =
        LockManager::with_options(backend.clone(), LockOptions::with_ttl(Duration::from_secs(5))).expect("manager");
    for round in 0..3 {
        let key = format!("paused-{round}");
        let (sets, cads) = (calls(&server, "set").await, releases(&server).await);
        server.pause().expect("pause");
        let attempt = locks.try_lock(&key).await;
        // Give the manager's clean-up time to be sent (it is spawned).
        tokio::time::sleep(Duration::from_millis(200)).await;
        server.resume().expect("resume");
        assert!(
            matches!(&attempt, Err(e) if e.is_outcome_unknown()),
            "round {round}: the acquire should time out on the paused server: {:?}",
            attempt.as_ref().map(Option::is_some)
        );
        wait_for("the SET NX and its clean-up to run", async || {
            calls(&server, "set").await > sets && releases(&server).await > cads
        })
        .await;
        let exists = server.cmd(&["EXISTS", key.as_str()]).await.expect("EXISTS");
        assert_eq!(
            exists.as_int(),
            Some(0),
            "round {round}: {key} is held by a token nobody owns: the clean-up ran before the SET NX"
        );
    }
}

/// A renewal the replica did not acknowledge must not count: a failover
/// would promote a replica with the older expiry.
#[tokio::test]
async fn renewals_count_only_once_replicas_acknowledged_them() {
    renewals_count_only_once_confirmed(OnShortfall::ReleaseAndFail).await;
}

/// `MarkUnconfirmed` lets an acquire through as unconfirmed, but a renewal
/// must still not move the deadline past what a promoted replica knows.
#[tokio::test]
async fn renewals_count_only_once_confirmed_even_when_acquires_may_be_unconfirmed() {
    renewals_count_only_once_confirmed(OnShortfall::MarkUnconfirmed).await;
}

async fn renewals_count_only_once_confirmed(on_shortfall: OnShortfall) {
    let pair = ReplicatedPair::start(common::tair()).await.expect("primary + replica");
    let backend = common::connect(
        // Generous: a loaded machine's replica must not fall short by itself.
        common::builder(&pair.primary().url())
            .replica_ack(ReplicaAck::new(1, Duration::from_secs(2)).on_shortfall(on_shortfall)),
    )
    .await;
    let ttl = Duration::from_secs(5);
    let token = LockToken::generate().expect("token");
    match backend.try_acquire("renewed", &token, ttl).await.expect("acquire") {
        AcquireOutcome::Acquired(lease) => {
            assert!(matches!(lease.replication, Replication::Confirmed { .. }), "{lease:?}");
        }
        other => panic!("should be free: {other:?}"),
    }
    assert_eq!(
        backend.renew("renewed", &token, ttl).await.expect("renew"),
        RenewOutcome::Renewed,
        "the replica is up: the renewal is confirmed"
    );

    pair.replica().pause().expect("pause the replica");
    let single = backend.renew("renewed", &token, ttl).await;
    let many = backend.renew_many(&[("renewed", &token)], ttl).await;
    pair.replica().resume().expect("resume the replica");

    assert!(
        matches!(&single, Err(e) if e.is_outcome_unknown()),
        "a renewal no replica acknowledged was reported as {single:?}"
    );
    assert!(
        matches!(many.as_slice(), [Err(e)] if e.is_outcome_unknown()),
        "a batched renewal no replica acknowledged was reported as {many:?}"
    );
    wait_for("the replica to answer again", async || {
        matches!(backend.renew("renewed", &token, ttl).await, Ok(RenewOutcome::Renewed))
    })
    .await;
}
