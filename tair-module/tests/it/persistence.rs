//! The exString type survives DEBUG RELOAD, a restart from the RDB file, and
//! an AOF rewrite (through the module's aof_rewrite callback) followed by a
//! restart from the AOF.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)] // tests

use crate::common;

use std::time::{Duration, Instant};

use common::*;

/// TTLs keep counting down across a reload; allow for the time it takes.
const TTL_TOLERANCE_MS: i64 = 10_000;

#[tokio::test]
async fn debug_reload_keeps_everything() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    populate(&mut s).await;
    let before = snapshot(&mut s).await;
    let digest = s.line("DEBUG DIGEST").await;
    s.t("DEBUG RELOAD", ok()).await;
    let after = snapshot(&mut s).await;
    assert_same_data(&before, &after, TTL_TOLERANCE_MS);
    assert_eq!(show(&s.line("DEBUG DIGEST").await), show(&digest));
    // Versions continue from the loaded value.
    s.t("EXSET e1 v WITHVERSION", int(2)).await;
    s.t("EXSET huge v WITHVERSION", int(i64::MIN + 2)).await;
}

#[tokio::test]
async fn restart_from_rdb() {
    let srv = server().await;
    let mut s = Session::new(&srv).await;
    populate(&mut s).await;
    let before = snapshot(&mut s).await;
    drop(s);
    srv.restart_keeping_data().await.expect("restart");
    let mut s = Session::new(&srv).await;
    let after = snapshot(&mut s).await;
    assert_same_data(&before, &after, TTL_TOLERANCE_MS);
    s.t("EXINCRBY n 1 WITHVERSION", arr(&[int(41), int(3)])).await;
    s.t("EXCAS c d 3", excas_ok(4)).await;
}

async fn wait_for_rewrite(srv: &RedisServer) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info = srv.info("persistence").await.expect("INFO persistence");
        let get = |k: &str| info.get(k).cloned().unwrap_or_default();
        if get("aof_rewrite_in_progress") == "0" && get("aof_rewrite_scheduled") == "0" {
            assert_eq!(get("aof_last_bgrewrite_status"), "ok");
            return;
        }
        assert!(Instant::now() < deadline, "BGREWRITEAOF did not finish");
        sleep_ms(20).await;
    }
}

fn read_dir_files(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(read_dir_files(&p));
        } else {
            out.push((p.display().to_string(), std::fs::read(&p).unwrap_or_default()));
        }
    }
    out
}

#[tokio::test]
async fn aof_rewrite_then_restart_from_aof() {
    let srv = builder()
        .persistence(true)
        .args(["--aof-use-rdb-preamble", "no", "--appendfsync", "always"])
        .start()
        .await
        .expect("start");
    let mut s = Session::new(&srv).await;
    populate(&mut s).await;
    s.t("BGREWRITEAOF", st("Background append only file rewriting started"))
        .await;
    wait_for_rewrite(&srv).await;
    // The rewritten base file holds our EXSET ... ABS ... FLAGS commands.
    let files = read_dir_files(srv.dir());
    let base = files
        .iter()
        .find(|(name, _)| name.ends_with(".base.aof"))
        .unwrap_or_else(|| panic!("no base AOF among {:?}", files.iter().map(|f| &f.0).collect::<Vec<_>>()));
    let needle = b"$5\r\nEXSET\r\n$4\r\nhuge\r\n$3\r\nv2x\r\n$3\r\nABS\r\n$20\r\n-9223372036854775807\r\n$5\r\nFLAGS\r\n$1\r\n0\r\n";
    assert!(
        base.1.windows(needle.len()).any(|w| w == needle),
        "base AOF lacks the rewritten EXSET:\n{}",
        show(&base.1[..base.1.len().min(2000)])
    );
    // More writes after the rewrite land in the incremental AOF.
    s.t("EXSET after v EX 3000 FLAGS 2", ok()).await;
    s.t("EXGAE e1 EX 4000", arr(&[bulk("v1"), int(1), int(0)])).await;
    s.t("EXSETVER e3 9", int(1)).await;
    s.t("EXCAD zero 0", int(1)).await;
    s.t("CAS lock tok2 tok3 EX 2200", int(1)).await;
    s.t("EXINCRBYFLOAT f 1 KEEPTTL", bulk("1.3")).await;
    s.t("EXSET huge v3", ok()).await;
    // The incremental AOF holds the deterministic forms: absolute version,
    // flags and expiry for EXSET, PEXPIREAT for EXGAE, SET + PEXPIREAT for CAS.
    let files = read_dir_files(srv.dir());
    let incr: Vec<u8> = files
        .iter()
        .filter(|(name, _)| name.ends_with(".incr.aof"))
        .flat_map(|(_, b)| b.clone())
        .collect();
    for needle in [
        &b"$5\r\nEXSET\r\n$5\r\nafter\r\n$1\r\nv\r\n$3\r\nABS\r\n$1\r\n1\r\n$5\r\nFLAGS\r\n$1\r\n2\r\n$4\r\nPXAT\r\n"[..],
        b"$9\r\nPEXPIREAT\r\n$2\r\ne1\r\n",
        b"$8\r\nEXSETVER\r\n$2\r\ne3\r\n$1\r\n9\r\n",
        b"$3\r\nDEL\r\n$4\r\nzero\r\n",
        b"$3\r\nSET\r\n$4\r\nlock\r\n$4\r\ntok3\r\n",
        b"$9\r\nPEXPIREAT\r\n$4\r\nlock\r\n",
        b"$5\r\nEXSET\r\n$1\r\nf\r\n$3\r\n1.3\r\n$3\r\nABS\r\n$1\r\n3\r\n$5\r\nFLAGS\r\n$1\r\n0\r\n$7\r\nKEEPTTL\r\n",
    ] {
        assert!(
            incr.windows(needle.len()).any(|w| w == needle),
            "incremental AOF lacks {}:\n{}",
            show(needle),
            show(&incr)
        );
    }
    assert!(
        !incr.windows(9).any(|w| w == b"\r\nEXGAE\r\n"),
        "EXGAE was propagated verbatim"
    );
    let before = snapshot(&mut s).await;
    drop(s);
    srv.kill().expect("kill");
    srv.restart_keeping_data().await.expect("restart from AOF");
    let mut s = Session::new(&srv).await;
    let after = snapshot(&mut s).await;
    assert_same_data(&before, &after, TTL_TOLERANCE_MS);
    s.t("EXGET huge", exget("v3", i64::MIN + 2)).await;
}
