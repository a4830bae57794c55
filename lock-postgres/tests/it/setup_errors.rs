//! A wrong setup gets a clear typed error, never a panic or a wrong answer:
//! a missing schema (at build and when dropped later), a user without
//! privileges, a bad schema name or key.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::{Error, LockBackend, LockToken, RefusalReason, VersionedStore};
use lock_postgres::PostgresBackend;
use lock_testkit::server::PostgresServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_errors_are_typed() {
    let server = PostgresServer::start().await.expect("start postgres");
    let url = server.url();
    let token = LockToken::generate().expect("token");
    let ttl = Duration::from_secs(1);

    // Schema missing and creation off: refused at build.
    let err = PostgresBackend::builder(&url)
        .expect("url")
        .create_schema(false)
        .build()
        .await
        .expect_err("no schema yet");
    assert!(
        matches!(
            err,
            Error::Refused {
                reason: RefusalReason::MissingSchema,
                ..
            }
        ),
        "{err}"
    );

    // Created, then dropped under a running backend: every call says so.
    let backend = PostgresBackend::connect(&url).await.expect("connect");
    server.psql("DROP SCHEMA verrou CASCADE").await.expect("drop");
    let err = backend.try_acquire("k", &token, ttl).await.expect_err("no table");
    assert!(
        matches!(
            err,
            Error::Refused {
                reason: RefusalReason::MissingSchema,
                ..
            }
        ),
        "{err}"
    );
    assert!(!err.is_outcome_unknown(), "{err}");
    let err = backend.get("k").await.expect_err("no table");
    assert!(
        matches!(
            err,
            Error::Refused {
                reason: RefusalReason::MissingSchema,
                ..
            }
        ),
        "{err}"
    );
    // Building again puts it back.
    let backend = PostgresBackend::connect(&url).await.expect("connect");
    backend.try_acquire("k", &token, ttl).await.expect("acquire");

    // A user without privileges on the schema.
    server
        .psql("CREATE ROLE stranger LOGIN; REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        .await
        .expect("role");
    let stranger = format!("postgres://stranger@127.0.0.1:{}/postgres", server.port());
    let err = match PostgresBackend::builder(&stranger).expect("url").build().await {
        Err(e) => e,
        Ok(b) => b.try_acquire("k", &token, ttl).await.expect_err("no privilege"),
    };
    assert!(
        matches!(
            err,
            Error::Refused {
                reason: RefusalReason::PermissionDenied,
                ..
            }
        ),
        "{err}"
    );

    // Bad names and keys are invalid arguments, sent nowhere.
    let err = PostgresBackend::builder(&url)
        .expect("url")
        .schema("Robert'); DROP")
        .build()
        .await;
    assert!(matches!(err, Err(Error::InvalidArgument(_))), "{err:?}");
    for key in ["", "nul\0byte", &"k".repeat(lock_postgres::MAX_KEY_BYTES + 1)] {
        let err = backend.try_acquire(key, &token, ttl).await.expect_err("bad key");
        assert!(matches!(err, Error::InvalidArgument(_)), "{key:?}: {err}");
    }
    assert!(matches!(
        PostgresBackend::builder("postgres://h/db?sslmode=nonsense"),
        Err(Error::InvalidArgument(_))
    ));
}
