//! Shared helpers: servers with the module loaded, RESP builders for the
//! expected replies, and a session that checks replies byte for byte.

#![allow(dead_code, unused_imports, clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test helpers: each binary uses a subset; failing loudly is the point

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

pub use lock_testkit::server::{RedisServer, RedisServerBuilder, ReplicatedPair, RespClient, TAIR_MODULE_ENV};

const BUILD_HINT: &str = "run `cargo build --release -p tair-module` before `cargo test -p tair-module` \
     (or set VERROU_TAIR_MODULE to a built libtair_module.so)";

/// The module file the servers load; fails (never skips) when it is missing
/// or, for the default path, older than the module's sources.
pub fn module_path() -> PathBuf {
    let path = match lock_testkit::server::tair_module_path() {
        Ok(p) => p,
        Err(e) => panic!("{e}\n{BUILD_HINT}"),
    };
    if std::env::var_os(TAIR_MODULE_ENV).is_none_or(|v| v.is_empty()) {
        let built = mtime(&path);
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let newest_source = ["src", "csrc", "build.rs"]
            .iter()
            .flat_map(|p| files(&crate_dir.join(p)))
            .filter_map(|f| mtime(&f))
            .max();
        if let (Some(built), Some(src)) = (built, newest_source) {
            assert!(
                built >= src,
                "{} is older than the module's sources: {BUILD_HINT}",
                path.display()
            );
        }
    }
    path
}

fn mtime(p: &Path) -> Option<SystemTime> {
    p.metadata().and_then(|m| m.modified()).ok()
}

fn files(p: &Path) -> Vec<PathBuf> {
    if p.is_dir() {
        std::fs::read_dir(p)
            .map(|rd| rd.flatten().flat_map(|e| files(&e.path())).collect())
            .unwrap_or_default()
    } else {
        vec![p.to_path_buf()]
    }
}

/// A server builder with the module loaded.
pub fn builder() -> RedisServerBuilder {
    RedisServer::builder()
        .module(module_path())
        .args(["--enable-debug-command", "yes"])
}

/// Starts one server with the module.
pub async fn server() -> RedisServer {
    match builder().start().await {
        Ok(s) => s,
        Err(e) => panic!("could not start redis-server with the module: {e}"),
    }
}

// ---- expected replies, as RESP2 bytes ----

/// `+OK`
pub fn ok() -> Vec<u8> {
    st("OK")
}
/// A simple string.
pub fn st(s: &str) -> Vec<u8> {
    format!("+{s}\r\n").into_bytes()
}
/// An integer.
pub fn int(n: i64) -> Vec<u8> {
    format!(":{n}\r\n").into_bytes()
}
/// A nil bulk string.
pub fn nil() -> Vec<u8> {
    b"$-1\r\n".to_vec()
}
/// A bulk string.
pub fn bulk(b: impl AsRef<[u8]>) -> Vec<u8> {
    let b = b.as_ref();
    let mut out = format!("${}\r\n", b.len()).into_bytes();
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
    out
}
/// An error reply (the text includes its code, e.g. `ERR ...`).
pub fn err(s: &str) -> Vec<u8> {
    format!("-{s}\r\n").into_bytes()
}
/// An array of already-encoded replies.
pub fn arr(items: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", items.len()).into_bytes();
    for i in items {
        out.extend_from_slice(i);
    }
    out
}
/// `EXGET` reply.
pub fn exget(value: &str, version: i64) -> Vec<u8> {
    arr(&[bulk(value), int(version)])
}
/// `EXCAS` success reply.
pub fn excas_ok(version: i64) -> Vec<u8> {
    arr(&[ok(), st(""), int(version)])
}
/// `EXCAS` version-mismatch reply.
pub fn excas_failed(value: &str, version: i64) -> Vec<u8> {
    arr(&[st("CAS_FAILED"), bulk(value), int(version)])
}

/// `ERR syntax error`
pub fn se() -> Vec<u8> {
    err("ERR syntax error")
}
/// `WRONGTYPE ...`
pub fn wt() -> Vec<u8> {
    err("WRONGTYPE Operation against a key holding the wrong kind of value")
}
/// `ERR update version is stale`
pub fn stale() -> Vec<u8> {
    err("ERR update version is stale")
}
/// The arity error, which names the command in lower case.
pub fn arity(cmd: &str) -> Vec<u8> {
    err(&format!("ERR wrong number of arguments for '{cmd}' command"))
}
/// `ERR value is not an integer`
pub fn not_int() -> Vec<u8> {
    err("ERR value is not an integer")
}
/// `ERR value is not a float`
pub fn not_float() -> Vec<u8> {
    err("ERR value is not a float")
}
/// `ERR increment or decrement would overflow`
pub fn overflow() -> Vec<u8> {
    err("ERR increment or decrement would overflow")
}
/// `ERR min or max is specified, but not valid`
pub fn min_max() -> Vec<u8> {
    err("ERR min or max is specified, but not valid")
}

