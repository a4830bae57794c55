//! The PostgreSQL harness: a real server starts, answers, survives a kill
//! with what it confirmed, pauses and resumes, and is gone after drop.
#![allow(clippy::expect_used, missing_docs)]

use std::time::Duration;

use lock_testkit::server::PostgresServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_starts_answers_and_keeps_confirmed_writes_across_a_kill() {
    let server = PostgresServer::start().await.expect("start postgres");
    assert_eq!(server.psql("SELECT 1 + 1").await.expect("psql"), "2");
    assert_eq!(server.psql("SHOW fsync").await.expect("psql"), "on");
    server
        .psql("CREATE TABLE t (v int); INSERT INTO t VALUES (42)")
        .await
        .expect("write");
    server.kill().expect("kill");
    assert!(!server.is_running());
    assert!(
        server.psql("SELECT 1").await.is_err(),
        "a killed server answers nothing"
    );
    server.restart().await.expect("restart");
    assert_eq!(server.psql("SELECT v FROM t").await.expect("read"), "42");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_answers_after_resume_and_drop_removes_everything() {
    let server = PostgresServer::start().await.expect("start postgres");
    let dir = server.dir().to_path_buf();
    let pid = server.pid().expect("running");
    server.pause().expect("pause");
    let stalled = tokio::time::timeout(Duration::from_millis(300), server.psql("SELECT 1")).await;
    assert!(stalled.is_err(), "a paused server must not answer");
    server.resume().expect("resume");
    assert_eq!(server.psql("SELECT 1").await.expect("after resume"), "1");
    drop(server);
    assert!(!dir.exists(), "the directory is removed");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the postmaster is gone"
    );
}
