//! Each holder's entry lives on a lease of its own: what one holder stops
//! renewing ends within its TTL (rounded up to whole seconds), whatever
//! the backend's other holders renew; leases the backend takes for values
//! and semaphore "gone" marks end with what they carry; keepalives are
//! bounded by the response timeout.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use crate::common;

use std::time::Duration;

use lock_core::raw::{ElectionBackend, PermitRequest, SemaphoreBackend};

use lock_core::raw::{RwLockBackend, validate_key};
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{CasOutcome, CreateOutcome, Expiry, LockBackend, LockToken, RwMode, VersionedStore};
use lock_etcd::{EtcdBackend, EtcdBuilder};
use lock_testkit::server::EtcdCluster;
use tokio::time::Instant;

fn whole_secs_up(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs() + u64::from(d.subsec_nanos() > 0))
}

fn acquired(got: &lock_core::Result<AcquireOutcome>) -> bool {
    matches!(got, Ok(AcquireOutcome::Acquired(_)))
}

/// Which kind a case drives.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Permit,
    Leadership,
    Write,
}

impl Kind {
    async fn acquire(
        self,
        b: &EtcdBackend,
        name: &str,
        token: &LockToken,
        ttl: Duration,
    ) -> lock_core::Result<AcquireOutcome> {
        validate_key(name)?;
        match self {
            Kind::Permit => b.acquire_permits(name, token, PermitRequest::new(1, 1), ttl).await,
            Kind::Leadership => b.try_lead(name, token, b"me", ttl).await,
            Kind::Write => b.try_acquire_rw(name, RwMode::Write, false, token, ttl).await,
        }
    }

    async fn renew(
        self,
        b: &EtcdBackend,
        name: &str,
        token: &LockToken,
        ttl: Duration,
    ) -> lock_core::Result<RenewOutcome> {
        match self {
            Kind::Permit => b.renew_permits(name, token, ttl).await,
            Kind::Leadership => b.renew_lead(name, token, ttl).await,
            Kind::Write => b.renew_rw(name, token, ttl).await,
        }
    }
}

/// A permit, a leadership and a write lock that their holder stops
/// renewing are free for another client within their TTL rounded up to
/// whole seconds (plus one TTL of slack), while the same backend keeps
/// renewing another of the same kind and TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrenewed_kind_ends_within_its_ttl_while_another_is_renewed() {
    let etcd = common::single().await;
    let holder = common::connect(etcd.endpoints()).await;
    let other = common::connect(etcd.endpoints()).await;
    let ttl = holder.min_ttl();
    for kind in [Kind::Permit, Kind::Leadership, Kind::Write] {
        let (idle, busy) = (format!("unrenewed-{kind:?}-idle"), format!("unrenewed-{kind:?}-busy"));
        let (t_idle, t_busy) = (LockToken::generate().unwrap(), LockToken::generate().unwrap());
        assert!(
            acquired(&kind.acquire(&holder, &busy, &t_busy, ttl).await),
            "{kind:?}: busy"
        );
        assert!(
            acquired(&kind.acquire(&holder, &idle, &t_idle, ttl).await),
            "{kind:?}: idle"
        );
        let bound = whole_secs_up(ttl) + ttl + Duration::from_secs(1);
        let deadline = Instant::now() + bound;
        let taker = LockToken::generate().unwrap();
        loop {
            assert_eq!(
                kind.renew(&holder, &busy, &t_busy, ttl).await.expect("renew"),
                RenewOutcome::Renewed,
                "{kind:?}: the renewed one stays held"
            );
            if acquired(&kind.acquire(&other, &idle, &taker, ttl).await) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{kind:?}: nobody renews it, yet it is still held {bound:?} later"
            );
            tokio::time::sleep(ttl / 8).await;
        }
    }
}

/// Leases with this TTL are this test's only (a marker).
const VALUE_TTL: Duration = Duration::from_secs(3607);

/// Leases of `secs` that carry no key.
async fn keyless_leases(b: &EtcdBackend, secs: i64) -> Vec<i64> {
    let mut leases = b.client().lease_client();
    let mut out = Vec::new();
    for lease in leases.leases().await.expect("leases").leases() {
        let Ok(ttl) = leases
            .time_to_live(lease.id(), Some(etcd_client::LeaseTimeToLiveOptions::new().with_keys()))
            .await
        else {
            continue; // ended meanwhile
        };
        if ttl.granted_ttl() == secs && ttl.ttl() > 0 && ttl.keys().is_empty() {
            out.push(lease.id());
        }
    }
    out
}

