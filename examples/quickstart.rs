//! The lost-update race on a shared counter, on the in-memory backend.
//!
//! Workers do read-modify-write on one shared counter: first with no lock
//! (updates get lost), then under a verrou lock (exact), then with the
//! optimistic versioned store (exact, no lock at all).
//!
//! The same code runs on every backend (redis-lua, tair, redlock, postgres,
//! etcd, nats): each is a Cargo feature and a `verrou::connect` URL, and has an
//! example of its own in this directory.
//!
//! Run: `cargo run --example quickstart`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use verrou::memory::MemoryBackend;
use verrou::{LockManager, LockOptions, UpdateOptions, VersionedStore, VersionedStoreExt};

const WORKERS: u64 = 8;
const INCREMENTS: u64 = 50;

/// A "remote" counter: reading and writing it are separate steps with a
/// pause between them, like a GET and a SET over the network.
#[derive(Default)]
struct RemoteCounter(AtomicU64);

impl RemoteCounter {
    async fn read(&self) -> u64 {
        tokio::time::sleep(Duration::from_micros(200)).await;
        self.0.load(Ordering::SeqCst)
    }
    async fn write(&self, v: u64) {
        tokio::time::sleep(Duration::from_micros(200)).await;
        self.0.store(v, Ordering::SeqCst);
    }
}

#[tokio::main]
async fn main() -> verrou::Result<()> {
    let expected = WORKERS * INCREMENTS;
    println!("verrou quickstart: {WORKERS} workers x {INCREMENTS} read-modify-write increments of one counter");
    println!("backend: in-memory; the same code runs on every backend, each a Cargo feature and a URL for");
    println!("`verrou::connect`: redis-lua (redis://), tair (tair://), redlock (redlock://), postgres (postgres://),");
    println!("etcd (etcd://), nats (nats://); see examples/redis_lua.rs, tair.rs, redlock.rs, postgres.rs,");
    println!("etcd.rs and nats.rs\n");

    // 1. No lock: two workers read 10, both write 11, one increment vanishes.
    let counter = Arc::new(RemoteCounter::default());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let counter = counter.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..INCREMENTS {
                let v = counter.read().await;
                counter.write(v + 1).await;
            }
        }));
    }
    join(tasks).await;
    report("no lock", counter.0.load(Ordering::SeqCst), expected, started, "");

    // 2. The same workers, each increment inside `with_lock`.
    let backend = MemoryBackend::new();
    let locks = LockManager::with_options(backend.clone(), LockOptions::with_ttl(Duration::from_secs(5)))?;
    let counter = Arc::new(RemoteCounter::default());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let (counter, locks) = (counter.clone(), locks.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..INCREMENTS {
                locks
                    .with_lock("quickstart:counter", |_lease| async {
                        let v = counter.read().await;
                        counter.write(v + 1).await;
                    })
                    .await?;
            }
            Ok::<_, verrou::Error>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| verrou::Error::backend("tokio", e.to_string()))??;
    }
    report("verrou lock", counter.0.load(Ordering::SeqCst), expected, started, "");

    // 3. No lock, but optimistic: compare-and-set by version, retry on conflict.
    let store: Arc<dyn VersionedStore> = Arc::new(backend);
    let attempts = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let (store, attempts) = (store.clone(), attempts.clone());
        tasks.push(tokio::spawn(async move {
            let opts = UpdateOptions::default().max_attempts(1_000);
            for _ in 0..INCREMENTS {
                store
                    .update_opts("quickstart:versioned", &opts, |old| {
                        attempts.fetch_add(1, Ordering::Relaxed);
                        let n: u64 = old.and_then(|b| std::str::from_utf8(b).ok()?.parse().ok()).unwrap_or(0);
                        Some((n + 1).to_string().into_bytes())
                    })
                    .await?;
                tokio::task::yield_now().await;
            }
            Ok::<_, verrou::Error>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| verrou::Error::backend("tokio", e.to_string()))??;
    }
    let value = store
        .get("quickstart:versioned")
        .await?
        .and_then(|v| String::from_utf8(v.value).ok()?.parse().ok())
        .unwrap_or(0);
    let retries = attempts.load(Ordering::Relaxed).saturating_sub(expected);
    report(
        "optimistic update",
        value,
        expected,
        started,
        &format!(", {retries} retries"),
    );
    Ok(())
}

async fn join(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for t in tasks {
        let _ = t.await;
    }
}

fn report(label: &str, got: u64, expected: u64, started: Instant, extra: &str) {
    let lost = expected.saturating_sub(got);
    let verdict = if lost == 0 { "exact" } else { "LOST UPDATES" };
    println!(
        "  {label:<18} counter = {got:>4} / {expected}  ({lost} lost, {verdict}{extra}) in {:?}",
        started.elapsed()
    );
}
