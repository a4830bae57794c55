//! Batched renewals: the leases the renewer renews together go out as one
//! JetStream atomic batch per chunk (the builder turns `allow_atomic` on),
//! and a lock lost meanwhile fails alone (the batch stores nothing, and
//! the chunk is renewed one by one).

use std::collections::HashSet;
use std::time::Duration;

use async_nats::jetstream;
use lock_core::{AcquireOutcome, LockBackend, LockToken, RenewOutcome};
use lock_testkit::server::NatsCluster;

use crate::common;

const TTL: Duration = Duration::from_secs(10);

fn token() -> LockToken {
    LockToken::generate().unwrap()
}

/// The crate's escaping, for the raw reads (letters, digits, '-', '_').
fn escape(key: &str) -> String {
    key.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
                char::from(b).to_string()
            } else {
                format!("={b:02X}")
            }
        })
        .collect()
}

async fn stream(cluster: &NatsCluster, bucket: &str) -> jetstream::stream::Stream {
    let js = jetstream::new(async_nats::connect(cluster.addr(0)).await.unwrap());
    js.get_stream(format!("KV_{bucket}")).await.unwrap()
}

/// The stored message of lock `key`: its sequence and batch id.
async fn stored(stream: &jetstream::stream::Stream, bucket: &str, key: &str) -> (u64, Option<String>) {
    let m = stream
        .get_last_raw_message_by_subject(&format!("$KV.{bucket}.l.{}", escape(key)))
        .await
        .unwrap();
    let batch = m.headers.get("Nats-Batch-Id").map(|v| v.as_str().to_owned());
    (m.sequence, batch)
}

async fn hold(backend: &impl LockBackend, keys: &[String], mine: &LockToken) {
    for key in keys {
        assert!(matches!(
            backend.try_acquire(key, mine, TTL).await.unwrap(),
            AcquireOutcome::Acquired(_)
        ));
    }
}

async fn renewals_are_one_atomic_batch(cluster: &NatsCluster, bucket: &str) {
    let backend = common::connect(common::url(cluster, bucket)).await;
    let stream = stream(cluster, bucket).await;
    let config = stream.cached_info().config.clone();
    assert!(config.allow_atomic_publish, "the builder turned atomic batches on");
    let mine = token();
    let keys: Vec<String> = (0..30).map(|i| format!("batch:{i}:{}", token().to_hex())).collect();
    hold(&backend, &keys, &mine).await;
    for round in 0..2 {
        let items: Vec<(&str, &LockToken)> = keys.iter().map(|k| (k.as_str(), &mine)).collect();
        let outcomes: Vec<RenewOutcome> = backend
            .renew_many(&items, TTL)
            .await
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        assert!(outcomes.iter().all(|o| *o == RenewOutcome::Renewed), "{outcomes:?}");
        let mut ids = HashSet::new();
        let mut sequences = Vec::new();
        for key in &keys {
            let (sequence, id) = stored(&stream, bucket, key).await;
            ids.insert(id);
            sequences.push(sequence);
        }
        assert_eq!(ids.len(), 1, "round {round}: one batch for the 30 renewals: {ids:?}");
        assert!(ids.iter().all(Option::is_some), "round {round}: stored by a batch");
        // One contiguous run, in the order of the items: the revisions the
        // backend computed for the next round are the stored ones.
        let first = sequences[0];
        assert!(
            sequences.iter().enumerate().all(|(i, s)| *s == first + i as u64),
            "{sequences:?}"
        );
    }
}

