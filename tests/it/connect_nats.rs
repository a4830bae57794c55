//! `verrou::connect("nats://…")` against a real three-node JetStream
//! cluster: every node in the URL, an R3 bucket, locks and the versioned
//! store through the facade, the lock kinds refused with the reason.
#![cfg(feature = "nats")]
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_testkit::server::NatsCluster;
use verrou::{CreateOutcome, Expiry, LockOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_url_connects_locks_and_stores() {
    let nats = NatsCluster::three().await.expect("start nats");
    let url = format!("{}?bucket=facade&replicas=3&response_timeout=3s", nats.url());
    let backend = verrou::connect(&url).await.expect("connect");
    assert_eq!(backend.locks().capabilities().name, "nats");
    assert!(backend.locks().capabilities().fencing_tokens);
    assert!(backend.description().starts_with("nats://127.0.0.1:"));
    let min_ttl = backend.locks().capabilities().min_ttl;
    assert_eq!(min_ttl, Duration::from_secs(1));

    let locks = backend.manager(LockOptions::with_ttl(min_ttl)).expect("manager");
    let guard = locks.lock("job").await.expect("lock");
    let fence = guard.fencing_token().expect("a fencing token");
    guard.release().await.expect("release");
    let again = locks.lock("job").await.expect("lock again");
    assert!(again.fencing_token().expect("a fencing token") > fence);
    again.release().await.expect("release");

    // A TTL below a whole second is refused, not silently stretched.
    let short = backend.manager(LockOptions::with_ttl(Duration::from_millis(300)));
    assert!(matches!(short, Err(verrou::Error::InvalidArgument(_))), "{short:?}");

    let store = backend.store().expect("a versioned store");
    let created = store.create("config", b"v1", Expiry::Keep).await.expect("create");
    assert!(matches!(created, CreateOutcome::Created { .. }));
    assert_eq!(store.get("config").await.expect("get").expect("present").value, b"v1");

    // No lock kinds: each refused with what the backend lacks.
    let options = LockOptions::with_ttl(min_ttl);
    let refused = [
        backend.semaphores(options.clone()).err(),
        backend.elections(options.clone()).err(),
        backend.rw_locks(options.clone()).err(),
        backend.multi_locks(options).err(),
    ];
    for err in refused {
        assert!(matches!(err, Some(verrou::Error::Unsupported { .. })), "{err:?}");
    }
}

#[tokio::test]
async fn nats_url_with_a_dead_server_fails_with_a_backend_error() {
    let nats = NatsCluster::single().await.expect("start nats");
    let url = format!("{}?connect_timeout=500ms&response_timeout=500ms", nats.url());
    drop(nats);
    let err = verrou::connect(&url).await.expect_err("nothing listens");
    assert!(err.is_backend(), "{err:?}");
    assert!(err.to_string().contains("nats://127.0.0.1:"), "{err}");
}
