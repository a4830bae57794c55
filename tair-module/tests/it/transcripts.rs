//! The transcripts of tairstring.md §3 and §5, replayed in order and compared
//! as raw RESP bytes. TTL readings are checked within a small window.
//!
//! The reference transcripts are abbreviated in a few places (a reply that
//! needs state the shown commands do not create). Those places get an extra
//! setup step marked `inserted:`; every reply the reference shows is checked.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)] // tests

use crate::common;

use common::*;

#[tokio::test]
async fn lock_flow_on_a_plain_string() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.t("SET lk tok NX EX 5", ok()).await;
    s.t("TYPE lk", st("string")).await;
    s.int_in("TTL lk", 4, 5).await;
    s.steps(&[
        ("SET lk other NX EX 5", nil()),
        ("CAD lk wrong", int(0)),
        ("GET lk", bulk("tok")),
        ("CAD lk tok", int(1)),
        ("EXISTS lk", int(0)),
        ("CAD lk tok", int(-1)),
        ("CAD lk", arity("cad")),
        ("CAD lk a b", arity("cad")),
    ])
    .await;
}

#[tokio::test]
async fn cas_and_ttl_renewal() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.steps(&[
        ("SET s v1 EX 100", ok()),
        ("CAS s v1 v2", int(1)),
        ("TTL s", int(-1)),
        ("CAS s wrong v3", int(0)),
        ("CAS missing a b", int(-1)),
        ("EXISTS missing", int(0)),
        ("SET lk tok NX EX 5", ok()),
        ("CAS lk tok tok EX 10", int(1)),
    ])
    .await;
    s.int_in("TTL lk", 9, 10).await;
    s.t("CAS lk tok tok PX 20000", int(1)).await;
    s.int_in("PTTL lk", 19_000, 20_000).await;
    s.t("CAS lk tok tok KEEPTTL", int(1)).await;
    s.t("TTL lk", int(-1)).await;
    s.t("SET k v EX 100", ok()).await;
    s.t("CAS k nope w EX 5", int(0)).await;
    s.int_in("TTL k", 99, 100).await;
    s.t("SET k x", ok()).await; // inserted: the next CAS needs the value "x"
    s.steps(&[
        ("CAS k x y EXAT 1", int(1)),
        ("EXISTS k", int(0)),
        ("CAS k w x EX 0", se()),
        ("CAS k w x EX 10 KEEPTTL", se()),
        ("CAS k w x NX", se()),
        ("CAS nokey w x FOO", se()),
        ("CAS k w", arity("cas")),
    ])
    .await;
}

#[tokio::test]
async fn cross_type() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.steps(&[
        ("RPUSH lst a", int(1)),
        ("CAS lst a b", wt()),
        ("CAD lst a", wt()),
        ("EXSET ek tok", ok()),
        ("CAS ek tok tok2", wt()),
        ("CAD ek tok", wt()),
        ("SET plain tok", ok()),
        ("EXSET plain v NX", wt()),
        ("EXGET plain", wt()),
        ("EXCAS plain v 1", wt()),
        ("EXCAS plain v abc", err("ERR version should be integer")),
        ("EXCAD plain 1", wt()),
        ("EXAPPEND plain y NX", nil()),
    ])
    .await;
}

#[tokio::test]
async fn exset_and_versions() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.steps(&[
        ("EXSET a v1", ok()),
        ("EXGET a", exget("v1", 1)),
        ("EXSET a v2", ok()),
        ("EXSET a v3 VER 2", ok()),
        ("EXGET a", exget("v3", 3)),
        ("EXSET a v4 VER 2", stale()),
        ("EXSET a v4 VER 0", ok()),
        ("EXGET a", exget("v4", 4)),
        ("EXSET a v5 VER -1", se()),
        ("EXSET a v5 ABS 100", ok()),
        ("EXSET a v6 ABS 0", ok()),
        ("EXGET a", exget("v6", 0)),
        ("EXSET a v7", ok()),
        ("EXGET a", exget("v7", 1)),
        ("EXSET nv x VER 99", ok()),
        ("EXGET nv", exget("x", 1)),
        ("EXSET nx1 a XX", nil()),
        ("EXSET nx1 a NX", ok()),
        ("EXSET nx1 b NX", nil()),
        ("EXSET nx1 c NX XX", se()),
        // inserted: at version 1 `XX VER 1` succeeds (TairString's own rule);
        // one more write makes the reference's stale reply reproducible.
        ("EXSET nx1 b XX", ok()),
        ("EXSET nx1 c XX VER 1", stale()),
        ("EXSET dr a ABS 50", ok()),
        ("DEL dr", int(1)),
        ("EXSET dr b", ok()),
        ("EXGET dr", exget("b", 1)),
        ("EXSET t v EX 100", ok()),
        ("EXSET t v2 VER 99 EX 5", stale()),
    ])
    .await;
    s.int_in("TTL t", 99, 100).await;
    // inserted: the reference notes "(after PXAT +80s)".
    let now_ms = s
        .eval_int(
            "local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000)",
            &[],
        )
        .await;
    s.t(&format!("EXSET t v PXAT {}", now_ms + 80_000), ok()).await;
    s.t("EXSET t v KEEPTTL", ok()).await;
    s.int_in("PTTL t", 79_000, 80_000).await;
    s.t("EXSET t v", ok()).await;
    s.t("TTL t", int(-1)).await;
    s.t("EXSET f v3 FLAGS 4294967296", se()).await;
}

