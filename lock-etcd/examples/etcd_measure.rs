//! A first measurement of lock-etcd against raw `etcd-client` transactions
//! and etcd's server-side Lock API, on one etcd member started through
//! lock-testkit (not yet the verrou-bench rows; `cargo run --release -p
//! lock-etcd --example etcd_measure`):
//!
//! - uncontended acquire + release pairs per second (one task);
//! - sequential pair p50 against a single-key read's p50 (same client);
//! - the CPU share of one core spent renewing 10,000 held locks.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use lock_core::{LockManager, LockOptions};
use lock_etcd::EtcdBuilder;
use lock_testkit::server::EtcdCluster;

const WINDOW: Duration = Duration::from_secs(3);

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Pairs per second and the p50 of one pair, running `pair` for WINDOW.
async fn measure<F, Fut>(what: &str, mut pair: F) -> (f64, Duration)
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for i in 0..50 {
        pair(i).await; // warm-up
    }
    let mut lat = Vec::new();
    let start = Instant::now();
    let mut i = 1000u64;
    while start.elapsed() < WINDOW {
        let t = Instant::now();
        pair(i).await;
        lat.push(t.elapsed());
        i += 1;
    }
    let rate = lat.len() as f64 / start.elapsed().as_secs_f64();
    let p = p50(lat);
    println!("{what:<40} {rate:>8.0} pairs/s  p50 {:>7.0} µs", p.as_secs_f64() * 1e6);
    (rate, p)
}

fn process_cpu() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let etcd = EtcdCluster::single().await.expect("start etcd");
    let backend = EtcdBuilder::new(etcd.endpoints()).build().await.expect("connect");
    let client = backend.client().clone();

    // A single-key read round trip.
    let mut kv = client.kv_client();
    let (_, read) = measure("read (get of one key)", |_| {
        let mut kv = kv.clone();
        async move {
            kv.get("bench/read", None).await.expect("get");
        }
    })
    .await;
    let _ = &mut kv;

    // verrou: a manager's lock + release.
    let locks =
        LockManager::with_options(backend.clone(), LockOptions::with_ttl(Duration::from_secs(30))).expect("manager");
    let (verrou, verrou_p50) = measure("verrou lock + release", |i| {
        let locks = locks.clone();
        async move {
            let g = locks.lock(&format!("k{}", i % 64)).await.expect("lock");
            g.release().await.expect("release");
        }
    })
    .await;

    // Raw etcd-client: the same transactions on one lease.
    let lease = client.lease_client().grant(30, None).await.expect("grant").id();
    let (raw, _) = measure("raw txn create-if-absent + delete", |i| {
        let mut kv = client.kv_client();
        async move {
            let k = format!("raw/k{}", i % 64);
            let txn = Txn::new()
                .when([Compare::create_revision(k.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(k.clone(), "t", Some(PutOptions::new().with_lease(lease)))])
                .or_else([TxnOp::get(k.clone(), None)]);
            kv.txn(txn).await.expect("txn");
            let del = Txn::new()
                .when([Compare::value(k.clone(), CompareOp::Equal, "t")])
                .and_then([TxnOp::delete(k, None)]);
            kv.txn(del).await.expect("txn");
        }
    })
    .await;

    // etcd's server-side Lock API.
    let (api, _) = measure("etcd Lock API lock + unlock", |i| {
        let mut lc = client.lock_client();
        async move {
            let r = lc
                .lock(
                    format!("api/k{}", i % 64),
                    Some(etcd_client::LockOptions::new().with_lease(lease)),
                )
                .await
                .expect("lock");
            lc.unlock(r.key().to_vec()).await.expect("unlock");
        }
    })
    .await;

    println!(
        "verrou / raw txns {:.2}x, verrou / Lock API {:.2}x, sequential p50 {:.2} x read round trip",
        verrou / raw,
        verrou / api,
        verrou_p50.as_secs_f64() / read.as_secs_f64()
    );

    // 10,000 held locks renewed in the background (TTL 3 s: renewals every 1 s).
    let held_locks =
        LockManager::with_options(backend.clone(), LockOptions::with_ttl(Duration::from_secs(3))).expect("manager");
    let mut held = Vec::with_capacity(10_000);
    for i in 0..10_000 {
        held.push(held_locks.lock(&format!("held/{i}")).await.expect("lock"));
    }
    let sent = backend.keepalives_sent();
    let (t0, c0) = (Instant::now(), process_cpu());
    tokio::time::sleep(Duration::from_secs(10)).await;
    let share = (process_cpu() - c0).as_secs_f64() / t0.elapsed().as_secs_f64();
    let lost = held.iter().filter(|g| g.is_lost()).count();
    println!(
        "10,000 locks renewed for 10 s: {:.2} % of a core, {} keepalives, {lost} lost",
        share * 100.0,
        backend.keepalives_sent() - sent
    );
}
