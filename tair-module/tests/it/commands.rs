//! Every row of the reference tables (tairstring.md §1, §2), command by
//! command, compared as raw RESP bytes against redis-server with the module.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)] // tests

use crate::common;

use common::*;

#[tokio::test]
async fn module_registration() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    let list = s.line("MODULE LIST").await;
    assert!(
        show(&list).contains("$4\\r\\nname\\r\\n$9\\r\\nexstrtype\\r\\n$3\\r\\nver\\r\\n:1\\r\\n"),
        "{}",
        show(&list)
    );
    s.t("EXSET k v", ok()).await;
    s.t("TYPE k", st("exstrtype")).await;
    s.t("OBJECT ENCODING k", bulk("raw")).await;
    // Flags and key specs (first 1, last 1, step 1) for cluster routing.
    let writes = [
        "cas",
        "cad",
        "exset",
        "excas",
        "excad",
        "exsetver",
        "exincrby",
        "exincrbyfloat",
        "exappend",
        "exprepend",
        "exgae",
    ];
    for cmd in writes {
        let info = s.line(&format!("COMMAND INFO {cmd}")).await;
        let want = format!(
            "*1\r\n*10\r\n${}\r\n{cmd}\r\n:-1\r\n*3\r\n+write\r\n+denyoom\r\n+module\r\n:1\r\n:1\r\n:1\r\n",
            cmd.len()
        );
        assert!(info.starts_with(want.as_bytes()), "{cmd}: {}", show(&info));
    }
    let info = s.line("COMMAND INFO exget").await;
    let want = "*1\r\n*10\r\n$5\r\nexget\r\n:-1\r\n*3\r\n+readonly\r\n+module\r\n+fast\r\n:1\r\n:1\r\n:1\r\n";
    assert!(info.starts_with(want.as_bytes()), "{}", show(&info));
    s.t("COMMAND GETKEYS EXSET somekey v EX 10", arr(&[bulk("somekey")]))
        .await;
    s.t("COMMAND GETKEYS CAS lk a b", arr(&[bulk("lk")])).await;
}

/// §2.4, captured bytes, in order.
#[tokio::test]
async fn exact_reply_bytes() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.steps(&[
        ("EXSET c v1", b"+OK\r\n".to_vec()),
        ("EXCAS c v2 1", b"*3\r\n+OK\r\n+\r\n:2\r\n".to_vec()),
        ("EXCAS c v3 1", b"*3\r\n+CAS_FAILED\r\n$2\r\nv2\r\n:2\r\n".to_vec()),
        ("EXCAS nokey v 1", b":-1\r\n".to_vec()),
        ("EXGET c", b"*2\r\n$2\r\nv2\r\n:2\r\n".to_vec()),
        ("EXGET c WITHFLAGS", b"*3\r\n$2\r\nv2\r\n:2\r\n:0\r\n".to_vec()),
        ("EXGET nokey", b"$-1\r\n".to_vec()),
        ("EXSET c x NX", b"$-1\r\n".to_vec()),
        ("EXSET c x VER 9", b"-ERR update version is stale\r\n".to_vec()),
        ("EXSET c x WITHVERSION", b":3\r\n".to_vec()),
        ("SET lk tok", ok()),
        ("CAD lk tok", b":1\r\n".to_vec()),
        ("CAD lk tok", b":-1\r\n".to_vec()),
        ("EXCAD c 1", b":0\r\n".to_vec()),
        ("EXGAE c EX 10", b"*3\r\n$1\r\nx\r\n:3\r\n:0\r\n".to_vec()),
        ("EXINCRBY n 1 WITHVERSION", b"*2\r\n:1\r\n:1\r\n".to_vec()),
        ("EXINCRBYFLOAT f 1.5", b"$3\r\n1.5\r\n".to_vec()),
        ("EXAPPEND c y", b":4\r\n".to_vec()),
    ])
    .await;
    s.ta(&[b"EXSET", b"e", b""], ok()).await;
    s.t("EXGET e", b"*2\r\n$0\r\n\r\n:1\r\n".to_vec()).await;
}

/// RESP3 gives the same shapes; nil becomes `_`.
#[tokio::test]
async fn resp3_shapes() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    let hello = s.line("HELLO 3").await;
    assert!(hello.starts_with(b"%"), "{}", show(&hello));
    s.steps(&[
        ("EXSET c v1", ok()),
        ("EXCAS c v2 1", excas_ok(2)),
        ("EXCAS c v3 1", excas_failed("v2", 2)),
        ("EXCAS nokey v 1", int(-1)),
        ("EXGET c", exget("v2", 2)),
        ("EXGET nokey", b"_\r\n".to_vec()),
        ("EXSET c x NX", b"_\r\n".to_vec()),
        ("EXINCRBYFLOAT f 1.5", bulk("1.5")),
    ])
    .await;
}

