//! `verrou::connect("etcd://…")` against a real three-member etcd cluster:
//! every member in the URL, locks and the versioned store through the
//! facade, and a refused password.
#![cfg(feature = "etcd")]
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_testkit::server::EtcdCluster;
use verrou::{CreateOutcome, Expiry, LockOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_url_connects_locks_and_stores() {
    let etcd = EtcdCluster::three().await.expect("start etcd");
    let url = format!("{}?namespace=facade/&request_timeout=3s", etcd.url());
    let backend = verrou::connect(&url).await.expect("connect");
    assert_eq!(backend.locks().capabilities().name, "etcd");
    assert!(backend.locks().capabilities().fencing_tokens);
    assert!(backend.description().starts_with("etcd://127.0.0.1:"));
    let min_ttl = backend.locks().capabilities().min_ttl;
    assert!(min_ttl >= Duration::from_secs(1), "{min_ttl:?}");

    let locks = backend.manager(LockOptions::with_ttl(min_ttl)).expect("manager");
    let guard = locks.lock("job").await.expect("lock");
    let fence = guard.fencing_token().expect("a fencing token");
    guard.release().await.expect("release");
    let again = locks.lock("job").await.expect("lock again");
    assert!(again.fencing_token().expect("a fencing token") > fence);
    again.release().await.expect("release");

    // A TTL below the server's minimum is refused, not silently stretched.
    let short = backend.manager(LockOptions::with_ttl(Duration::from_millis(300)));
    assert!(matches!(short, Err(verrou::Error::InvalidArgument(_))), "{short:?}");

    let store = backend.store().expect("a versioned store");
    let created = store.create("config", b"v1", Expiry::Keep).await.expect("create");
    assert!(matches!(created, CreateOutcome::Created { .. }));
    assert_eq!(store.get("config").await.expect("get").expect("present").value, b"v1");
}

#[tokio::test]
async fn etcd_url_with_a_dead_endpoint_fails_with_a_backend_error() {
    let etcd = EtcdCluster::single().await.expect("start etcd");
    let url = format!("{}?connect_timeout=500ms&request_timeout=500ms", etcd.url());
    drop(etcd);
    let err = verrou::connect(&url).await.expect_err("nothing listens");
    assert!(err.is_backend(), "{err:?}");
    assert!(err.to_string().contains("etcd://127.0.0.1:"), "{err}");
}