async fn a_lock_lost_in_a_batch_is_told_alone(cluster: &NatsCluster, bucket: &str) {
    let backend = common::connect(common::url(cluster, bucket)).await;
    let stream = stream(cluster, bucket).await;
    let mine = token();
    let keys: Vec<String> = (0..10).map(|i| format!("lost:{i}:{}", token().to_hex())).collect();
    hold(&backend, &keys, &mine).await;
    // Someone else's value on key 3 (a raw put, no condition).
    let client = async_nats::connect(cluster.addr(0)).await.unwrap();
    let js = jetstream::new(client);
    js.publish(
        format!("$KV.{bucket}.l.{}", escape(&keys[3])),
        token().to_hex().into_bytes().into(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    let items: Vec<(&str, &LockToken)> = keys.iter().map(|k| (k.as_str(), &mine)).collect();
    let outcomes: Vec<RenewOutcome> = backend
        .renew_many(&items, TTL)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    for (i, outcome) in outcomes.iter().enumerate() {
        let expected = if i == 3 {
            RenewOutcome::HeldByOther
        } else {
            RenewOutcome::Renewed
        };
        assert_eq!(*outcome, expected, "key {i}");
    }
    // The others were renewed (one by one, after the batch stored nothing).
    let (_, id) = stored(&stream, bucket, &keys[0]).await;
    assert!(id.is_none(), "the rejected batch stored nothing");
    // The next round is one batch again, without the lost lock.
    let rest: Vec<(&str, &LockToken)> = items
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3)
        .map(|(_, x)| *x)
        .collect();
    let outcomes = backend.renew_many(&rest, TTL).await;
    assert!(
        outcomes.iter().all(|o| matches!(o, Ok(RenewOutcome::Renewed))),
        "{outcomes:?}"
    );
    assert!(stored(&stream, bucket, &keys[0]).await.1.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_due_together_are_one_atomic_batch() {
    renewals_are_one_atomic_batch(common::single().await, "batch").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_due_together_are_one_atomic_batch_on_r3() {
    renewals_are_one_atomic_batch(common::three().await, "batch").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_lost_before_a_batched_renewal_is_told_alone() {
    a_lock_lost_in_a_batch_is_told_alone(common::single().await, "batchlost").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_lost_before_a_batched_renewal_is_told_alone_on_r3() {
    a_lock_lost_in_a_batch_is_told_alone(common::three().await, "batchlost").await;
}

/// A stream that stops taking atomic batches after the build (an operator
/// turned `allow_atomic` off): the refused batch stores nothing, its leases
/// are renewed one by one in the same call, and the next renewals go out
/// one by one too, every lease still renewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_stops_taking_batches_is_renewed_one_by_one() {
    let cluster = common::single().await;
    let bucket = "batchoff";
    let backend = common::connect(common::url(cluster, bucket)).await;
    let js = jetstream::new(async_nats::connect(cluster.addr(0)).await.unwrap());
    let mut config = stream(cluster, bucket).await.cached_info().config.clone();
    assert!(config.allow_atomic_publish, "the builder turned atomic batches on");
    let mine = token();
    let keys: Vec<String> = (0..10).map(|i| format!("off:{i}:{}", token().to_hex())).collect();
    hold(&backend, &keys, &mine).await;
    config.allow_atomic_publish = false;
    let updated = js.update_stream(&config).await.unwrap();
    assert!(!updated.config.allow_atomic_publish, "atomic batches turned off");
    let stream = stream(cluster, bucket).await;
    let items: Vec<(&str, &LockToken)> = keys.iter().map(|k| (k.as_str(), &mine)).collect();
    for round in 0..2 {
        let before: Vec<u64> = futures::future::join_all(keys.iter().map(|k| stored(&stream, bucket, k)))
            .await
            .into_iter()
            .map(|(sequence, _)| sequence)
            .collect();
        let outcomes = backend.renew_many(&items, TTL).await;
        assert!(
            outcomes.iter().all(|o| matches!(o, Ok(RenewOutcome::Renewed))),
            "round {round}: {outcomes:?}"
        );
        for (key, was) in keys.iter().zip(before) {
            let (sequence, id) = stored(&stream, bucket, key).await;
            assert!(sequence > was, "round {round}: {key} renewed");
            assert!(
                id.is_none(),
                "round {round}: {key} stored by a batch the stream refuses"
            );
        }
    }
}
