//! Credentials never appear in Debug output, error messages or logs: a
//! server with `requirepass` and an ACL user, every log event captured.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{LockBackend, LockManager, LockOptions, LockToken};
use lock_redis_lua::{OnShortfall, RedisLuaBackend, RedisLuaBuilder, ReplicaAck};
use lock_testkit::server::RedisServer;

const DEFAULT_PASSWORD: &str = "default-pw-Zq81xK";
const ACL_PASSWORD: &str = "alice-pw-Vt55mR";
const WRONG_PASSWORD: &str = "wrong-pw-Hh20cB";

/// A tracing subscriber that keeps every event's text, at every level.
#[derive(Clone, Default)]
struct Capture {
    lines: Arc<Mutex<Vec<String>>>,
    ids: Arc<AtomicU64>,
}

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={:?}", field.name(), value));
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut line = format!("span {}", span.metadata().name());
        span.record(&mut Fields(&mut line));
        self.lines.lock().unwrap().push(line);
        tracing::span::Id::from_u64(self.ids.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut line = String::from("record");
        values.record(&mut Fields(&mut line));
        self.lines.lock().unwrap().push(line);
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut line = format!("{} {}", event.metadata().level(), event.metadata().target());
        event.record(&mut Fields(&mut line));
        self.lines.lock().unwrap().push(line);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

fn assert_clean(what: &str, text: &str) {
    for secret in [DEFAULT_PASSWORD, ACL_PASSWORD, WRONG_PASSWORD] {
        assert!(!text.contains(secret), "{what} leaks a password: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_stay_out_of_debug_errors_and_logs() {
    let capture = Capture::default();
    tracing::subscriber::set_global_default(capture.clone()).expect("the only subscriber of this binary");

    let server = RedisServer::builder()
        .args(["--requirepass", DEFAULT_PASSWORD])
        .args([
            "--user",
            "alice",
            "on",
            &format!(">{ACL_PASSWORD}"),
            "~*",
            "&*",
            "+@all",
        ])
        .start()
        .await
        .expect("start");
    let port = server.port();
    let default_url = format!("redis://:{DEFAULT_PASSWORD}@127.0.0.1:{port}/0");
    let acl_url = format!("redis://alice:{ACL_PASSWORD}@127.0.0.1:{port}");
    let wrong_url = format!("redis://alice:{WRONG_PASSWORD}@127.0.0.1:{port}");

    let builder = RedisLuaBuilder::url(acl_url.clone())
        .replica_ack(ReplicaAck::new(1, Duration::from_millis(50)).on_shortfall(OnShortfall::MarkUnconfirmed))
        .release_notifications(true);
    assert_clean("builder Debug", &format!("{builder:?}"));
    assert!(format!("{builder:?}").contains(&port.to_string()));
    let acl = builder.build().await.expect("ACL user connects");
    assert_clean("backend Debug", &format!("{acl:?}"));
    let with_password = RedisLuaBackend::connect(&default_url)
        .await
        .expect("requirepass connects");
    assert_clean("backend Debug", &format!("{with_password:?}"));
    let cluster_builder = RedisLuaBuilder::cluster([acl_url.clone(), default_url.clone()]);
    assert_clean("cluster builder Debug", &format!("{cluster_builder:?}"));

    // Wrong password, missing password, bad URLs: clear errors, no secrets.
    for url in [
        wrong_url.clone(),
        format!("redis://127.0.0.1:{port}"),
        format!("redis://alice:{WRONG_PASSWORD}@127.0.0.1:notaport"),
        format!("rediz://alice:{WRONG_PASSWORD}@127.0.0.1:{port}"),
    ] {
        let err = RedisLuaBackend::connect(&url).await.expect_err("refused");
        assert_clean("error Display", &err.to_string());
        assert_clean("error Debug", &format!("{err:?}"));
    }
    let err = RedisLuaBuilder::cluster([wrong_url.clone()])
        .build()
        .await
        .expect_err("refused");
    assert_clean("cluster error", &format!("{err:?} {err}"));

    // Locks through the manager (ACL user), then faults so that the
    // renewer, the release on drop and the notifier all log.
    let locks = LockManager::with_options(acl.clone(), LockOptions::with_ttl(Duration::from_millis(300))).unwrap();
    let guard = locks.lock("secret-lock").await.expect("lock");
    let waiter = {
        let acl = acl.clone();
        tokio::spawn(async move { acl.wait_for_release("secret-lock", Duration::from_millis(200)).await })
    };
    waiter.await.unwrap();
    server.kill().expect("kill");
    tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("lost() fires once renewals fail past the deadline");
    let err = acl
        .try_acquire("secret-lock", &LockToken::generate().unwrap(), Duration::from_secs(1))
        .await
        .expect_err("server down");
    assert_clean("error while down", &format!("{err:?} {err}"));
    drop(guard);
    // Synchronise on the drop's background release logging its failure.
    let give_up = tokio::time::Instant::now() + Duration::from_secs(10);
    while !capture
        .lines
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.contains("background release"))
    {
        assert!(tokio::time::Instant::now() < give_up, "the drop's release never logged");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let lines = capture.lines.lock().unwrap().clone();
    assert!(
        lines.iter().any(|l| l.contains("renewal")),
        "the capture missed the renewer's failure logs: {lines:?}"
    );
    for line in &lines {
        assert_clean("a log event", line);
    }
}