/// Seen on the parent: 30 refused or overwriting writes with a TTL left 30
/// leases with no key, each living its full TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versioned_writes_leave_no_lease_without_a_key() {
    let etcd = common::single().await;
    let b = common::connect(etcd.endpoints()).await;
    let secs = i64::try_from(VALUE_TTL.as_secs()).unwrap();
    let key = "leases-value";
    let expiry = Expiry::After(VALUE_TTL);
    let CreateOutcome::Created { version } = b.create(key, b"v0", expiry).await.expect("create") else {
        panic!("created");
    };
    let mut version = version;
    for i in 0..10 {
        assert_eq!(
            b.create(key, b"again", expiry).await.expect("create"),
            CreateOutcome::Exists,
            "{i}"
        );
        let stale = b
            .compare_and_set(key, version + 1_000_000, b"stale", expiry)
            .await
            .expect("cas");
        assert!(matches!(stale, CasOutcome::Conflict(_)), "{stale:?}");
        let CasOutcome::Written { version: next } =
            b.compare_and_set(key, version, b"next", expiry).await.expect("cas")
        else {
            panic!("written");
        };
        version = next;
    }
    let CasOutcome::Written { version } = b
        .compare_and_set(key, version, b"persisted", Expiry::Persist)
        .await
        .expect("cas")
    else {
        panic!("written");
    };
    let CasOutcome::Written { version } = b.compare_and_set(key, version, b"leased", expiry).await.expect("cas") else {
        panic!("written");
    };
    let missing = b.compare_and_set("leases-missing", 1, b"x", expiry).await.expect("cas");
    assert_eq!(missing, CasOutcome::Missing);
    let left = keyless_leases(&b, secs).await;
    assert!(left.is_empty(), "{} leases without a key: {left:?}", left.len());
    b.delete(key, version).await.expect("delete");
    // The deleted value's lease is revoked in the background.
    let give_up = Instant::now() + Duration::from_secs(5);
    loop {
        let left = keyless_leases(&b, secs).await;
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < give_up,
            "after the delete, {} leases without a key",
            left.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Seen on the parent: a semaphore's "gone" entry went on the backend's
/// shared 60 s lease, which every 60 s lock's renewals keep alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gone_entry_lives_on_a_lease_of_its_own() {
    let etcd = common::single().await;
    let b = common::connect(etcd.endpoints()).await;
    let window = lock_etcd::GONE_WINDOW;
    let token = LockToken::generate().unwrap();
    assert!(
        acquired(&b.try_acquire("gone-lock", &token, window).await),
        "a lock of the window's TTL"
    );
    let late = LockToken::generate().unwrap();
    assert_eq!(
        b.release_permits("gone-sem", &late).await.expect("release"),
        ReleaseOutcome::Missing
    );
    let ns = lock_etcd::DEFAULT_NAMESPACE;
    let mut kv = b.client().kv_client();
    let gone_key = format!(
        "{ns}sem/8:gone-sem/g/{}",
        String::from_utf8(late.hex_bytes().to_vec()).unwrap()
    );
    let got = kv.get(gone_key.clone(), None).await.expect("get");
    let gone_lease = got.kvs().first().expect("the gone entry").lease();
    let got = kv.get(format!("{ns}lock/gone-lock"), None).await.expect("get");
    let lock_lease = got.kvs().first().expect("the lock").lease();
    assert_ne!(gone_lease, lock_lease, "the gone entry shares the lock's lease");
    let ttl = b
        .client()
        .lease_client()
        .time_to_live(gone_lease, Some(etcd_client::LeaseTimeToLiveOptions::new().with_keys()))
        .await
        .expect("ttl");
    let keys: Vec<&[u8]> = ttl.keys().iter().map(Vec::as_slice).collect();
    assert_eq!(
        keys,
        vec![gone_key.as_bytes()],
        "the gone entry's lease carries it alone"
    );
    assert!(ttl.granted_ttl() <= i64::try_from(window.as_secs()).unwrap());
    b.release("gone-lock", &token).await.expect("release");
}

/// Seen on the parent: on a paused server a raw renewal waited 15 s (the
/// HTTP/2 ping timeout) for its keepalive's answer, not the response
/// timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keepalive_on_a_paused_server_is_bounded_by_the_response_timeout() {
    let etcd = EtcdCluster::single().await.expect("start etcd");
    let b = EtcdBuilder::new(etcd.endpoints())
        .response_timeout(Duration::from_millis(500))
        .build()
        .await
        .expect("connect");
    let ttl = b.min_ttl().max(Duration::from_secs(2));
    let token = LockToken::generate().unwrap();
    assert!(acquired(&b.try_acquire("paused-renew", &token, ttl).await));
    assert_eq!(
        b.renew("paused-renew", &token, ttl).await.expect("renew"),
        RenewOutcome::Renewed
    );
    etcd.pause(0).expect("pause");
    let other = LockToken::generate().unwrap();
    let (first, second) = futures::join!(
        tokio::time::timeout(Duration::from_secs(5), b.renew("paused-renew", &token, ttl)),
        tokio::time::timeout(Duration::from_secs(5), b.renew("paused-other", &other, ttl * 2)),
    );
    etcd.resume(0).expect("resume");
    for got in [first, second] {
        let got = got.expect("a renewal on a paused server must end within its response timeout");
        assert!(got.is_err(), "{got:?}");
    }
}