/// §1: the shared option parser.
#[tokio::test]
async fn option_parser() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.steps(&[
        // Keywords are case-insensitive.
        ("exset k v ex 100 nx flags 3 withversion", int(1)),
        ("ExSeT k v2 Px 100000 Xx VeR 1 WithVersion", int(2)),
        ("EXSET k v3 kEePtTl aBs 7", ok()),
        ("EXGET k withFLAGS", arr(&[bulk("v3"), int(7), int(3)])),
        // Unknown keyword, missing value, duplicated group.
        ("EXSET k v FOO", se()),
        ("EXSET k v EX", se()),
        ("EXSET k v VER", se()),
        ("EXSET k v FLAGS", se()),
        ("EXSET k v EX 10 EX 10", se()),
        ("EXSET k v EX 10 PX 10", se()),
        ("EXSET k v EX 10 EXAT 99999999999", se()),
        ("EXSET k v PXAT 10 PX 10", se()),
        ("EXSET k v EX 10 KEEPTTL", se()),
        ("EXSET k v KEEPTTL EX 10", se()),
        ("EXSET k v FLAGS 1 FLAGS 2", se()),
        ("EXSET k v VER 1 ABS 2", se()),
        ("EXSET k v ABS 1 ABS 2", se()),
        ("EXSET k v NX XX", se()),
        ("EXSET k v XX NX", se()),
        // TTL values must be int64 > 0.
        ("EXSET k v EX 0", se()),
        ("EXSET k v EX -5", se()),
        ("EXSET k v PX abc", se()),
        ("EXSET k v PX 0", se()),
        ("EXSET k v EXAT 0", se()),
        ("EXSET k v PXAT -1", se()),
        ("EXSET k v EX 1.5", se()),
        ("EXSET k v EX 9223372036854775808", se()),
        // VER/ABS must be int64 >= 0.
        ("EXSET k v VER -1", se()),
        ("EXSET k v ABS -1", se()),
        ("EXSET k v VER x", se()),
        ("EXSET k v ABS 9223372036854775808", se()),
        // Nothing was written by the failures above.
        ("EXGET k WITHFLAGS", arr(&[bulk("v3"), int(7), int(3)])),
        // Options are validated before the key is looked up.
        ("EXSET missing v FOO", se()),
        ("EXISTS missing", int(0)),
    ])
    .await;
    s.int_in("PTTL k", 90_000, 100_000).await;
    // EXAT/PXAT in the past: accepted, the key expires at once.
    s.t("EXSET past v EXAT 1", ok()).await;
    s.t("EXISTS past", int(0)).await;
    s.t("EXSET past v PXAT 1", ok()).await;
    s.t("EXISTS past", int(0)).await;
    s.t("EXINCRBY past 1 EXAT 1", int(1)).await;
    s.t("EXISTS past", int(0)).await;
}

/// §1 table: which options each command allows.
#[tokio::test]
async fn allowed_options_per_command() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.steps(&[
        ("EXSET k 1 EX 100 NX VER 0 FLAGS 1 WITHVERSION", int(1)),
        ("EXSET k 1 MIN 1", se()),
        ("EXSET k 1 MAX 1", se()),
        ("EXSET k 1 DEF 1", se()),
        ("EXSET k 1 NONEGATIVE", se()),
        (
            "EXINCRBY k 1 EX 100 XX VER 0 MIN 0 MAX 10 NONEGATIVE WITHVERSION DEF 5",
            arr(&[int(2), int(2)]),
        ),
        ("EXINCRBY k 1 KEEPTTL ABS 9", int(3)),
        ("EXINCRBY k 1 FLAGS 1", se()),
        ("EXINCRBYFLOAT k 1 EX 100 XX VER 0 MIN 0 MAX 10", bulk("4")),
        ("EXINCRBYFLOAT k 1 KEEPTTL ABS 9", bulk("5")),
        ("EXINCRBYFLOAT k 1 WITHVERSION", se()),
        ("EXINCRBYFLOAT k 1 NONEGATIVE", se()),
        ("EXINCRBYFLOAT k 1 DEF 1", se()),
        ("EXINCRBYFLOAT k 1 FLAGS 1", se()),
        ("EXCAS k 6 9 EX 100", excas_ok(10)),
        ("EXCAS k 6 10 KEEPTTL", excas_ok(11)),
        ("EXCAS k 6 11 NX", se()),
        ("EXCAS k 6 11 XX", se()),
        ("EXCAS k 6 11 VER 1", se()),
        ("EXCAS k 6 11 ABS 1", se()),
        ("EXCAS k 6 11 FLAGS 1", se()),
        ("EXCAS k 6 11 WITHVERSION", se()),
        ("EXCAS k 6 11 MIN 1", se()),
        ("SET p a", ok()),
        ("CAS p a b EX 100", int(1)),
        ("CAS p b c KEEPTTL", int(1)),
        ("CAS p c d NX", se()),
        ("CAS p c d XX", se()),
        ("CAS p c d VER 1", se()),
        ("CAS p c d ABS 1", se()),
        ("CAS p c d FLAGS 1", se()),
        ("CAS p c d WITHVERSION", se()),
        ("EXAPPEND k x NX", nil()),
        ("EXAPPEND k x XX VER 11", int(12)),
        ("EXAPPEND k x ABS 20", int(20)),
        ("EXAPPEND k x EX 10", se()),
        ("EXAPPEND k x PX 10", se()),
        ("EXAPPEND k x EXAT 10", se()),
        ("EXAPPEND k x PXAT 10", se()),
        ("EXAPPEND k x KEEPTTL", se()),
        ("EXAPPEND k x FLAGS 1", se()),
        ("EXAPPEND k x WITHVERSION", se()),
        ("EXPREPEND k x EX 10", se()),
        ("EXPREPEND k x KEEPTTL", se()),
        ("EXPREPEND k x XX VER 20", int(21)),
        ("EXGAE k EX 100", arr(&[bulk("x6xx"), int(21), int(1)])),
        ("EXGAE k PX 100000", arr(&[bulk("x6xx"), int(21), int(1)])),
        ("EXGAE k KEEPTTL x", se()),
        ("EXGAE k EX 10 NX", se()),
        ("EXGAE k EX 10 VER 1", se()),
        ("EXGAE k EX 10 WITHVERSION", se()),
        ("EXGAE k NX NX", se()),
        ("EXGET k FLAGS", se()),
        ("EXGET k WITHVERSION", se()),
        ("CAD p d EX", arity("cad")),
        ("EXCAD k 21 NX", arity("excad")),
        ("EXSETVER k 5 NX", arity("exsetver")),
    ])
    .await;
}

