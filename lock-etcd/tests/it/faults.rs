//! Faults on real etcd members: the leader killed (and restarted), the
//! leader paused (SIGSTOP), the client's traffic cut through a TCP proxy,
//! a follower and the leader each partitioned away from the rest (every
//! member's peer traffic through a proxy that refuses the other side), the
//! client stalled past its lease, and its lease revoked by another
//! client. In each, a second client contends for the lock; whenever it gets
//! it, the first holder's local validity has ended (it was told it lost the
//! lock, or its local deadline has passed): never two holders inside their
//! validity windows. Where the holder is cut off, its loss is signalled
//! (liveness bounds only, generous).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use crate::common;

use std::time::Duration;

use lock_core::{LockGuard, LockManager, LockOptions, Renewal};
use lock_testkit::server::{EtcdCluster, TcpProxy};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(1);
const BOUND: Duration = Duration::from_secs(20);

async fn manager(endpoints: Vec<String>, auto: bool) -> LockManager {
    let backend = common::connect(endpoints).await;
    let options = LockOptions::with_ttl(TTL);
    let options = if auto {
        options
    } else {
        options.renewal(Renewal::Manual)
    };
    LockManager::with_options(backend, options).expect("manager")
}

/// `b` tries for `key` until `until`; whenever it gets it, `a` must be
/// past its validity. Returns whether `b` got it.
async fn contend(a: &LockGuard, b: &LockManager, key: &str, until: Instant) -> bool {
    while Instant::now() < until {
        if let Ok(Some(g)) = b.try_lock(key).await {
            assert!(
                a.is_lost() || Instant::now() >= a.deadline(),
                "two holders: the second got the lock inside the first's validity window"
            );
            assert!(g.fencing_token() > a.fencing_token(), "the fence grows");
            drop(g.release().await);
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_and_restarted() {
    let etcd = EtcdCluster::three().await.expect("start etcd");
    let a = manager(etcd.endpoints(), true).await;
    let b = manager(etcd.endpoints(), true).await;
    let guard = a.lock("kill").await.expect("lock");
    let leader = etcd.leader(BOUND).await.expect("leader");
    etcd.kill(leader).expect("kill the leader");
    contend(&guard, &b, "kill", Instant::now() + 4 * TTL).await;
    etcd.restart(leader).await.expect("restart");
    contend(&guard, &b, "kill", Instant::now() + 2 * TTL).await;
    // The cluster serves both clients again.
    drop(guard.release().await);
    assert!(contend_free(&b, "kill").await, "the lock is free again after the fault");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_paused() {
    let etcd = EtcdCluster::three().await.expect("start etcd");
    let a = manager(etcd.endpoints(), true).await;
    let b = manager(etcd.endpoints(), true).await;
    let guard = a.lock("pause").await.expect("lock");
    let leader = etcd.leader(BOUND).await.expect("leader");
    etcd.pause(leader).expect("SIGSTOP the leader");
    contend(&guard, &b, "pause", Instant::now() + 4 * TTL).await;
    etcd.resume(leader).expect("SIGCONT");
    contend(&guard, &b, "pause", Instant::now() + 2 * TTL).await;
    drop(guard.release().await);
    assert!(
        contend_free(&b, "pause").await,
        "the lock is free again after the fault"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_traffic_cut() {
    let etcd = EtcdCluster::three().await.expect("start etcd");
    let leader = etcd.leader(BOUND).await.expect("leader");
    let target = etcd.endpoint(leader).parse().expect("an address");
    let proxy = TcpProxy::start(target).await.expect("proxy");
    let a = manager(vec![proxy.addr().to_string()], true).await;
    let b = manager(etcd.endpoints(), true).await;
    let guard = a.lock("cut").await.expect("lock");
    proxy.set_blackhole(true);
    proxy.cut_all();
    let lost = tokio::time::timeout(BOUND, guard.lost()).await;
    assert!(lost.is_ok(), "the cut-off holder is told it lost the lock");
    assert!(
        contend(&guard, &b, "cut", Instant::now() + BOUND).await,
        "the other client gets the lock once the lease ends"
    );
}

/// A follower cut off from the other two members (a minority partitioned
/// away from the leader): a holder that reaches the cluster through that
/// follower only loses its lock by its local deadline (no quorum behind its
/// renewals); a client of the majority gets the lock once the lease ends,
/// never inside the first holder's validity window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minority_partitioned_away_from_the_leader() {
    let etcd = EtcdCluster::partitionable(3).await.expect("start etcd");
    let leader = etcd.leader(BOUND).await.expect("leader");
    let follower = (leader + 1) % 3;
    let majority: Vec<String> = (0..3).filter(|i| *i != follower).map(|i| etcd.endpoint(i)).collect();
    let a = manager(vec![etcd.endpoint(follower)], true).await;
    let b = manager(majority, true).await;
    let guard = a.lock("minority").await.expect("lock");
    etcd.partition(&[follower]).expect("partition");
    let lost = tokio::time::timeout(BOUND, guard.lost()).await;
    assert!(
        lost.is_ok(),
        "the holder behind the cut-off follower is told it lost the lock"
    );
    assert!(
        contend(&guard, &b, "minority", Instant::now() + BOUND).await,
        "the majority's client gets the lock once the lease ends"
    );
    etcd.heal().expect("heal");
    drop(guard.release().await);
    assert!(
        contend_free(&b, "minority").await,
        "the lock is free again after the fault"
    );
}

/// The leader cut off from both followers: it steps down, the majority
/// elects another; a holder talking to the old leader only loses its lock
/// by its local deadline, and the majority's client gets the lock only
/// after that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_partitioned_away() {
    let etcd = EtcdCluster::partitionable(3).await.expect("start etcd");
    let leader = etcd.leader(BOUND).await.expect("leader");
    let majority: Vec<String> = (0..3).filter(|i| *i != leader).map(|i| etcd.endpoint(i)).collect();
    let a = manager(vec![etcd.endpoint(leader)], true).await;
    let b = manager(majority, true).await;
    let guard = a.lock("isolated").await.expect("lock");
    etcd.partition(&[leader]).expect("partition");
    let lost = tokio::time::timeout(BOUND, guard.lost()).await;
    assert!(
        lost.is_ok(),
        "the holder behind the isolated leader is told it lost the lock"
    );
    assert!(
        contend(&guard, &b, "isolated", Instant::now() + BOUND).await,
        "the majority's client gets the lock once the lease ends"
    );
    etcd.heal().expect("heal");
    drop(guard.release().await);
    assert!(
        contend_free(&b, "isolated").await,
        "the lock is free again after the fault"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_stalled_past_its_lease() {
    let etcd = common::single().await;
    let a = manager(etcd.endpoints(), false).await;
    let b = manager(etcd.endpoints(), true).await;
    let guard = a.lock("stall").await.expect("lock");
    // No renewal: the holder "stalls" past its TTL.
    assert!(
        contend(&guard, &b, "stall", Instant::now() + BOUND).await,
        "the other client gets the lock after the lease"
    );
    let err = guard.extend(TTL).await.expect_err("the stale holder cannot renew");
    assert!(!matches!(err, lock_core::Error::InvalidArgument(_)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_revoked_by_another_client() {
    let etcd = common::single().await;
    let a = manager(etcd.endpoints(), true).await;
    let b = manager(etcd.endpoints(), true).await;
    let guard = a.lock("revoke").await.expect("lock");
    // Another client revokes the holder's lease.
    let admin = common::connect(etcd.endpoints()).await;
    revoke_lease_of(&admin, "revoke").await;
    let lost = tokio::time::timeout(BOUND, guard.lost()).await;
    assert!(
        lost.is_ok(),
        "the holder whose lease was revoked is told at its next renewal"
    );
    assert!(
        contend(&guard, &b, "revoke", Instant::now() + BOUND).await,
        "the lock is free once its lease is revoked"
    );
}

/// `b` gets `key` within the bound.
async fn contend_free(b: &LockManager, key: &str) -> bool {
    let until = Instant::now() + BOUND;
    while Instant::now() < until {
        if let Ok(Some(g)) = b.try_lock(key).await {
            drop(g.release().await);
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Revoke the lease `key`'s lock is attached to, as another client would.
async fn revoke_lease_of(admin: &lock_etcd::EtcdBackend, key: &str) {
    let full = format!("{}lock/{key}", lock_etcd::DEFAULT_NAMESPACE);
    let got = admin.client().kv_client().get(full, None).await.expect("get");
    let lease = got.kvs().first().expect("the lock key exists").lease();
    admin.client().lease_client().revoke(lease).await.expect("revoke");
}
