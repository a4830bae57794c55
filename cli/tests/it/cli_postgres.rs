//! The `verrou` command with a `postgres://` URL, as a real subprocess
//! against a real PostgreSQL server.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use std::process::Stdio;

use lock_testkit::server::PostgresServer;
use tokio::process::Command;

const BUSY: i32 = 75;

fn verrou(url: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_verrou"));
    cmd.env("VERROU_URL", url).stdin(Stdio::null()).kill_on_drop(true);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_and_values_work_with_a_postgres_url() {
    let server = PostgresServer::start().await.expect("start postgres");
    let url = server.url();

    // A lock held by one command makes a --no-wait lock of another busy.
    let out = verrou(&url)
        .args([
            "lock",
            "job",
            "--",
            "sh",
            "-c",
            "\"$VERROU\" lock --no-wait job -- true; echo $?",
        ])
        .env("VERROU", env!("CARGO_BIN_EXE_verrou"))
        .output()
        .await
        .expect("run verrou");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), BUSY.to_string(), "{out:?}");
    // Released afterwards.
    let out = verrou(&url)
        .args(["lock", "--no-wait", "job", "--", "true"])
        .output()
        .await
        .expect("run");
    assert!(out.status.success(), "{out:?}");

    let out = verrou(&url)
        .args(["--json", "set", "k", "one"])
        .output()
        .await
        .expect("run");
    assert!(out.status.success(), "{out:?}");
    let out = verrou(&url).args(["get", "k"]).output().await.expect("run");
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("one"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_says_whether_the_server_replicates_synchronously() {
    use lock_testkit::server::PostgresPair;

    async fn status(url: &str, json: bool) -> (String, Option<i32>) {
        let mut cmd = verrou(url);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.args(["status", "probe"]).output().await.expect("run verrou status");
        (String::from_utf8_lossy(&out.stdout).into_owned(), out.status.code())
    }

    // One server: no synchronous standby.
    let single = PostgresServer::start().await.expect("start postgres");
    let (text, code) = status(&single.url(), false).await;
    assert_eq!(code, Some(1), "free: {text}");
    assert!(text.contains("not replica-acknowledged"), "{text}");
    let (json, _) = status(&single.url(), true).await;
    assert!(json.contains("\"replica_ack\":false"), "{json}");
    drop(single);

    // A primary with a synchronous standby.
    let pair = PostgresPair::start(PostgresServer::builder(), true)
        .await
        .expect("start a synchronous pair");
    let (text, code) = status(&pair.primary().url(), false).await;
    assert_eq!(code, Some(1), "free: {text}");
    assert!(
        text.contains("are replica-acknowledged (synchronous replication)"),
        "{text}"
    );
    let (json, _) = status(&pair.primary().url(), true).await;
    assert!(json.contains("\"replica_ack\":true"), "{json}");
    assert!(json.contains("\"backend\":\"postgres\""), "{json}");
}
