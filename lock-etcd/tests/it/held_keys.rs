//! Renewals trust each lock's own lease for the key created on it: a round
//! of renewals sends keepalives and no read of the keys, and a key deleted
//! or replaced under a lease still kept alive (an operator's delete or put)
//! still reaches its holder as a loss, no later than its deadline.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use crate::common;

use std::time::Duration;

use lock_core::{AcquireOutcome, LockBackend, LockManager, LockOptions, LockToken, LossReason, RenewOutcome};
use lock_testkit::server::EtcdCluster;
use tokio::time::Instant;

/// Renewal rounds of many locks acquired while the backend's watch is
/// open, right after their acquire and later, make the member serve no
/// range (`etcd_mvcc_range_total` counts every
/// one, those inside a transaction too). A member of this test's own: the
/// binary's other tests read the shared one meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_rounds_read_no_key() {
    let etcd = EtcdCluster::single().await.expect("start etcd");
    let b = common::connect(etcd.endpoints()).await;
    let ttl = Duration::from_secs(30);
    // The first renewal opens the backend's watch, and reads its key: one
    // lock acquired before the watch.
    let first = LockToken::generate().unwrap();
    let got = b.try_acquire("no-reads-first", &first, ttl).await.expect("acquire");
    assert!(matches!(got, AcquireOutcome::Acquired(_)), "{got:?}");
    assert_eq!(
        b.renew("no-reads-first", &first, ttl).await.expect("renew"),
        RenewOutcome::Renewed
    );
    let tokens: Vec<(String, LockToken)> = (0..300)
        .map(|i| (format!("no-reads-{i}"), LockToken::generate().unwrap()))
        .collect();
    let acquired = futures::future::join_all(tokens.iter().map(|(key, token)| b.try_acquire(key, token, ttl))).await;
    for ((key, _), got) in tokens.iter().zip(acquired) {
        assert!(matches!(got, Ok(AcquireOutcome::Acquired(_))), "{key}: {got:?}");
    }
    let items: Vec<(&str, &LockToken)> = tokens.iter().map(|(k, t)| (k.as_str(), t)).collect();
    let ranges = etcd.metric(0, "etcd_mvcc_range_total").await.expect("metric");
    let sent = b.keepalives_sent();
    for round in 0..3 {
        for chunk in items.chunks(256) {
            for (i, got) in b.renew_many(chunk, ttl).await.into_iter().enumerate() {
                assert_eq!(got.expect("renew"), RenewOutcome::Renewed, "round {round}, item {i}");
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        etcd.metric(0, "etcd_mvcc_range_total").await.expect("metric"),
        ranges,
        "three renewal rounds of {} locks read keys",
        items.len()
    );
    assert!(
        b.keepalives_sent() >= sent + 3 * items.len() as u64,
        "one keepalive per lock and round"
    );
    let single = etcd.metric(0, "etcd_mvcc_range_total").await.expect("metric");
    assert_eq!(
        b.renew(items[0].0, items[0].1, ttl).await.expect("renew"),
        RenewOutcome::Renewed
    );
    assert_eq!(etcd.metric(0, "etcd_mvcc_range_total").await.expect("metric"), single);
}

/// A lock whose key an operator deleted, and one whose key an operator
/// overwrote (a plain put, on no lease), while their leases were kept
/// alive: each holder learns it lost the lock (a renewal says so), and no
/// renewal sent after the change moved its deadline (it stays at most the
/// change's moment plus the TTL). The raw writes go through a client of
/// their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_deleted_or_replaced_under_its_live_lease_is_lost_by_its_deadline() {
    let etcd = common::single().await;
    let b = common::connect(etcd.endpoints()).await;
    let ttl = b.min_ttl();
    let manager = LockManager::with_options(b.clone(), LockOptions::with_ttl(ttl)).expect("manager");
    let mut operator = etcd_client::Client::connect(etcd.endpoints(), None)
        .await
        .expect("operator's client");
    for replace in [false, true] {
        let name = format!("operator-{}", if replace { "replaced" } else { "deleted" });
        let guard = manager.lock(&name).await.expect("lock");
        // Another lock renewed alongside, and one renewal round first.
        let other = manager.lock(&format!("{name}-other")).await.expect("lock");
        tokio::time::sleep(ttl / 2).await;
        assert!(!guard.is_lost(), "{name}: renewed");
        let key = format!("verrou/lock/{name}");
        let changed_at = Instant::now();
        if replace {
            operator.put(key, "someone-else", None).await.expect("operator's put");
        } else {
            let deleted = operator.delete(key, None).await.expect("operator's delete");
            assert_eq!(deleted.deleted(), 1, "{name}: the key was there");
        }
        let reason = tokio::time::timeout(ttl * 4, guard.lost())
            .await
            .unwrap_or_else(|_| panic!("{name}: still held {:?} after the change", ttl * 4));
        assert!(
            matches!(reason, LossReason::NotOwner | LossReason::DeadlinePassed),
            "{name}: {reason:?}"
        );
        assert!(
            guard.deadline() <= changed_at + ttl,
            "{name}: a renewal sent after the change moved the deadline"
        );
        assert!(!other.is_lost(), "{name}: the other lock is still held");
        other.release().await.expect("release");
        drop(guard);
    }
}
