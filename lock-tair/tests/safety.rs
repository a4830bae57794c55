//! Safety rules of the Tair backend (issue 11), against real servers with
//! the Tair module: fencing tokens never go back, a clean-up release never
//! overtakes the acquire it cleans up, and with replica acknowledgement a
//! renewal counts only once replicas have it.

#![allow(clippy::expect_used, clippy::panic)] // test helpers

mod common;

use std::time::Duration;

use lock_core::{AcquireOutcome, LockBackend, LockToken};
use lock_tair::TairBackend;

/// Generous bound for anything a loaded machine should finish well within.
const PATIENCE: Duration = Duration::from_secs(20);

async fn fenced_acquire(backend: &TairBackend, key: &str, ttl: Duration) -> lock_core::Result<(LockToken, u64)> {
    let token = LockToken::generate()?;
    match backend.try_acquire(key, &token, ttl).await? {
        AcquireOutcome::Acquired(lease) => Ok((token, lease.fencing_token.expect("fencing is on").0)),
        other => panic!("{key} should be free, got {other:?}"),
    }
}

/// Tokens 1..5, then a restart without data: the Lua backend's rule
/// `max(counter + 1, server time in µs)` keeps the next token above them.
#[tokio::test]
async fn fencing_tokens_keep_increasing_after_a_restart_without_data() {
    let server = common::tair_server().await;
    let backend = common::connect(common::builder(&server.url()).fencing(true)).await;
    let ttl = Duration::from_millis(500);
    let mut tokens = Vec::new();
    for _ in 0..5 {
        let (token, fence) = fenced_acquire(&backend, "fenced", ttl).await.expect("acquire");
        backend.release("fenced", &token).await.expect("release");
        tokens.push(fence);
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "not increasing: {tokens:?}");
    let highest = *tokens.iter().max().expect("five tokens");

    server.restart_empty().await.expect("restart without data");
    let give_up = tokio::time::Instant::now() + PATIENCE;
    let next = loop {
        match fenced_acquire(&backend, "fenced", ttl).await {
            Ok((_, fence)) => break fence,
            Err(e) if tokio::time::Instant::now() < give_up => {
                tracing_free_note(&e);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("no acquire after the restart: {e}"),
        }
    };
    assert!(
        next > highest,
        "the first token after a restart without data ({next}) is not above all earlier ones {tokens:?}"
    );
}

/// The backend reconnects after a restart: errors meanwhile are expected.
fn tracing_free_note(e: &lock_core::Error) {
    eprintln!("acquire after restart failed (reconnecting): {e}");
}