/// §1: a write without a TTL option removes the TTL; KEEPTTL keeps it for the
/// ex* commands (not for CAS); EXAPPEND/EXPREPEND/EXSETVER never touch it.
#[tokio::test]
async fn ttl_rules() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    for (setup, write) in [
        ("EXSET k v EX 100", "EXSET k w"),
        ("EXSET k 1 EX 100", "EXINCRBY k 1"),
        ("EXSET k 1 EX 100", "EXINCRBYFLOAT k 1"),
        ("EXSET k v EX 100", "EXCAS k w 1"),
        ("SET k v EX 100", "CAS k v w"),
        ("SET k v EX 100", "CAS k v w KEEPTTL"),
    ] {
        s.line("DEL k").await;
        s.line(setup).await;
        s.int_in("TTL k", 99, 100).await;
        let r = s.line(write).await;
        assert!(!r.starts_with(b"-"), "{write}: {}", show(&r));
        s.t("TTL k", int(-1)).await;
    }
    for (setup, write) in [
        ("EXSET k v EX 100", "EXSET k w KEEPTTL"),
        ("EXSET k 1 EX 100", "EXINCRBY k 1 KEEPTTL"),
        ("EXSET k 1 EX 100", "EXINCRBYFLOAT k 1 KEEPTTL"),
        ("EXSET k v EX 100", "EXCAS k w 1 KEEPTTL"),
        ("EXSET k v EX 100", "EXAPPEND k w"),
        ("EXSET k v EX 100", "EXPREPEND k w"),
        ("EXSET k v EX 100", "EXSETVER k 5"),
        ("EXSET k v EX 100", "EXGET k"),
    ] {
        s.line("DEL k").await;
        s.line(setup).await;
        let r = s.line(write).await;
        assert!(!r.starts_with(b"-"), "{write}: {}", show(&r));
        s.int_in("TTL k", 99, 100).await;
    }
    for (write, lo, hi) in [
        ("EXSET k v EX 50", 49_000, 50_000),
        ("EXSET k v PX 50000", 49_000, 50_000),
        ("EXINCRBY k 1 EX 50 ABS 1", 49_000, 50_000),
        ("EXCAS k v 1 PX 50000", 49_000, 50_000),
    ] {
        s.line("DEL k").await;
        s.t("EXSET k 0", ok()).await;
        let r = s.line(write).await;
        assert!(!r.starts_with(b"-"), "{write}: {}", show(&r));
        s.int_in("PTTL k", lo, hi).await;
    }
    // Absolute times.
    let now = s.eval_int("return tonumber(redis.call('TIME')[1])", &[]).await;
    s.t(&format!("EXSET k v EXAT {}", now + 100), ok()).await;
    s.int_in("TTL k", 98, 100).await;
    s.t(&format!("EXSET k v PXAT {}", (now + 200) * 1000), ok()).await;
    s.int_in("TTL k", 198, 200).await;
    s.t(
        &format!("EXGAE k EXAT {}", now + 300),
        arr(&[bulk("v"), int(4), int(0)]),
    )
    .await;
    s.int_in("TTL k", 298, 300).await;
}

