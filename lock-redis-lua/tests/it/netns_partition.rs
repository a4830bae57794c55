//! A real partition (network namespaces, lock-testkit's `Network`): the
//! client's connections stay open and silent, unlike a proxy's cut. The
//! lease is lost by its local deadline, nothing hangs, and the client
//! recovers after the heal. Needs root and `ip` (CI has both): without them
//! the test fails with an install hint.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::{LockManager, LockOptions, LossReason};

use lock_core::ReleaseOutcome;
use lock_redis_lua::RedisLuaBuilder;
use lock_testkit::server::{NetRedisServer, Network};
use tokio::time::Instant;

const TTL: Duration = Duration::from_millis(500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_client_loses_its_lease_by_the_deadline_and_recovers_after_heal() {
    let net = Network::new().expect("network");
    let client_host = net.add_host("client").expect("client host");
    let server_host = net.add_host("server").expect("server host");
    let server = NetRedisServer::builder().start(&server_host).await.expect("server");
    let url = server.url();

    // Connect and lock from inside the client's host.
    let (locked_tx, locked_rx) = tokio::sync::oneshot::channel();
    let (healed_tx, healed_rx) = tokio::sync::oneshot::channel::<()>();
    let client = client_host.handle().expect("client runtime").spawn(async move {
        let backend = RedisLuaBuilder::url(url)
            .connect_timeout(Duration::from_millis(150))
            .response_timeout(Duration::from_millis(150))
            .build()
            .await
            .expect("connect");
        let locks = LockManager::with_options(
            backend,
            LockOptions::with_ttl(TTL)
                .acquire_timeout(TTL)
                .op_timeout(Duration::from_millis(300)),
        )
        .expect("manager");
        let guard = locks.lock("partitioned").await.expect("lock");
        let deadline = guard.deadline();
        let lease = guard.handle();
        let _ = locked_tx.send(());
        // The partition starts now: no renewal gets through, the lease is
        // lost exactly at its deadline (the signal, a timer, within a TTL).
        let lost = tokio::spawn({
            let lease = lease.clone();
            async move { (lease.lost().await, Instant::now()) }
        });
        tokio::time::sleep_until(deadline).await;
        assert_eq!(lease.deadline(), deadline, "no renewal may get through a partition");
        assert!(lease.is_lost(), "lost at the deadline");
        let (reason, fired) = tokio::time::timeout(TTL, lost)
            .await
            .expect("lost() fires within a TTL of the deadline")
            .expect("watcher");
        assert!(fired >= deadline);
        assert_eq!(reason, LossReason::DeadlinePassed);
        // Nothing hangs while partitioned: a try_lock fails within its bounds.
        let started = Instant::now();
        let during = tokio::time::timeout(Duration::from_secs(3), locks.try_lock("other")).await;
        assert!(
            during.is_ok(),
            "try_lock hung across a partition ({:?})",
            started.elapsed()
        );
        assert!(!matches!(during, Ok(Ok(Some(_)))), "no lock across a partition");
        drop(guard);
        healed_rx.await.expect("heal");
        // Recovers: the same manager takes a lock again (bounded retries).
        let give_up = Instant::now() + Duration::from_secs(5);
        loop {
            if let Ok(Some(g)) = locks.try_lock("partitioned").await {
                assert_eq!(g.release().await.expect("release"), ReleaseOutcome::Released);
                break;
            }
            assert!(Instant::now() < give_up, "no lock within 5 s of the heal");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    locked_rx.await.expect("client locked");
    net.partition(&[&server_host]).expect("partition");
    tokio::time::sleep(TTL * 3).await;
    net.heal().expect("heal");
    healed_tx.send(()).expect("client waiting");
    client.await.expect("client assertions");
}
