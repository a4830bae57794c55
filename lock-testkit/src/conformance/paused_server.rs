//! Cases on a real server paused (SIGSTOP) past the TTL, shared by the Redis
//! backends: each takes the server and what it checks, built by the caller
//! with the backend's own options.

use std::time::Duration;

use lock_core::{LossReason, SemaphoreManager};
use tokio::time::Instant;

use crate::server::RedisServer;

/// A semaphore over `server` (a manager with lease `ttl` and an acquire
/// timeout of `ttl`), the server paused (SIGSTOP) past the TTL: the permit's
/// `lost()` fires with [`LossReason::DeadlinePassed`] within one TTL of its
/// local deadline, and once the server runs again both permits are free.
///
/// # Cancel safety
///
/// Not cancel safe: dropped while the server is paused, it leaves it paused.
pub async fn semaphore_loss_by_the_local_deadline(server: &RedisServer, sems: &SemaphoreManager, ttl: Duration) {
    let sem = sems.semaphore("paused", 2).unwrap();
    let permit = sem.acquire(1).await.expect("acquire");
    server.pause().expect("SIGSTOP");
    let deadline = permit.deadline();
    let reason = tokio::time::timeout(ttl * 10, permit.lost())
        .await
        .expect("lost() must fire while the server is paused");
    let fired = Instant::now();
    server.resume().expect("SIGCONT");
    assert_eq!(reason, LossReason::DeadlinePassed);
    assert!(
        fired <= deadline + ttl,
        "lost() fired {:?} after the local deadline",
        fired.saturating_duration_since(deadline)
    );
    drop(permit);
    // The server's clock ran while it was stopped: the lease is over, both
    // permits are free again.
    let both = sem.acquire(2).await.expect("permits back after the pause");
    both.release().await.expect("release");
}
