//! `verrou::connect` with `postgres://` and `postgresql://` URLs on a real
//! server: locks, fencing tokens and the versioned store; verrou's own URL
//! parameters; and the errors for bad URLs and a missing schema.
#![cfg(feature = "postgres")]
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_testkit::server::PostgresServer;
use verrou::{CasOutcome, CreateOutcome, Error, Expiry, LockOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_urls_connect_lock_fence_and_store() {
    let server = PostgresServer::start().await.expect("start postgres");
    for (scheme, schema) in [("postgres", "verrou"), ("postgresql", "app_locks")] {
        let url = format!(
            "{scheme}://verrou@127.0.0.1:{}/postgres?schema={schema}&response_timeout=1s&pool_size=4&application_name=t",
            server.port()
        );
        let backend = verrou::connect(&url).await.expect("connect");
        assert_eq!(backend.locks().capabilities().name, "postgres");
        assert!(backend.locks().capabilities().release_notifications, "on by default");
        assert!(!backend.description().contains('?'), "{}", backend.description());
        let locks = backend
            .manager(LockOptions::with_ttl(Duration::from_millis(500)).acquire_timeout(Duration::from_secs(5)))
            .expect("manager");
        let first = locks.lock("job").await.expect("lock");
        assert!(locks.try_lock("job").await.expect("try_lock").is_none(), "held twice");
        let fence = first.fencing_token().expect("fencing token");
        first.release().await.expect("release");
        let second = locks.lock("job").await.expect("lock again");
        assert!(second.fencing_token().expect("fencing token") > fence);
        second.release().await.expect("release");

        let store = backend.store().expect("a store");
        let CreateOutcome::Created { version } = store.create("v", b"1", Expiry::Keep).await.expect("create") else {
            panic!("created");
        };
        let cas = store
            .compare_and_set("v", version, b"2", Expiry::Keep)
            .await
            .expect("cas");
        assert!(matches!(cas, CasOutcome::Written { .. }), "{cas:?}");
        let tables = server
            .psql(&format!("SELECT count(*) FROM {schema}.kv"))
            .await
            .expect("psql");
        assert_eq!(tables, "1", "the schema parameter names where the tables are");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notification_parameters_turn_listen_on() {
    let server = PostgresServer::start().await.expect("start postgres");
    let direct = server.url();
    let encoded: String = form_urlencoded::byte_serialize(direct.as_bytes()).collect();
    for url in [
        format!("{direct}?release_notifications=true"),
        format!("{direct}?listen_url={encoded}"),
    ] {
        let backend = verrou::connect(&url).await.expect("connect");
        assert!(backend.locks().capabilities().release_notifications, "{url}");
    }
    let off = verrou::connect(&format!("{direct}?release_notifications=false"))
        .await
        .expect("connect");
    assert!(!off.locks().capabilities().release_notifications);
    match verrou::connect::check_url(&format!("{direct}?listen_url=nonsense%3D%3D")) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("listen_url"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn bad_postgres_urls_say_what_to_fix() {
    for (url, says) in [
        ("postgres://h/db?schema=Bad-Name", "schema name"),
        ("postgres://h/db?create_schema=maybe", "create_schema"),
        ("postgres://h/db?response_timeout=soon", "response_timeout"),
        ("postgres://h/db?nonsense=1", "response_timeout, pool_size"),
        ("postgres://h/db?release_notifications=perhaps", "release_notifications"),
        ("postgres://", "no host"),
    ] {
        match verrou::connect::check_url(url) {
            Err(Error::InvalidArgument(m)) => assert!(m.contains(says), "{url}: {m}"),
            other => panic!("{url}: {other:?}"),
        }
    }
    let with_password = verrou::connect::check_url("postgres://u:secret@h/db?nonsense=1").expect_err("refused");
    assert!(!with_password.to_string().contains("secret"), "{with_password}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_schema_is_a_typed_refusal_when_creation_is_off() {
    let server = PostgresServer::start().await.expect("start postgres");
    let url = format!(
        "postgres://verrou@127.0.0.1:{}/postgres?schema=absent&create_schema=false",
        server.port()
    );
    let err = verrou::connect(&url).await.expect_err("no schema");
    assert!(
        matches!(
            err,
            verrou::Error::Refused {
                reason: verrou::RefusalReason::MissingSchema,
                ..
            }
        ),
        "{err}"
    );
}
