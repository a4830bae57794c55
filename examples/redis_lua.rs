//! The Lua-on-Redis backend: acquire, renew and release by hand, a scoped
//! critical section with `with_lock`, and a versioned counter.
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example redis_lua --features redis-lua
//! ```

use std::time::Duration;

use verrou::redis_lua::RedisLuaBackend;
use verrou::{LockBackend, LockManager, LockOptions, LockToken, Renewal, VersionedStore, VersionedStoreExt};

#[tokio::main(flavor = "current_thread")]
async fn main() -> verrou::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    run(url).await
}

/// The example against the server at `url` (the test suite runs it against
/// its own server: tests/it/examples.rs).
pub async fn run(url: String) -> verrou::Result<()> {
    let backend = RedisLuaBackend::builder(&url)?
        .response_timeout(Duration::from_millis(500))
        .fencing(true)
        .build()
        .await?;
    println!("connected: {backend:?}");

    // The primitive operations: one round trip each, owner-checked.
    let token = LockToken::generate()?;
    let outcome = backend
        .try_acquire("example:invoice:42", &token, Duration::from_secs(5))
        .await?;
    println!("acquire: {outcome:?}");
    println!(
        "renew:   {:?}",
        backend
            .renew("example:invoice:42", &token, Duration::from_secs(5))
            .await?
    );
    println!("release: {:?}", backend.release("example:invoice:42", &token).await?);

    // A guard from the manager: renewed in the background, released here.
    let locks = LockManager::with_options(
        backend.clone(),
        LockOptions::with_ttl(Duration::from_secs(3)).renewal(Renewal::Auto {
            interval: Duration::from_secs(1),
        }),
    )?;
    let guard = locks.lock("example:invoice:42").await?;
    println!(
        "guard: fencing token {:?}, {:?} left",
        guard.fencing_token(),
        guard.remaining()
    );
    guard.extend(Duration::from_secs(6)).await?;
    println!("released: {:?}", guard.release().await?);

    // A scoped critical section, cancelled if the lease is lost.
    let total = locks
        .with_lock("example:invoice:42", |lease| async move {
            println!("in the critical section with fencing token {:?}", lease.fencing_token());
            40 + 2
        })
        .await?;
    println!("with_lock returned {total}");

    // A versioned counter: compare-and-set by version, retried on conflict.
    let counter = "example:counter";
    for _ in 0..3 {
        let written = backend
            .update(counter, |old| {
                let n: u64 = old.and_then(|b| std::str::from_utf8(b).ok()?.parse().ok()).unwrap_or(0);
                Some((n + 1).to_string().into_bytes())
            })
            .await?;
        // `None` only when the closure declines, which this one never does.
        if let Some(v) = written {
            println!(
                "counter = {} (version {})",
                String::from_utf8_lossy(&v.value),
                v.version
            );
        }
    }
    if let Some(current) = backend.get(counter).await? {
        backend.delete(counter, current.version).await?;
        println!("counter deleted");
    }
    Ok(())
}
