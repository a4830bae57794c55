//! Replica acknowledgement on a Redis Cluster: WAIT goes to the master of
//! the key's slot, on the dedicated connection that made the write.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::{CasOutcome, CreateOutcome, Expiry, LockBackend, LockToken, Replication, VersionedStore};

use lock_core::AcquireOutcome;
use lock_redis_lua::{RedisLuaBuilder, ReplicaAck};
use lock_testkit::server::{RedisCluster, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_writes_are_acknowledged_by_the_slot_replica() {
    let cluster = RedisCluster::start(3, 1, RedisServer::builder())
        .await
        .expect("start a 3-master cluster with one replica each");
    let backend = RedisLuaBuilder::cluster([cluster.seed_url()])
        .fencing(true)
        .replica_ack(ReplicaAck::new(1, Duration::from_secs(2)))
        .build()
        .await
        .expect("connect");
    // Keys spread over the three masters.
    for key in ["alpha", "bravo", "charlie", "{tagged}:lock"] {
        let token = LockToken::generate().unwrap();
        let AcquireOutcome::Acquired(lease) = backend
            .try_acquire(key, &token, Duration::from_secs(5))
            .await
            .expect("acquire")
        else {
            panic!("{key} is free")
        };
        assert_eq!(lease.replication, Replication::Confirmed { replicas: 1 }, "{key}");
        assert!(lease.fencing_token.is_some());
        let value = format!("{key}:value");
        let CreateOutcome::Created { version } = backend.create(&value, b"1", Expiry::Keep).await.expect("create")
        else {
            panic!("create {value}")
        };
        assert!(matches!(
            backend
                .compare_and_set(&value, version, b"2", Expiry::Keep)
                .await
                .expect("cas"),
            CasOutcome::Written { .. }
        ));
    }
}