/// §2.1 CAS on native strings.
#[tokio::test]
async fn cas_table() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.steps(&[
        ("SET k old EX 100", ok()),
        ("CAS k old new", int(1)),
        ("GET k", bulk("new")),
        ("TTL k", int(-1)),
        ("SET k v EX 100", ok()),
        ("CAS k nope w EX 5", int(0)),
        ("GET k", bulk("v")),
        ("CAS missing a b", int(-1)),
        ("EXISTS missing", int(0)),
        ("CAS missing a b EX 10", int(-1)),
        ("EXISTS missing", int(0)),
        ("RPUSH lst a", int(1)),
        ("CAS lst a b", wt()),
        ("HSET h f v", int(1)),
        ("CAS h a b", wt()),
        ("EXSET ek tok", ok()),
        ("CAS ek tok tok2", wt()),
        ("CAS k", arity("cas")),
        ("CAS k v", arity("cas")),
        ("CAS k v w FOO", se()),
        ("CAS missing v w FOO", se()),
        ("CAS lst a b EX 0", se()),
        ("CAS k v w EX", se()),
        ("CAS k v w EX 1 PX 1", se()),
        ("CAS k v w EXAT abc", se()),
        // Byte-exact comparison.
        ("SET n 10", ok()),
        ("CAS n 010 x", int(0)),
        ("CAS n 10.0 x", int(0)),
        ("SET c Tok", ok()),
        ("CAS c tok x", int(0)),
        ("CAS c Tok x", int(1)),
        // Int-encoded strings (after INCR).
        ("SET i 9", ok()),
        ("INCR i", int(10)),
        ("OBJECT ENCODING i", bulk("int")),
        ("CAS i 10 11", int(1)),
        ("GET i", bulk("11")),
        // A lock made by SET NX EX.
        ("SET lk tok NX EX 5", ok()),
        ("CAS lk tok tok PX 20000", int(1)),
    ])
    .await;
    s.int_in("PTTL lk", 19_000, 20_000).await;
    s.int_in("TTL k", 99, 100).await;
    // Binary-safe, NUL bytes included.
    s.ta(&[b"SET", b"b", b"a\0b"], ok()).await;
    s.ta(&[b"CAS", b"b", b"a\0c", b"x"], int(0)).await;
    s.ta(&[b"CAS", b"b", b"a", b"x"], int(0)).await;
    s.ta(&[b"CAS", b"b", b"a\0b", b"\0\xff\0"], int(1)).await;
    s.ta(&[b"GET", b"b"], bulk(b"\0\xff\0")).await;
    // A logically expired key is missing.
    s.t("SET e v PX 100", ok()).await;
    sleep_ms(300).await;
    s.t("CAS e v w", int(-1)).await;
    s.t("EXISTS e", int(0)).await;
    // EXAT in the past: accepted, the key expires at once.
    s.t("SET k x", ok()).await;
    s.t("CAS k x y EXAT 1", int(1)).await;
    s.t("EXISTS k", int(0)).await;
}

/// §2.1 CAD on native strings.
#[tokio::test]
async fn cad_table() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.steps(&[
        ("SET lk tok NX EX 5", ok()),
        ("CAD lk wrong", int(0)),
        ("GET lk", bulk("tok")),
        ("CAD lk tok", int(1)),
        ("EXISTS lk", int(0)),
        ("CAD lk tok", int(-1)),
        ("CAD lk", arity("cad")),
        ("CAD lk a b", arity("cad")),
        ("CAD", arity("cad")),
        ("RPUSH lst a", int(1)),
        ("CAD lst a", wt()),
        ("SADD st a", int(1)),
        ("CAD st a", wt()),
        ("EXSET ek tok", ok()),
        ("CAD ek tok", wt()),
        ("SET n 10", ok()),
        ("CAD n 010", int(0)),
        ("SET i 1", ok()),
        ("INCR i", int(2)),
        ("CAD i 2", int(1)),
    ])
    .await;
    s.ta(&[b"SET", b"b", b"x\0y"], ok()).await;
    s.ta(&[b"CAD", b"b", b"x\0z"], int(0)).await;
    s.ta(&[b"CAD", b"b", b"x"], int(0)).await;
    s.ta(&[b"CAD", b"b", b"x\0y"], int(1)).await;
    s.t("SET e v PX 100", ok()).await;
    sleep_ms(300).await;
    s.t("CAD e v", int(-1)).await;
}

/// §2.2 EXSET.
#[tokio::test]
async fn exset_table() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.steps(&[
        ("EXSET a v1", ok()),
        ("EXSET a v2 WITHVERSION", int(2)),
        ("EXSET a v3 NX", nil()),
        ("EXSET b v XX", nil()),
        ("EXISTS b", int(0)),
        ("EXSET a v3 XX", ok()),
        ("EXSET a v4 VER 2", stale()),
        ("EXSET a v4 VER 3 WITHVERSION", int(4)),
        ("EXGET a", exget("v4", 4)),
        ("SET plain tok", ok()),
        ("EXSET plain v", wt()),
        ("EXSET plain v NX", wt()),
        ("EXSET plain v XX", wt()),
        ("RPUSH lst a", int(1)),
        ("EXSET lst v", wt()),
        ("EXSET a v FLAGS -1", se()),
        ("EXSET a v FLAGS 4294967296", se()),
        ("EXSET a v FLAGS abc", se()),
        ("EXSET a v FLAGS 4294967295", ok()),
        ("EXGET a WITHFLAGS", arr(&[bulk("v"), int(5), int(4294967295)])),
        ("EXSET a", arity("exset")),
        ("EXSET", arity("exset")),
        // Stale writes change nothing (value, version, TTL).
        ("EXSET t v EX 100", ok()),
        ("EXSET t v2 VER 99 EX 5", stale()),
        ("EXGET t", exget("v", 1)),
        ("PERSIST t", int(1)),
        // FLAGS persist across writes that omit them.
        ("EXSET f v FLAGS 42", ok()),
        ("EXSET f v2", ok()),
        ("EXGET f WITHFLAGS", arr(&[bulk("v2"), int(2), int(42)])),
    ])
    .await;
    s.ta(&[b"EXSET", b"bin", b"a\0b\r\n\xff"], ok()).await;
    s.ta(&[b"EXGET", b"bin"], exget_b(b"a\0b\r\n\xff", 1)).await;
}

fn exget_b(v: &[u8], ver: i64) -> Vec<u8> {
    arr(&[bulk(v), int(ver)])
}

