//! One lease per backend and TTL: holding and renewing many locks costs one
//! keepalive per renewal round, not one per lock; TTLs below the server's
//! minimum are refused with a typed error; a TTL that is not whole seconds
//! is rounded up on the server.
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

mod common;

use std::time::Duration;

use lock_core::{LockBackend, LockManager, LockOptions, LockToken, RenewOutcome};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewing_many_locks_sends_one_keepalive_per_round() {
    let etcd = common::single().await;
    let backend = common::connect(etcd.endpoints()).await;
    let ttl = backend.min_ttl();
    let tokens: Vec<(String, LockToken)> = (0..300)
        .map(|i| (format!("many-{i}"), LockToken::generate().unwrap()))
        .collect();
    for (key, token) in &tokens {
        let got = backend.try_acquire(key, token, ttl).await.expect("acquire");
        assert!(matches!(got, lock_core::AcquireOutcome::Acquired(_)), "{got:?}");
    }
    let items: Vec<(&str, &LockToken)> = tokens.iter().map(|(k, t)| (k.as_str(), t)).collect();
    let before = backend.keepalives_sent();
    for _ in 0..3 {
        let out = backend.renew_many(&items, ttl).await;
        assert_eq!(out.len(), items.len());
        assert!(
            out.iter().all(|o| matches!(o, Ok(RenewOutcome::Renewed))),
            "every lock renewed"
        );
    }
    let sent = backend.keepalives_sent() - before;
    assert!(sent <= 3, "300 locks × 3 rounds took {sent} keepalives");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttls_below_the_server_minimum_are_refused() {
    let etcd = common::single().await;
    let backend = common::connect(etcd.endpoints()).await;
    let min = backend.capabilities().min_ttl;
    assert!(min >= Duration::from_secs(1) && min.subsec_nanos() == 0, "{min:?}");
    let short = min - Duration::from_millis(1);
    let token = LockToken::generate().unwrap();
    let err = backend.try_acquire("short", &token, short).await.expect_err("refused");
    assert!(matches!(err, lock_core::Error::InvalidArgument(_)), "{err:?}");
    let err = LockManager::with_options(backend.clone(), LockOptions::with_ttl(short)).expect_err("refused");
    assert!(matches!(err, lock_core::Error::InvalidArgument(_)), "{err:?}");
    // Not whole seconds: accepted, rounded up on the server.
    let odd = min + Duration::from_millis(300);
    let got = backend.try_acquire("odd", &token, odd).await.expect("acquire");
    assert!(matches!(got, lock_core::AcquireOutcome::Acquired(_)), "{got:?}");
    let mut leases = backend.client().lease_client();
    let mut found = false;
    for lease in leases.leases().await.expect("leases").leases() {
        let ttl = leases.time_to_live(lease.id(), None).await.expect("ttl");
        found |= ttl.granted_ttl() == i64::try_from(min.as_secs() + 1).unwrap();
    }
    assert!(found, "a lease of {}s exists for a {odd:?} TTL", min.as_secs() + 1);
}
