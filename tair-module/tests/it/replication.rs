//! Every write reaches the replica in a deterministic form: values, versions,
//! flags and TTLs are equal on the replica, WAIT counts the writes, failed
//! writes propagate nothing, and a full sync carries the module type.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)] // tests

use crate::common;

use std::time::Duration;

use common::*;

/// Both sides hold the same absolute expiry; readings differ only by the time
/// between the two PTTL calls.
const TTL_TOLERANCE_MS: i64 = 500;

/// The primary's periodic PING to its replicas is pushed out of the test's
/// way, so that the replication offset moves only with the writes.
async fn pair() -> ReplicatedPair {
    ReplicatedPair::start(builder().args(["--repl-ping-replica-period", "3600"]))
        .await
        .expect("start primary + replica")
}

async fn offset(srv: &RedisServer) -> i64 {
    info_field(srv, "replication", "master_repl_offset")
        .await
        .parse()
        .expect("offset")
}

async fn assert_replicas_equal(pair: &ReplicatedPair) {
    pair.wait_for_sync(Duration::from_secs(10)).await.expect("sync");
    let mut p = Session::new(pair.primary()).await;
    let mut r = Session::new(pair.replica()).await;
    let a = snapshot(&mut p).await;
    let b = snapshot(&mut r).await;
    assert!(!a.is_empty());
    assert_same_data(&a, &b, TTL_TOLERANCE_MS);
    assert_eq!(show(&p.line("DEBUG DIGEST").await), show(&r.line("DEBUG DIGEST").await));
}

#[tokio::test]
async fn every_write_replicates_and_wait_counts_it() {
    let pair = pair().await;
    let primary = pair.primary();
    let mut s = Session::new(primary).await;
    let writes: &[(&str, Vec<u8>)] = &[
        ("EXSET k v EX 100 FLAGS 3", ok()),
        ("EXSET k v2 KEEPTTL", ok()),
        ("EXSET k v3 VER 2 FLAGS 4", ok()),
        ("EXCAS k v4 3 PX 50000", excas_ok(4)),
        ("EXCAS k v5 4 KEEPTTL", excas_ok(5)),
        ("EXCAS k v6 5", excas_ok(6)),
        ("EXSETVER k 60", int(1)),
        ("EXAPPEND k a", int(61)),
        ("EXPREPEND k b VER 61", int(62)),
        ("EXGAE k EX 300", arr(&[bulk("bv6a"), int(62), int(4)])),
        ("EXINCRBY i 3 EX 100", int(3)),
        ("EXINCRBY i 3 KEEPTTL", int(6)),
        ("EXINCRBY i 3 ABS 99 NONEGATIVE", int(9)),
        ("EXINCRBYFLOAT fl 0.1 PX 70000", bulk("0.1")),
        ("EXINCRBYFLOAT fl 0.2 KEEPTTL", bulk("0.3")),
        ("EXSET d v", ok()),
        ("EXCAD d 1", int(1)),
        ("SET lk tok", ok()),
        ("CAS lk tok tok2 EX 100", int(1)),
        ("CAS lk tok2 tok3 KEEPTTL", int(1)),
        ("CAS lk tok3 tok4 PX 90000", int(1)),
        ("SET lk2 tok EX 100", ok()),
        ("CAD lk2 tok", int(1)),
        ("EXSET past v PXAT 1", ok()),
        ("EXSET w v ABS 9223372036854775807", ok()),
        ("EXSET w v2 WITHVERSION", int(i64::MIN)),
    ];
    for (cmd, want) in writes {
        let before = offset(primary).await;
        s.t(cmd, want.clone()).await;
        let after = offset(primary).await;
        assert!(after > before, "`{cmd}` did not reach the replication stream");
        s.t("WAIT 1 5000", int(1)).await;
    }
    // The already-expired key's DEL is propagated when the primary notices
    // the expiry: lazily on this read, or by its active expiry cycle at any
    // moment. Made to happen here, before the comparison: a DEL in flight
    // between the two digests made them differ (a flake seen under load).
    s.t("EXISTS past", int(0)).await;
    s.t("WAIT 1 5000", int(1)).await;
    assert_replicas_equal(&pair).await;

    // Failed or no-op writes propagate nothing.
    let failures: &[(&str, Vec<u8>)] = &[
        ("EXSET k x VER 1", stale()),
        ("EXSET k x NX", nil()),
        ("EXSET nope x XX", nil()),
        ("EXCAS k x 1", excas_failed("bv6a", 62)),
        ("EXCAS nope x 1", int(-1)),
        ("EXCAD k 1", int(0)),
        ("EXSETVER nope 5", int(0)),
        ("EXINCRBY i 1 MAX 0", overflow()),
        ("CAS lk wrong x", int(0)),
        ("CAD lk wrong", int(0)),
        ("EXGAE nope EX 5", nil()),
        ("EXGET k", exget("bv6a", 62)),
        ("EXSET k x FOO", se()),
    ];
    for (cmd, want) in failures {
        let before = offset(primary).await;
        s.t(cmd, want.clone()).await;
        assert_eq!(offset(primary).await, before, "`{cmd}` propagated something");
    }

    // The replica serves the replicated data; versions continue from it.
    let mut r = Session::new(pair.replica()).await;
    r.t("EXGET k WITHFLAGS", arr(&[bulk("bv6a"), int(62), int(4)])).await;
    r.t("EXGET w", exget("v2", i64::MIN)).await;
    r.t("GET lk", bulk("tok4")).await;
    r.t("EXISTS d lk2", int(0)).await;
    r.int_in("PTTL k", 290_000, 300_000).await;
}

#[tokio::test]
async fn full_sync_carries_the_module_type() {
    let pair = pair().await;
    let mut s = Session::new(pair.primary()).await;
    populate(&mut s).await;
    // The replica restarts empty and must take a full sync (RDB transfer).
    pair.replica().restart_empty().await.expect("restart replica");
    assert_replicas_equal(&pair).await;
    let sync_full: i64 = info_field(pair.primary(), "stats", "sync_full")
        .await
        .parse()
        .expect("sync_full");
    assert!(sync_full >= 2, "expected a second full sync, got {sync_full}");
    // Writes after the full sync keep replicating.
    s.t("EXSET e1 again", ok()).await;
    s.t("WAIT 1 5000", int(1)).await;
    let mut r = Session::new(pair.replica()).await;
    r.t("EXGET e1", exget("again", 2)).await;
}
