//! Numbers at their limits: a claim or TTL of `Duration::MAX` (or just
//! past what etcd can hold) gives a grant or `InvalidArgument`, never a
//! panic, an overflow or a silently shortened lease.
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use crate::common;

use std::time::Duration;

use lock_core::raw::FairWaiter;

use lock_core::AcquireOutcome;
use lock_core::{Error, Expiry, LockBackend, LockToken, VersionedStore};

fn granted_or_invalid(what: &str, got: &lock_core::Result<AcquireOutcome>) {
    assert!(
        matches!(got, Ok(AcquireOutcome::Acquired(_)) | Err(Error::InvalidArgument(_))),
        "{what}: {got:?}"
    );
}

/// A raw fair acquire with a `Duration::MAX` claim (the `as_secs() + 1`
/// rounding overflowed: a panic in debug builds, a zero-second lease, so
/// the server's minimum, in release builds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_claim_of_duration_max_is_granted_or_refused() {
    let etcd = common::single().await;
    let backend = common::connect(etcd.endpoints()).await;
    let ttl = backend.min_ttl();
    for (i, claim) in [
        Duration::MAX,
        Duration::new(u64::MAX, 0),
        Duration::from_secs(u64::MAX / 2),
        Duration::from_secs(10_000_000_000),
    ]
    .into_iter()
    .enumerate()
    {
        let token = LockToken::generate().unwrap();
        let waiter = FairWaiter::new(LockToken::generate().unwrap(), claim);
        let key = format!("limits-claim-{i}");
        let got = tokio::spawn({
            let backend = backend.clone();
            async move { backend.try_acquire_fair(&key, &token, ttl, &waiter).await }
        })
        .await
        .expect("the fair acquire must not panic");
        granted_or_invalid(&format!("claim {claim:?}"), &got);
    }
}

/// Every other duration the backend turns into whole seconds: lock TTLs
/// and a value's expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttls_of_duration_max_are_refused() {
    let etcd = common::single().await;
    let backend = common::connect(etcd.endpoints()).await;
    let token = LockToken::generate().unwrap();
    let got = backend.try_acquire("limits-ttl", &token, Duration::MAX).await;
    assert!(matches!(got, Err(Error::InvalidArgument(_))), "{got:?}");
    let got = backend.renew("limits-ttl", &token, Duration::MAX).await;
    assert!(matches!(got, Err(Error::InvalidArgument(_))), "{got:?}");
    let got = backend.create("limits-value", b"v", Expiry::After(Duration::MAX)).await;
    assert!(matches!(got, Err(Error::InvalidArgument(_))), "{got:?}");
}

/// Seen on the parent: `127.0.0.1:notaport` silently dialled port 80.
#[tokio::test]
async fn an_endpoint_with_a_bad_port_is_refused() {
    for endpoint in [
        "127.0.0.1:notaport",
        "http://127.0.0.1:99999",
        "localhost:-1",
        "127.0.0.1:80x",
    ] {
        let got = lock_etcd::EtcdBuilder::new([endpoint]).build().await;
        assert!(matches!(got, Err(Error::InvalidArgument(_))), "{endpoint}: {got:?}");
    }
}