/// §2.2 EXGET.
#[tokio::test]
async fn exget_table() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.steps(&[
        ("EXSET k v FLAGS 9", ok()),
        ("EXGET k", exget("v", 1)),
        ("EXGET k WITHFLAGS", arr(&[bulk("v"), int(1), int(9)])),
        ("EXGET k withflags", arr(&[bulk("v"), int(1), int(9)])),
        ("EXGET missing", nil()),
        ("EXGET missing WITHFLAGS", nil()),
        ("EXGET missing FOO", se()),
        ("SET plain v", ok()),
        ("EXGET plain", wt()),
        ("EXGET plain FOO", se()),
        ("EXGET k FOO", se()),
        ("EXGET k WITHFLAGS x", arity("exget")),
        ("EXGET", arity("exget")),
    ])
    .await;
}

/// §2.2 EXCAS.
#[tokio::test]
async fn excas_table() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.steps(&[
        ("EXSET c v1 EX 100 FLAGS 5", ok()),
        ("EXCAS c v2 1", excas_ok(2)),
        ("TTL c", int(-1)),
        ("EXGET c WITHFLAGS", arr(&[bulk("v2"), int(2), int(5)])),
        ("EXCAS c v3 1", excas_failed("v2", 2)),
        ("EXCAS c v3 0", excas_failed("v2", 2)),
        ("EXCAS c v3 2 EX 30", excas_ok(3)),
        ("TTL c", int(30)),
        ("EXCAS c v4 3 KEEPTTL", excas_ok(4)),
        ("TTL c", int(30)),
        ("EXCAS c v5 1 EX 5", excas_failed("v4", 4)),
        ("TTL c", int(30)),
        ("EXCAS missing v 1", int(-1)),
        ("EXISTS missing", int(0)),
        ("EXCAS missing v 0", int(-1)),
        ("EXCAS c v abc", err("ERR version should be integer")),
        ("EXCAS missing v abc", err("ERR version should be integer")),
        ("EXCAS c v -1", se()),
        ("EXCAS c v 1.0", err("ERR version should be integer")),
        ("SET plain v", ok()),
        ("EXCAS plain v 1", wt()),
        ("EXCAS plain v abc", err("ERR version should be integer")),
        ("EXCAS c v 4 FOO", se()),
        ("EXCAS c v 4 EX 0", se()),
        ("EXCAS c v abc EX 0", err("ERR version should be integer")),
        ("EXCAS c v abc EX x", se()),
        ("EXCAS c v 4 EX", se()),
        ("EXCAS c v 4 WITHVERSION", se()),
        ("EXCAS c v", arity("excas")),
        ("EXCAS c", arity("excas")),
        // ABS 0: only version 0 matches 0.
        ("EXSET z v ABS 0", ok()),
        ("EXCAS z w 0", excas_ok(1)),
    ])
    .await;
    s.ta(&[b"EXCAS", b"c", b"\0bin\0", b"4"], excas_ok(5)).await;
    s.ta(
        &[b"EXCAS", b"c", b"x", b"1"],
        arr(&[st("CAS_FAILED"), bulk(b"\0bin\0"), int(5)]),
    )
    .await;
}

/// §2.2 EXCAD.
#[tokio::test]
async fn excad_table() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.steps(&[
        ("EXSET d v", ok()),
        ("EXCAD d 2", int(0)),
        ("EXCAD d abc", se()),
        ("EXCAD d -1", int(0)),
        ("EXCAD d 0", int(0)),
        ("EXCAD d 1", int(1)),
        ("EXISTS d", int(0)),
        ("EXCAD d 1", int(-1)),
        ("EXCAD missing abc", se()),
        ("SET plain v", ok()),
        ("EXCAD plain 1", wt()),
        ("EXCAD plain abc", wt()),
        ("EXCAD d", arity("excad")),
        ("EXCAD d 1 2", arity("excad")),
    ])
    .await;
}

/// §2.2 EXSETVER.
#[tokio::test]
async fn exsetver_table() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.steps(&[
        ("EXSET sv val EX 100 FLAGS 3", ok()),
        ("EXSETVER sv 10", int(1)),
        ("EXGET sv WITHFLAGS", arr(&[bulk("val"), int(10), int(3)])),
        ("TTL sv", int(100)),
        ("EXSETVER sv 0", se()),
        ("EXSETVER sv -1", se()),
        ("EXSETVER sv abc", se()),
        ("EXGET sv", exget("val", 10)),
        ("EXSETVER missing 5", int(0)),
        ("EXSETVER missing abc", int(0)),
        ("EXSETVER missing 0", int(0)),
        ("EXISTS missing", int(0)),
        ("SET plain v", ok()),
        ("EXSETVER plain 5", wt()),
        ("EXSETVER sv", arity("exsetver")),
        ("EXSETVER sv 1 2", arity("exsetver")),
        ("EXSET sv next", ok()),
        ("EXGET sv", exget("next", 11)),
    ])
    .await;
}

