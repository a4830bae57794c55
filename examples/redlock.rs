//! Redlock over several independent Redis or Valkey servers, with the
//! Lua-on-Redis backend on each node.
//!
//! Start three throw-away servers, then run the example:
//!
//! ```sh
//! for port in 6379 6380 6381; do redis-server --port $port --save '' --appendonly no --daemonize yes; done
//! cargo run --example redlock --features redlock,redis-lua
//! ```
//!
//! Other servers: `REDLOCK_URLS=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379`
//! (comma-separated; default: ports 6379, 6380 and 6381 on 127.0.0.1). Every
//! node must be reachable at start: the Lua backend connects eagerly.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use verrou::redis_lua::RedisLuaBackend;
use verrou::redlock::{Redlock, RedlockOptions};
use verrou::{LockBackend, LockManager, LockOptions, LockToken};

const DEFAULT_URLS: &str = "redis://127.0.0.1:6379,redis://127.0.0.1:6380,redis://127.0.0.1:6381";
const TTL: Duration = Duration::from_secs(2);
const WORKERS: u64 = 4;
const INCREMENTS: u64 = 10;

/// One Redlock client: a Lua backend per server, named by its URL.
async fn connect(urls: &[String]) -> verrou::Result<Redlock> {
    let mut nodes: Vec<(String, Arc<dyn LockBackend>)> = Vec::new();
    for url in urls {
        let node = RedisLuaBackend::builder(url)?
            .connect_timeout(Duration::from_millis(500))
            .response_timeout(Duration::from_millis(250))
            .release_notifications(true)
            .build()
            .await
            .map_err(|e| {
                eprintln!("cannot reach {url}: {e}\nstart the servers first (see the top of examples/redlock.rs)");
                e
            })?;
        nodes.push((url.clone(), Arc::new(node)));
    }
    Redlock::with_named_nodes(nodes, RedlockOptions::default())
}

#[tokio::main]
async fn main() -> verrou::Result<()> {
    let urls: Vec<String> = std::env::var("REDLOCK_URLS")
        .unwrap_or_else(|_| DEFAULT_URLS.to_owned())
        .split(',')
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty())
        .collect();
    run(urls).await
}

/// The example over the servers at `urls` (the test suite runs it against
/// its own servers: tests/it/examples.rs).
pub async fn run(urls: Vec<String>) -> verrou::Result<()> {
    let redlock = connect(&urls).await?;
    println!(
        "redlock over {} nodes, quorum {}, per-node timeout {:?} for a {TTL:?} TTL, fencing tokens: {}",
        urls.len(),
        redlock.quorum(),
        redlock.options().node_timeout_for(TTL),
        redlock.capabilities().fencing_tokens,
    );
    let locks = LockManager::with_options(redlock.clone(), LockOptions::with_ttl(TTL))?;

    // 1. Read-modify-write of an unprotected counter, each step under the lock.
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let (locks, counter) = (locks.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..INCREMENTS {
                locks
                    .with_lock("example:redlock:counter", |_lease| async {
                        let seen = counter.load(Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        counter.store(seen + 1, Ordering::SeqCst);
                    })
                    .await?;
            }
            Ok::<_, verrou::Error>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| verrou::Error::backend("tokio", e.to_string()))??;
    }
    let total = WORKERS * INCREMENTS;
    println!(
        "{WORKERS} workers x {INCREMENTS} locked increments: counter = {} / {total} in {:?} ({:?} per lock + release)",
        counter.load(Ordering::SeqCst),
        started.elapsed(),
        started.elapsed() / u32::try_from(total).unwrap_or(u32::MAX),
    );

    // 2. While one client holds the lock, another client is refused.
    let guard = locks.lock("example:redlock:held").await?;
    let other = LockManager::with_options(connect(&urls).await?, LockOptions::with_ttl(TTL))?;
    let refused = other.try_lock("example:redlock:held").await?.is_none();
    println!(
        "held with {:?} of local validity left; a second client's try_lock refused: {refused}",
        guard.remaining()
    );
    guard.release().await?;

    // 3. What each node said about a release.
    let token = LockToken::generate()?;
    redlock.try_acquire("example:redlock:report", &token, TTL).await?;
    let report = redlock.release_report("example:redlock:report", &token).await?;
    println!(
        "release: {} of {} nodes released (quorum {}): {}",
        report.released,
        urls.len(),
        report.required,
        report.nodes
    );
    Ok(())
}