#[tokio::test]
async fn excas_and_excad() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.steps(&[
        ("EXSET c v1 EX 100", ok()),
        ("EXCAS c v2 1", excas_ok(2)),
        ("TTL c", int(-1)),
        ("EXCAS c v3 1", excas_failed("v2", 2)),
        ("EXCAS c v3 0", excas_failed("v2", 2)),
        ("EXCAS missing v 1", int(-1)),
        ("EXCAS c v3 abc", err("ERR version should be integer")),
        ("EXCAS c v3 -1", se()),
        ("EXCAS c v3 2 EX 30", excas_ok(3)),
        ("EXCAS c v4 3 KEEPTTL", excas_ok(4)),
    ])
    .await;
    s.int_in("TTL c", 29, 30).await;
    // inserted: the reference's next step starts from "v7", version 7, TTL 65.
    s.t("EXCAS c v5 4 KEEPTTL", excas_ok(5)).await;
    s.t("EXCAS c v6 5", excas_ok(6)).await;
    s.t("EXCAS c v7 6 EX 65", excas_ok(7)).await;
    s.t("EXCAS c v8 1 EX 5", excas_failed("v7", 7)).await;
    s.int_in("TTL c", 64, 65).await;
    s.steps(&[
        ("EXCAS c v8 7 WITHVERSION", se()),
        ("EXSET d v", ok()),
        ("EXCAD d 2", int(0)),
        ("EXCAD d abc", se()),
        ("EXCAD d -1", int(0)),
        ("EXCAD d 1", int(1)),
        ("EXCAD d 1", int(-1)),
    ])
    .await;
}

#[tokio::test]
async fn exsetver_exgae_exincrby_samples() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.steps(&[
        ("EXSET sv x", ok()), // inserted: EXSETVER needs an existing key
        ("EXSETVER sv 10", int(1)),
        ("EXSETVER sv 0", se()),
        ("EXSETVER missing 5", int(0)),
        ("EXSET g v FLAGS 7", ok()),
        ("EXGAE g EX 100", arr(&[bulk("v"), int(1), int(7)])),
        ("EXGAE g", arity("exgae")),
        ("EXGAE missing EX 10", nil()),
        ("EXINCRBY i 5", int(5)), // inserted: the next reply is 10 at version 2
        ("EXINCRBY i 5 WITHVERSION", arr(&[int(10), int(2)])),
        ("EXINCRBY i -20 NONEGATIVE", int(0)),
        ("EXINCRBY i 100 MAX 50", overflow()),
        ("EXINCRBY i 10 MIN 20 MAX 10", min_max()),
        ("EXINCRBY i abc", not_int()),
        ("EXINCRBY i 1 VER 1", stale()),
        ("EXINCRBYFLOAT fl 1.5", bulk("1.5")),
        ("EXINCRBYFLOAT fl abc", not_float()),
        ("EXINCRBYFLOAT fl 1 WITHVERSION", se()),
    ])
    .await;
}

/// The "raw mode" transcript: same replies, shown by redis-cli without types.
#[tokio::test]
async fn raw_mode_transcript() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.steps(&[
        ("SET lk tok", ok()),
        ("CAD lk wrong", int(0)),
        ("CAD lk tok", int(1)),
        ("CAD lk tok", int(-1)),
        ("EXSET ek v1", ok()),
        ("EXGET ek", exget("v1", 1)),
        ("EXCAS ek v2 1", excas_ok(2)),
        ("EXCAS ek v3 1", excas_failed("v2", 2)),
        ("EXCAS nokey v 1", int(-1)),
        ("EXSET ek v4 VER 1", stale()),
        ("CAD ek v2", wt()),
    ])
    .await;
}

/// §5: the ABA hazard of version-1 locks, and the ABS fix.
#[tokio::test]
async fn lock_with_exstring() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.t("EXSET lk A NX PX 200 WITHVERSION", int(1)).await;
    sleep_ms(400).await; // A's lock expires
    s.steps(&[
        ("EXSET lk B NX PX 5000 WITHVERSION", int(1)),
        ("EXCAD lk 1", int(1)), // A's stale release deletes B's lock
        ("EXSET lk A NX EX 5 ABS 918273645 WITHVERSION", int(918_273_645)),
        ("EXCAD lk 1", int(0)),
        ("EXCAD lk 918273645", int(1)),
    ])
    .await;
}