/// §2.2 EXINCRBY.
#[tokio::test]
async fn exincrby_table() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.steps(&[
        ("EXINCRBY i 5", int(5)),
        ("EXINCRBY i 5 WITHVERSION", arr(&[int(10), int(2)])),
        ("EXINCRBY i -20 NONEGATIVE", int(0)),
        ("EXINCRBY i -20", int(-20)),
        ("EXINCRBY i 100 MAX 50", overflow()),
        ("EXINCRBY i -1 MIN -20", overflow()),
        ("EXINCRBY i 0 MIN -20 MAX -20", int(-20)),
        ("EXINCRBY i 10 MIN 20 MAX 10", min_max()),
        ("EXINCRBY i 10 MIN x", min_max()),
        ("EXINCRBY i 10 MAX 1.5", min_max()),
        ("EXINCRBY i abc", not_int()),
        ("EXINCRBY i 1.5", not_int()),
        ("EXINCRBY i 123456789098765432123456789", not_int()),
        ("EXINCRBY i 1 VER 1", stale()),
        ("EXINCRBY i 1 VER 5 WITHVERSION", arr(&[int(-19), int(6)])),
        ("EXINCRBY i 1 NX", nil()),
        ("EXINCRBY j 1 XX", nil()),
        ("EXISTS j", int(0)),
        ("EXINCRBY j 1 NX", int(1)),
        ("EXINCRBY i 1 FOO", se()),
        ("EXINCRBY i 1 EX 0", se()),
        ("EXINCRBY i 1 VER -1", se()),
        ("EXINCRBY i", arity("exincrby")),
        ("SET plain 1", ok()),
        ("EXINCRBY plain 1", wt()),
        ("EXINCRBY plain abc", wt()),
        // Stored value not an integer.
        ("EXSET s abc", ok()),
        ("EXINCRBY s 1", not_int()),
        ("EXGET s", exget("abc", 1)),
        // int64 overflow.
        ("EXSET big 9223372036854775807", ok()),
        ("EXINCRBY big 1", overflow()),
        ("EXSET small -9223372036854775808", ok()),
        ("EXINCRBY small -1", overflow()),
        ("EXINCRBY small 0", int(i64::MIN)),
        // DEF: on a missing key the value is set to d without applying num.
        ("EXINCRBY new 1 NX DEF 50", int(50)),
        ("EXINCRBY new 1 DEF 50", int(51)),
        ("EXINCRBY new2 100 DEF 200 WITHVERSION", arr(&[int(200), int(1)])),
        ("EXINCRBY new3 1 DEF -100 NONEGATIVE", int(0)),
        ("EXINCRBY new4 1 DEF 5 MAX 1", int(5)),
        ("EXINCRBY new5 1 DEF abc", not_int()),
        ("EXINCRBY new5 1 DEF 1 DEF 2", se()),
        (
            "EXINCRBY new6 12 DEF -16 ABS 103 WITHVERSION",
            arr(&[int(-16), int(103)]),
        ),
        ("EXINCRBY new7 12 ABS 105 WITHVERSION", arr(&[int(12), int(105)])),
        // Failures never change the version or create the key.
        ("EXINCRBY nk 100 MAX 50", overflow()),
        ("EXISTS nk", int(0)),
        ("EXGET i", exget("-19", 6)),
    ])
    .await;
}

/// §2.2 EXINCRBYFLOAT.
#[tokio::test]
async fn exincrbyfloat_table() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.steps(&[
        ("EXINCRBYFLOAT fl 1.5", bulk("1.5")),
        ("EXINCRBYFLOAT fl 100", bulk("101.5")),
        ("EXGET fl", exget("101.5", 2)),
        ("EXINCRBYFLOAT fl abc", not_float()),
        ("EXINCRBYFLOAT fl 1 WITHVERSION", se()),
        ("EXINCRBYFLOAT fl inf", overflow()),
        ("EXINCRBYFLOAT fl -inf", overflow()),
        ("EXINCRBYFLOAT fl nan", not_float()),
        ("EXINCRBYFLOAT fl 1 MAX 100", overflow()),
        ("EXINCRBYFLOAT fl -1 MIN 101", overflow()),
        ("EXINCRBYFLOAT fl 1 MIN 10 MAX 1", min_max()),
        ("EXINCRBYFLOAT fl 1 MIN x", min_max()),
        ("EXINCRBYFLOAT fl 1 NX", nil()),
        ("EXINCRBYFLOAT nf 1 XX", nil()),
        ("EXINCRBYFLOAT fl 1 VER 1", stale()),
        ("EXINCRBYFLOAT fl -0.5 VER 2", bulk("101")),
        ("EXINCRBYFLOAT fl 1 FOO", se()),
        ("EXINCRBYFLOAT fl 1 EX 0", se()),
        ("EXINCRBYFLOAT fl", arity("exincrbyfloat")),
        ("SET plain 1", ok()),
        ("EXINCRBYFLOAT plain 1", wt()),
        ("EXINCRBYFLOAT plain abc", wt()),
        ("EXSET s abc", ok()),
        ("EXINCRBYFLOAT s 1", not_float()),
        // long double arithmetic and %.17Lf formatting, as Redis' INCRBYFLOAT.
        ("EXINCRBYFLOAT d 0.1", bulk("0.1")),
        ("EXINCRBYFLOAT d 0.2", bulk("0.3")),
        ("EXINCRBYFLOAT e 10.1 VER 1", bulk("10.1")),
        ("EXINCRBYFLOAT e 10.1 VER 1", bulk("20.2")),
        ("EXINCRBYFLOAT e 10.1 VER 2", bulk("30.3")),
        ("EXINCRBYFLOAT g 10.1 ABS 101", bulk("10.1")),
        ("EXINCRBYFLOAT g -3 ABS 10", bulk("7.1")),
        ("EXGET g", exget("7.1", 10)),
        ("EXINCRBYFLOAT h 5.0e3", bulk("5000")),
        ("EXINCRBYFLOAT h -5000", bulk("0")),
        ("EXINCRBYFLOAT nk 5 MAX 1", overflow()),
        ("EXISTS nk", int(0)),
    ])
    .await;
}

