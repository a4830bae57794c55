//! Authentication: an etcd with users on and short-lived tokens keeps
//! serving a backend across token expiry (the client re-authenticates and
//! retries the refused request).
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_core::{AcquireOutcome, ReleaseOutcome};
use lock_core::{LockBackend, LockManager, LockOptions, LockToken};
use lock_etcd::{EtcdBackend, EtcdBuilder};
use lock_testkit::server::EtcdCluster;

/// The server drops a simple token after this long without use.
const TOKEN_TTL: Duration = Duration::from_secs(1);
/// Idle time that outlasts the token (the server checks every second).
const IDLE: Duration = Duration::from_secs(4);

async fn connect(etcd: &EtcdCluster) -> EtcdBackend {
    EtcdBuilder::new(etcd.endpoints())
        .user("root", "verrou-pw")
        .response_timeout(Duration::from_secs(3))
        .build()
        .await
        .expect("connect as root")
}

/// Seen on the parent: after `--auth-token-ttl` of idleness every request
/// failed with "invalid auth token", for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_is_renewed_and_the_request_retried() {
    let etcd = EtcdCluster::single_with_auth("verrou-pw", TOKEN_TTL)
        .await
        .expect("start etcd with authentication");
    let backend = connect(&etcd).await;
    let ttl = backend.min_ttl().max(Duration::from_secs(2));
    let manager = LockManager::with_options(backend.clone(), LockOptions::with_ttl(ttl)).expect("manager");
    let first = manager.lock("auth-idle").await.expect("lock with a fresh token");
    assert_eq!(first.release().await.expect("release"), ReleaseOutcome::Released);
    // Nothing held: no renewal uses the token meanwhile.
    for round in 0..2 {
        tokio::time::sleep(IDLE).await;
        let guard = manager
            .lock("auth-idle")
            .await
            .unwrap_or_else(|e| panic!("lock after the token expired (round {round}): {e}"));
        assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Released);
        let token = LockToken::generate().unwrap();
        let got = backend
            .try_acquire("auth-raw", &token, ttl)
            .await
            .unwrap_or_else(|e| panic!("raw acquire (round {round}): {e}"));
        assert!(matches!(got, AcquireOutcome::Acquired(_)), "{got:?}");
        backend.release("auth-raw", &token).await.expect("raw release");
    }
    // A lock held (renewed) for as long as the idle spells.
    let held = manager.lock("auth-held").await.expect("lock");
    tokio::time::sleep(IDLE).await;
    assert!(!held.is_lost(), "a lock renewed all along stays held");
    assert_eq!(held.release().await.expect("release"), ReleaseOutcome::Released);
}
