//! Round trips of the NATS backend's operations against the client's own
//! calls, on one nats-server started here (`sync_interval: always`):
//! `cargo run --release -p lock-nats --example nats_measure`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant};

use async_nats::jetstream;
use lock_core::LockBackend;
use lock_core::LockToken;
use lock_core::{AcquireOutcome, ReleaseOutcome};
use lock_nats::NatsBackend;
use lock_testkit::server::NatsCluster;

const N: usize = 300;

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

macro_rules! time {
    ($label:expr, $body:expr) => {{
        let mut v = Vec::with_capacity(N);
        for i in 0..N {
            let t0 = Instant::now();
            $body(i).await;
            v.push(t0.elapsed());
        }
        println!("{:<60} p50 {:>8.1} µs", $label, p50(v).as_secs_f64() * 1e6);
    }};
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let nats = NatsCluster::single().await.expect("start nats-server");
    let backend = NatsBackend::connect(&format!("{}?bucket=m", nats.url())).await.unwrap();
    let js = jetstream::new(backend.client().clone());
    let kv = js.get_key_value("m").await.unwrap();
    let stream = kv.stream.clone();
    let ttl = Duration::from_secs(30);

    time!("kv get, absent key (direct get)", |_| async {
        kv.get("absent").await.unwrap()
    });
    time!("stream last message, absent (STREAM.MSG.GET)", |_| async {
        let _ = stream.get_last_raw_message_by_subject("$KV.m.absent").await;
    });
    time!("kv put (one fsynced write)", |_| async {
        kv.put("put", "x".into()).await.unwrap()
    });
    time!("verrou acquire, fresh key", |i| {
        let backend = backend.clone();
        async move {
            let t = LockToken::generate().unwrap();
            assert!(matches!(
                backend.try_acquire(&format!("fresh{i}"), &t, ttl).await.unwrap(),
                AcquireOutcome::Acquired(_)
            ));
        }
    });
    time!("verrou acquire + release, same key", |_| {
        let backend = backend.clone();
        async move {
            let t = LockToken::generate().unwrap();
            assert!(matches!(
                backend.try_acquire("same", &t, ttl).await.unwrap(),
                AcquireOutcome::Acquired(_)
            ));
            assert_eq!(backend.release("same", &t).await.unwrap(), ReleaseOutcome::Released);
        }
    });
    time!("raw create_with_ttl + delete_expect_revision, same key", |_| {
        let kv = kv.clone();
        async move {
            let r = kv.create_with_ttl("raw-same", "x".into(), ttl).await.unwrap();
            kv.delete_expect_revision("raw-same", Some(r)).await.unwrap();
        }
    });
}