/// §2.2 EXAPPEND / EXPREPEND.
#[tokio::test]
async fn exappend_exprepend_table() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    for (cmd, joined) in [("EXAPPEND", "foobar"), ("EXPREPEND", "barfoo")] {
        let lc = cmd.to_lowercase();
        s.line("DEL k n plain").await;
        s.steps(&[
            (&format!("{cmd} k foo"), int(1)),
            (&format!("{cmd} k bar"), int(2)),
            ("EXGET k", exget(joined, 2)),
            (&format!("{cmd} k x VER 1"), stale()),
            (&format!("{cmd} k x VER 0"), int(3)),
            (&format!("{cmd} k x ABS 10"), int(10)),
            (&format!("{cmd} k x NX"), nil()),
            (&format!("{cmd} n x XX"), nil()),
            ("EXISTS n", int(0)),
            (&format!("{cmd} n x VER 99"), int(1)),
            ("DEL n", int(1)),
            (&format!("{cmd} n x ABS 100"), int(100)),
            ("SET plain v", ok()),
            (&format!("{cmd} plain y NX"), nil()),
            (&format!("{cmd} plain y"), wt()),
            (&format!("{cmd} plain y XX"), wt()),
            (&format!("{cmd} k x EX 10"), se()),
            (&format!("{cmd} k x NX XX"), se()),
            (&format!("{cmd} k x VER -1"), se()),
            (&format!("{cmd} k"), arity(&lc)),
        ])
        .await;
    }
    s.t("DEL k", int(1)).await;
    s.ta(&[b"EXAPPEND", b"k", b"a\0"], int(1)).await;
    s.ta(&[b"EXPREPEND", b"k", b"\0b"], int(2)).await;
    s.ta(&[b"EXGET", b"k"], exget_b(b"\0ba\0", 2)).await;
}

/// §2.2 EXGAE.
#[tokio::test]
async fn exgae_table() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.steps(&[
        ("EXSET g v FLAGS 7", ok()),
        ("EXGAE g EX 100", arr(&[bulk("v"), int(1), int(7)])),
        ("TTL g", int(100)),
        ("EXGAE g PX 50000", arr(&[bulk("v"), int(1), int(7)])),
        ("EXGET g", exget("v", 1)),
        ("EXGAE g", arity("exgae")),
        ("EXGAE g KEEPTTL", arity("exgae")),
        ("EXGAE missing EX 10", nil()),
        ("EXISTS missing", int(0)),
        ("EXGAE g EX 0", se()),
        ("EXGAE g EX -1", se()),
        ("EXGAE g EX abc", se()),
        ("EXGAE g EX 10 PX 10", se()),
        ("EXGAE g NX 10", se()),
        ("EXGAE g EX 10 NX", se()),
        ("EXGAE missing FOO 10", se()),
        ("SET plain v", ok()),
        ("EXGAE plain EX 10", wt()),
    ])
    .await;
    s.int_in("PTTL g", 49_000, 50_000).await;
    s.t("EXGAE g EXAT 1", arr(&[bulk("v"), int(1), int(7)])).await;
    s.t("EXISTS g", int(0)).await;
}