/// Shows bytes readably in assertion messages.
pub fn show(b: &[u8]) -> String {
    b.escape_ascii().to_string()
}

/// Splits a command line on spaces (values in these tests have none).
pub fn words(line: &str) -> Vec<Vec<u8>> {
    line.split_whitespace().map(|w| w.as_bytes().to_vec()).collect()
}

/// One connection that checks replies.
pub struct Session {
    pub client: RespClient,
    pub steps: usize,
}

impl Session {
    pub async fn new(server: &RedisServer) -> Session {
        Session {
            client: server.client().await.expect("connect"),
            steps: 0,
        }
    }

    /// Sends a command and returns the raw reply.
    pub async fn raw<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Vec<u8> {
        self.steps += 1;
        match self.client.cmd_raw(args).await {
            Ok(r) => r,
            Err(e) => panic!(
                "command {:?} failed at the transport level: {e}",
                args.iter().map(|a| show(a.as_ref())).collect::<Vec<_>>()
            ),
        }
    }

    /// Sends a space-separated command line and returns the raw reply.
    pub async fn line(&mut self, line: &str) -> Vec<u8> {
        self.raw(&words(line)).await
    }

    /// Checks the exact reply bytes of a command line.
    pub async fn t(&mut self, line: &str, want: Vec<u8>) {
        let got = self.line(line).await;
        assert_eq!(
            show(&got),
            show(&want),
            "`{line}`: got {} want {}",
            show(&got),
            show(&want)
        );
    }

    /// Checks the exact reply bytes of a command given as byte arguments.
    pub async fn ta(&mut self, args: &[&[u8]], want: Vec<u8>) {
        let got = self.raw(args).await;
        assert_eq!(
            show(&got),
            show(&want),
            "`{}`",
            args.iter().map(|a| show(a)).collect::<Vec<_>>().join(" ")
        );
    }

    /// Runs a list of (line, reply) steps.
    pub async fn steps(&mut self, steps: &[(&str, Vec<u8>)]) {
        for (line, want) in steps {
            self.t(line, want.clone()).await;
        }
    }

    /// An integer reply.
    pub async fn int(&mut self, line: &str) -> i64 {
        let got = self.line(line).await;
        let s = std::str::from_utf8(&got).unwrap_or_default();
        match s.strip_prefix(':').and_then(|r| r.strip_suffix("\r\n")) {
            Some(n) => n
                .parse()
                .unwrap_or_else(|_| panic!("`{line}`: bad integer {}", show(&got))),
            None => panic!("`{line}`: expected an integer, got {}", show(&got)),
        }
    }

    /// Checks that an integer reply is within `lo..=hi` (TTL readings).
    pub async fn int_in(&mut self, line: &str, lo: i64, hi: i64) {
        let n = self.int(line).await;
        assert!((lo..=hi).contains(&n), "`{line}`: {n} not in {lo}..={hi}");
    }
}

/// Sleeps (real time; the servers run in real time).
pub async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

impl Session {
    /// `EVAL script args...` (the script may contain spaces).
    pub async fn eval(&mut self, script: &str, args: &[&str]) -> Vec<u8> {
        let mut all: Vec<&[u8]> = vec![b"EVAL", script.as_bytes()];
        all.extend(args.iter().map(|a| a.as_bytes()));
        self.raw(&all).await
    }

    /// `EVAL script 0` returning an integer.
    pub async fn eval_int(&mut self, script: &str, args: &[&str]) -> i64 {
        let mut all = vec!["0"];
        all.extend_from_slice(args);
        let got = self.eval(script, &all).await;
        let s = String::from_utf8_lossy(&got);
        s.trim_start_matches(':')
            .trim_end()
            .parse()
            .unwrap_or_else(|_| panic!("eval: {}", show(&got)))
    }
}

/// What one key holds, as the server reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyState {
    pub key: Vec<u8>,
    /// Raw `TYPE` reply.
    pub kind: Vec<u8>,
    /// Raw `EXGET key WITHFLAGS` (exString) or `GET key` (string) reply.
    pub value: Vec<u8>,
    /// `PTTL` (-1 = persistent).
    pub pttl: i64,
}

