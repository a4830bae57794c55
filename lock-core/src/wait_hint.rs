//! The shape of every backend's wake-up wait (`wait_for_release`,
//! `wait_fair`, `wait_for_permits`, ...): a watch that may fail, bounded by
//! the caller's `max_wait`.

use std::future::Future;
use std::time::Duration;

use crate::error::Result;

/// Runs `watch` for at most `max_wait`. A wake-up is a hint only: when the
/// watch fails (a dropped connection, a refused subscription), the rest of
/// `max_wait` is waited out rather than returning at once, so a caller's
/// retry loop never spins against a failing server.
///
/// # Cancel safety
/// Cancel safe: dropping the future drops the watch.
pub async fn wait_hint<F>(max_wait: Duration, watch: F)
where
    F: Future<Output = Result<()>>,
{
    let waited = tokio::time::timeout(max_wait, async {
        if watch.await.is_err() {
            std::future::pending::<()>().await;
        }
    });
    let _ = waited.await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[tokio::test(start_paused = true)]
    async fn a_failed_watch_waits_out_max_wait() {
        let start = tokio::time::Instant::now();
        wait_hint(Duration::from_secs(3), async { Err(Error::invalid("down")) }).await;
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_that_fires_returns_at_once() {
        let start = tokio::time::Instant::now();
        wait_hint(Duration::from_secs(3), async { Ok(()) }).await;
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