/// §2.2 "Other interplay" and §2.3 version rules.
#[tokio::test]
async fn interplay_and_versions() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.steps(&[
        ("EXSET e v", ok()),
        ("GET e", wt()),
        ("STRLEN e", wt()),
        ("APPEND e x", wt()),
        ("EXPIRE e 100", int(1)),
        ("PERSIST e", int(1)),
        ("RENAME e e2", ok()),
        ("EXGET e2", exget("v", 1)),
        ("EXSET e2 w", ok()),
        ("EXGET e2", exget("w", 2)),
        ("SET e2 plain", ok()),
        ("EXGET e2", wt()),
        ("GET e2", bulk("plain")),
        // Versions: +1 per write, ABS sets, delete restarts at 1.
        ("EXSET a v5 ABS 100", ok()),
        ("EXSET a v6", ok()),
        ("EXGET a", exget("v6", 101)),
        ("EXSET a v ABS 0", ok()),
        ("EXGET a", exget("v", 0)),
        ("EXSET a v", ok()),
        ("EXGET a", exget("v", 1)),
        ("EXSET nab x ABS 7 WITHVERSION", int(7)),
        ("EXSET dr a ABS 50", ok()),
        ("DEL dr", int(1)),
        ("EXSET dr b", ok()),
        ("EXGET dr", exget("b", 1)),
        ("EXSET ec a ABS 50", ok()),
        ("EXCAD ec 50", int(1)),
        ("EXAPPEND ec b", int(1)),
        // Past 2^63-1 the version replies negative and can no longer be used.
        ("EXSET w v ABS 9223372036854775807", ok()),
        ("EXSET w v WITHVERSION", int(i64::MIN)),
        ("EXGET w", exget("v", i64::MIN)),
        ("EXCAS w v -9223372036854775808", se()),
        ("EXSET w v VER -9223372036854775808", se()),
        ("EXSET w v VER 0 WITHVERSION", int(i64::MIN + 1)),
        // COPY works through the copy callback.
        ("EXSET src v FLAGS 4", ok()),
        ("COPY src dst", int(1)),
        ("EXGET dst WITHFLAGS", arr(&[bulk("v"), int(1), int(4)])),
        ("EXSET dst w", ok()),
        ("EXGET src", exget("v", 1)),
    ])
    .await;
    // Key expiry also restarts versions at 1.
    s.t("EXSET x a ABS 40 PX 100", ok()).await;
    sleep_ms(300).await;
    s.t("EXSET x b WITHVERSION", int(1)).await;
    // DUMP / RESTORE round-trip through the RDB callbacks.
    s.t("EXSET r val ABS 77 FLAGS 6", ok()).await;
    let dump = s.line("DUMP r").await;
    let payload = dump.splitn(2, |&b| b == b'\n').nth(1).unwrap();
    let payload = &payload[..payload.len() - 2];
    s.ta(&[b"RESTORE", b"r2", b"0", payload], ok()).await;
    s.t("EXGET r2 WITHFLAGS", arr(&[bulk("val"), int(77), int(6)])).await;
    let usage = s.int("MEMORY USAGE r").await;
    assert!(usage > 3, "MEMORY USAGE {usage}");
}

/// Scripts and transactions pass module replies through unchanged.
#[tokio::test]
async fn eval_and_multi() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    s.t("SET lk tok", ok()).await;
    let cad = "return redis.call('CAD', KEYS[1], ARGV[1])";
    assert_eq!(s.eval(cad, &["1", "lk", "tok"]).await, int(1));
    assert_eq!(s.eval(cad, &["1", "lk", "tok"]).await, int(-1));
    s.t("EXSET c v1", ok()).await;
    let excas = "return redis.call('EXCAS', KEYS[1], ARGV[1], ARGV[2])";
    assert_eq!(s.eval(excas, &["1", "c", "v2", "1"]).await, excas_ok(2));
    assert_eq!(s.eval(excas, &["1", "c", "v3", "1"]).await, excas_failed("v2", 2));
    assert_eq!(s.eval(excas, &["1", "nokey", "v3", "1"]).await, int(-1));
    s.steps(&[
        ("MULTI", ok()),
        ("EXSET m a", st("QUEUED")),
        ("EXINCRBY n 1", st("QUEUED")),
        ("EXEC", arr(&[ok(), int(1)])),
    ])
    .await;
}

/// Hostile input gives the module's exact replies (errors, or a defined
/// result), never a crashed server.
#[tokio::test]
async fn hostile_input_never_crashes() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    let big = "9".repeat(6000);
    let cases = [
        ("EXSET k v EX 9223372036854775807".to_string(), se()),
        ("EXSET k v PX 9223372036854775807".to_string(), se()),
        ("EXSET k v EXAT 9223372036854775807".to_string(), se()),
        // An absolute time far in the future is a valid one.
        ("EXSET k v PXAT 9223372036854775807".to_string(), ok()),
        ("CAS k v w EX 9223372036854775807".to_string(), se()),
        ("EXGAE k EX 9223372036854775807".to_string(), se()),
        (format!("EXINCRBYFLOAT f {big}"), err("ERR value is not a float")),
        (
            format!("EXINCRBYFLOAT f 1 MIN {big}"),
            err("ERR min or max is specified, but not valid"),
        ),
        (format!("EXINCRBY i {big}"), err("ERR value is not an integer")),
        ("EXSET k v FLAGS 99999999999999999999999".to_string(), se()),
        ("EXSETVER k 99999999999999999999".to_string(), se()),
    ];
    for (c, want) in &cases {
        let r = s.line(c).await;
        assert_eq!(show(&r), show(want), "{c:.80}");
    }
    // Long-double extremes: 1e4932 is in range (a 4933-digit value); adding
    // a subnormal or a hex float to it leaves it unchanged at that precision.
    let huge = s.line("EXINCRBYFLOAT f 1e4932").await;
    assert!(huge.starts_with(b"$4933\r\n1000000000000000000006"), "{}", show(&huge));
    assert_eq!(show(&s.line("EXINCRBYFLOAT f 1e-4950").await), show(&huge));
    assert_eq!(show(&s.line("EXINCRBYFLOAT f 0x1p3").await), show(&huge));
    s.t("EXSET k v EX 9223372036854775807", se()).await;
    s.t("EXINCRBYFLOAT f2 0x1p3", bulk("8")).await;
    let mut args: Vec<Vec<u8>> = vec![b"EXSET".to_vec(), b"k".to_vec(), b"v".to_vec()];
    for i in 0..2000 {
        args.push(if i % 2 == 0 {
            b"NX".to_vec()
        } else {
            vec![0, 255, b'\r']
        });
    }
    let r = s.raw(&args).await;
    assert_eq!(show(&r), show(&se()));
    s.t("PING", st("PONG")).await;
}
