//! `WAIT` after a reconnect (issue 11, item 16): when the WAIT connection is
//! replaced between a write's reply and its `WAIT`, the `WAIT` runs on a new
//! server-side connection. On a connection that never ran a command, `WAIT`
//! has no write offset and answers at once with every replica counted; the
//! backend must never report that as a confirmation.
//!
//! On redis-server 7.0 a fred reconnect does not open that hole: any command
//! sets the connection's write offset to the primary's current one, and fred
//! sends `PING` (or `HELLO`), `CLIENT ID` and `INFO server` on every new
//! connection before the `WAIT`, so the `WAIT` does wait for the write
//! (checked by hand with the replica stopped: `WAIT 1 300` as a connection's
//! first command answers 1 at once, after `ECHO` or `CLIENT ID` it answers 0
//! after 300 ms). The backend's own guard (a reconnect since the write counts
//! as no acknowledgement) covers servers that keep a connection's offset at 0
//! until it writes. This test checks the end-to-end rule on the server at
//! hand, and that the scenario really happens (the `WAIT` reaches the server
//! on a new connection); it passes with or without that guard on 7.0.

#![allow(clippy::expect_used, clippy::panic)] // test helpers

use crate::common;

use std::time::Duration;

use lock_core::{LockBackend, LockToken, Replication};

use lock_core::AcquireOutcome;
use lock_tair::{OnShortfall, ReplicaAck};
use lock_testkit::server::{RedisServer, ReplicatedPair, TcpProxy};

/// `calls` of one command in `INFO commandstats`.
async fn calls(server: &RedisServer, command: &str) -> u64 {
    server.command_calls(command).await.expect("INFO commandstats")
}

/// The proxy closes the WAIT connection right after forwarding the `SET NX`
/// reply, while the replica is stopped: fred reconnects and sends the
/// `WAIT` on the new connection. The acquire must be reported unconfirmed.
///
/// On the default (current-thread) test runtime the order is fixed: the
/// proxy writes the reply and the end of stream in one step, so fred's
/// router reads both before the caller can queue its `WAIT`, and queues its
/// reconnection first.
#[tokio::test]
async fn wait_after_a_reconnect_confirms_nothing() {
    let pair = ReplicatedPair::start(common::tair()).await.expect("primary + replica");
    let proxy = TcpProxy::start(pair.primary().addr()).await.expect("proxy");
    let backend = common::connect(
        common::builder(&proxy.url())
            .ack_connections(1)
            // Generous: a loaded machine's replica must not fall short by itself.
            .replica_ack(ReplicaAck::new(1, Duration::from_secs(2)).on_shortfall(OnShortfall::MarkUnconfirmed)),
    )
    .await;
    let ttl = Duration::from_secs(5);

    // The replica is up: an acquire through the proxy is confirmed.
    let token = LockToken::generate().expect("token");
    match backend.try_acquire("warm", &token, ttl).await.expect("acquire") {
        AcquireOutcome::Acquired(lease) => {
            assert!(
                matches!(lease.replication, Replication::Confirmed { replicas: 1 }),
                "the replica is up: {lease:?}"
            );
        }
        other => panic!("warm should be free: {other:?}"),
    }

    let waits = calls(pair.primary(), "wait").await;
    pair.replica().pause().expect("pause the replica");
    proxy.close_after_next_reply();
    let token = LockToken::generate().expect("token");
    let attempt = backend.try_acquire("reconnected", &token, ttl).await;
    pair.replica().resume().expect("resume the replica");

    // The scenario happened: the SET NX was applied, and its WAIT reached
    // the server after the connection that carried the SET NX was gone
    // (fred did not fail the WAIT locally).
    let held = pair.primary().cmd(&["EXISTS", "reconnected"]).await.expect("EXISTS");
    assert_eq!(held.as_int(), Some(1), "the SET NX should have been applied");
    assert!(
        calls(pair.primary(), "wait").await > waits,
        "the WAIT never reached the server: fred failed it instead of sending it after reconnecting ({attempt:?})"
    );
    match attempt.expect("MarkUnconfirmed: the acquire succeeds") {
        AcquireOutcome::Acquired(lease) => assert!(
            !matches!(lease.replication, Replication::Confirmed { .. }),
            "the replica was stopped, yet the WAIT sent after a reconnect confirmed the acquire: {lease:?}"
        ),
        other => panic!("reconnected should be free: {other:?}"),
    }
}
