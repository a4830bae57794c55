//! The Tair backend, as in the design documents: a lock whose acquire,
//! release and renew use the same key and token (`SET NX PX`, `CAD`, `CAS`),
//! then a counter updated optimistically with `EXCAS` (one round trip per
//! attempt; a conflict reply already carries the current value and version).
//!
//! Needs a server with TairString's commands: Tair, or Redis/Valkey with a
//! TairString-compatible module, e.g. this workspace's:
//!
//! ```sh
//! cargo build --release -p tair-module
//! redis-server --port 6379 --loadmodule target/release/libtair_module.so
//! TAIR_URL=redis://127.0.0.1:6379 cargo run --example tair --features tair
//! ```
//!
//! `TAIR_URL` defaults to `redis://127.0.0.1:6379`; use
//! `redis-cluster://host:port` for a cluster.

use std::time::Duration;

use verrou::AcquireOutcome;
use verrou::tair::TairBackend;
use verrou::{LockBackend, LockManager, LockOptions, LockToken, UpdateOptions, VersionedStore, VersionedStoreExt};

const WORKERS: u64 = 8;
const INCREMENTS: u64 = 25;

#[tokio::main]
async fn main() -> verrou::Result<()> {
    let url = std::env::var("TAIR_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    run(url).await
}

/// The example against the server at `url` (the test suite runs it against
/// its own server with the module: tests/it/examples.rs).
pub async fn run(url: String) -> verrou::Result<()> {
    println!("verrou Tair example against {url}");
    // Release notifications off: release is the native `CAD` printed below
    // (on, the default on one server, it is a small script that also wakes
    // a waiter of another process).
    let backend = TairBackend::builder(&url)?.release_notifications(false).build().await?;

    // 1. The primitives, one native command each, same key and token throughout.
    let key = "verrou:example:resource";
    let token = LockToken::generate()?;
    let ttl = Duration::from_secs(10);
    match backend.try_acquire(key, &token, ttl).await? {
        AcquireOutcome::Acquired(_) => println!("{:<36} -> acquired", "SET key token NX PX 10000"),
        _ => {
            println!("{key} is held by someone else; try again in a few seconds");
            return Ok(());
        }
    }
    let intruder = LockToken::generate()?;
    let outcome = backend.release(key, &intruder).await?;
    println!("{:<36} -> {outcome:?}", "CAD key other-token");
    let outcome = backend.renew(key, &token, ttl).await?;
    println!("{:<36} -> {outcome:?}", "CAS key token token PX 10000");
    let outcome = backend.release(key, &token).await?;
    println!("{:<36} -> {outcome:?}", "CAD key token");
    let outcome = backend.release(key, &token).await?;
    println!("{:<36} -> {outcome:?}", "CAD key token (again)");

    // 2. The same through the lock manager: a guard renewed in the background.
    let locks = LockManager::with_options(backend.clone(), LockOptions::with_ttl(Duration::from_secs(5)))?;
    let answer = locks
        .with_lock(key, |lease| async move {
            println!(
                "with_lock: holding {} until at most {:?} from now",
                lease.key(),
                lease.remaining()
            );
            42
        })
        .await?;
    println!("with_lock returned {answer}");

    // 3. An EXCAS counter: concurrent read-modify-write without a lock.
    let counter = "verrou:example:counter";
    if let Some(old) = backend.get(counter).await? {
        backend.delete(counter, old.version).await?;
    }
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let store = backend.clone();
        tasks.push(tokio::spawn(async move {
            let opts = UpdateOptions::default().max_attempts(1_000);
            for _ in 0..INCREMENTS {
                store
                    .update_opts(counter, &opts, |old| {
                        let n: u64 = old.and_then(|b| std::str::from_utf8(b).ok()?.parse().ok()).unwrap_or(0);
                        Some((n + 1).to_string().into_bytes())
                    })
                    .await?;
            }
            verrou::Result::Ok(())
        }));
    }
    for task in tasks {
        task.await
            .map_err(|e| verrou::Error::invalid(format!("worker panicked: {e}")))??;
    }
    if let Some(v) = backend.get(counter).await? {
        println!(
            "EXCAS counter: {} after {WORKERS} workers x {INCREMENTS} updates (expected {}), version {}",
            String::from_utf8_lossy(&v.value),
            WORKERS * INCREMENTS,
            v.version
        );
        backend.delete(counter, v.version).await?;
    }
    Ok(())
}
