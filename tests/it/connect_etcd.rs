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
    let url = format!("{}?namespace=facade/&response_timeout=3s", etcd.url());
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
    let url = format!("{}?connect_timeout=500ms&response_timeout=500ms", etcd.url());
    drop(etcd);
    let err = verrou::connect(&url).await.expect_err("nothing listens");
    assert!(err.is_backend(), "{err:?}");
    assert!(err.to_string().contains("etcd://127.0.0.1:"), "{err}");
}

/// Every lock kind through the `Backend` of an `etcd://` URL: bounds hold,
/// holders exclude, a waiting writer and a multi-permit waiter get in, the
/// leader's term is its fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_url_gives_every_lock_kind() {
    let etcd = EtcdCluster::single().await.expect("start etcd");
    let backend = verrou::connect(&etcd.url()).await.expect("connect");
    let caps = backend.locks().capabilities();
    assert!(caps.semaphores && caps.rw_locks && caps.leader_election && caps.multi_key_locks);
    let options = LockOptions::with_ttl(caps.min_ttl).acquire_timeout(caps.min_ttl * 10);

    let semaphores = backend.semaphores(options.clone()).expect("semaphores");
    let jobs = semaphores.semaphore("jobs", 2).expect("semaphore");
    let first = jobs.acquire(1).await.expect("permit 1");
    let second = jobs.acquire(1).await.expect("permit 2");
    assert!(first.fencing_token() < second.fencing_token(), "permits are fenced");
    assert!(jobs.try_acquire(1).await.expect("try").is_none(), "a third permit of 2");
    first.release().await.expect("release");
    second.release().await.expect("release");
    let both = jobs.acquire(2).await.expect("both permits");
    both.release().await.expect("release");

    let elections = backend.elections(options.clone()).expect("elections");
    let leadership = elections.campaign("leader", b"node-a").await.expect("campaign");
    assert!(
        elections
            .try_campaign("leader", b"node-b")
            .await
            .expect("try")
            .is_none(),
        "two leaders"
    );
    let leader = elections.leader("leader").await.expect("leader").expect("a leader");
    assert_eq!(leader.identity, b"node-a");
    assert_eq!(Some(leadership.term()), leadership.fencing_token().map(|t| t.0));
    assert_eq!(leadership.term(), leader.term);
    leadership.resign().await.expect("resign");
    assert_eq!(elections.leader("leader").await.expect("leader"), None);

    let rw = backend.rw_locks(options.clone()).expect("rw locks");
    let reader = rw.read("doc").await.expect("read");
    let other_reader = rw.read("doc").await.expect("a second reader");
    assert!(
        rw.try_lock("doc", verrou::RwMode::Write).await.expect("try").is_none(),
        "a writer among readers"
    );
    reader.release().await.expect("release");
    other_reader.release().await.expect("release");
    let writer = rw.write("doc").await.expect("write");
    assert!(writer.fencing_token().is_some(), "writers are fenced");
    writer.release().await.expect("release");

    let multi = backend.multi_locks(options).expect("multi-key locks");
    let keys = multi.lock(&["a", "b"]).await.expect("lock a, b");
    assert!(
        multi.try_lock(&["b", "c"]).await.expect("try").is_none(),
        "b held twice"
    );
    keys.release().await.expect("release");
}