/// Every key of the database, sorted by name.
pub async fn snapshot(s: &mut Session) -> Vec<KeyState> {
    let keys = s.client.cmd(&["KEYS", "*"]).await.expect("KEYS");
    let mut keys: Vec<Vec<u8>> = keys
        .as_array()
        .expect("KEYS array")
        .iter()
        .map(|k| k.as_bytes().expect("key").to_vec())
        .collect();
    keys.sort();
    let mut out = Vec::new();
    for key in keys {
        let kind = s.raw(&[b"TYPE".as_slice(), &key]).await;
        let value = if kind == b"+exstrtype\r\n" {
            s.raw(&[b"EXGET".as_slice(), &key, b"WITHFLAGS"]).await
        } else {
            s.raw(&[b"GET".as_slice(), &key]).await
        };
        let pttl = s.raw(&[b"PTTL".as_slice(), &key]).await;
        let pttl = String::from_utf8_lossy(&pttl)
            .trim_start_matches(':')
            .trim_end()
            .parse()
            .expect("PTTL");
        out.push(KeyState { key, kind, value, pttl });
    }
    out
}

/// Same keys, types, values, versions and flags; TTLs within `tol_ms` of
/// each other (and persistent keys persistent).
pub fn assert_same_data(a: &[KeyState], b: &[KeyState], tol_ms: i64) {
    let names = |v: &[KeyState]| v.iter().map(|k| show(&k.key)).collect::<Vec<_>>();
    assert_eq!(names(a), names(b), "key sets differ");
    for (x, y) in a.iter().zip(b) {
        let k = show(&x.key);
        assert_eq!(show(&x.kind), show(&y.kind), "TYPE {k}");
        assert_eq!(show(&x.value), show(&y.value), "value of {k}");
        if x.pttl < 0 || y.pttl < 0 {
            assert_eq!(x.pttl, y.pttl, "PTTL of {k}");
        } else {
            assert!(
                (x.pttl - y.pttl).abs() <= tol_ms,
                "PTTL of {k}: {} vs {}",
                x.pttl,
                y.pttl
            );
        }
    }
}

/// Writes a varied data set: every write command, binary values, flags,
/// TTLs, versions 0 and past 2^63, a large value, and plain strings.
pub async fn populate(s: &mut Session) {
    s.t("EXSET e1 v1", ok()).await;
    s.ta(
        &[
            b"EXSET",
            b"e2",
            b"bin\0\r\n\xff",
            b"FLAGS",
            b"4294967295",
            b"ABS",
            b"77",
            b"EX",
            b"1000",
        ],
        ok(),
    )
    .await;
    s.ta(&[b"EXSET", b"e3", b""], ok()).await;
    s.t("EXSET zero v ABS 0 FLAGS 1", ok()).await;
    s.t("EXSET huge v ABS 9223372036854775807", ok()).await;
    s.t("EXSET huge v2 WITHVERSION", int(i64::MIN)).await;
    s.t("EXAPPEND huge x", int(i64::MIN + 1)).await;
    s.t("EXINCRBY n 42 EX 2000 WITHVERSION", arr(&[int(42), int(1)])).await;
    s.t("EXINCRBY n -2 KEEPTTL DEF 7", int(40)).await;
    s.t("EXINCRBYFLOAT f 0.1", bulk("0.1")).await;
    s.t("EXINCRBYFLOAT f 0.2 PX 3000000", bulk("0.3")).await;
    s.t("EXSET c a FLAGS 3", ok()).await;
    s.t("EXCAS c b 1 EX 1500", excas_ok(2)).await;
    s.t("EXCAS c c 2 KEEPTTL", excas_ok(3)).await;
    s.t("EXSET p x", ok()).await;
    s.t("EXPREPEND p y VER 1", int(2)).await;
    s.t("EXAPPEND p z ABS 40", int(40)).await;
    s.t("EXSET sv v", ok()).await;
    s.t("EXSETVER sv 123", int(1)).await;
    s.t("EXSET g v FLAGS 9", ok()).await;
    s.t("EXGAE g EX 2500", arr(&[bulk("v"), int(1), int(9)])).await;
    s.t("EXSET gone v", ok()).await;
    s.t("EXCAD gone 1", int(1)).await;
    s.t("SET lock tok EX 1000", ok()).await;
    s.t("CAS lock tok tok2 PX 1800000", int(1)).await;
    s.t("SET plain a", ok()).await;
    s.t("CAS plain a b", int(1)).await;
    s.t("SET del tok", ok()).await;
    s.t("CAD del tok", int(1)).await;
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    s.ta(&[b"EXSET", b"big", &big, b"ABS", b"5"], ok()).await;
}

/// A server's `INFO` field.
pub async fn info_field(srv: &RedisServer, section: &str, field: &str) -> String {
    srv.info(section)
        .await
        .expect("INFO")
        .get(field)
        .cloned()
        .unwrap_or_default()
}
