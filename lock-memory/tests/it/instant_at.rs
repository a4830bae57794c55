//! `InstantLockBackend::try_acquire_at` / `release_at`: the memory backend
//! answers as of the caller's earlier reading, so the lock expires earlier
//! (never later) and what expired after the reading is still there.

use std::time::Duration;

use lock_core::raw::InstantLockBackend;

use lock_core::{AcquireOutcome, ReleaseOutcome};
use lock_core::{LockToken, Result};
use lock_memory::MemoryBackend;
use tokio::time::Instant;

const TTL: Duration = Duration::from_millis(300);

#[tokio::test(start_paused = true)]
async fn a_lock_taken_as_of_an_earlier_reading_expires_that_much_earlier() -> Result<()> {
    let backend = MemoryBackend::new();
    let (a, b) = (LockToken::generate()?, LockToken::generate()?);
    let read = Instant::now();
    tokio::time::advance(Duration::from_millis(200)).await;
    let taken = backend.try_acquire_at("k", &a, TTL, read)?;
    assert!(matches!(taken, AcquireOutcome::Acquired(_)), "{taken:?}");
    // 300 ms from the reading, so 100 ms from now, not 300.
    assert_eq!(backend.lock_ttl("k"), Some(Duration::from_millis(100)));
    let held = backend.try_acquire_now("k", &b, TTL)?;
    assert_eq!(
        held,
        AcquireOutcome::Held {
            retry_after: Some(Duration::from_millis(100))
        }
    );
    tokio::time::advance(Duration::from_millis(100)).await;
    let second = backend.try_acquire_now("k", &b, TTL)?;
    assert!(matches!(second, AcquireOutcome::Acquired(_)), "{second:?}");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_release_as_of_an_earlier_reading_still_finds_what_expired_after_it() -> Result<()> {
    let backend = MemoryBackend::new();
    let (a, b) = (LockToken::generate()?, LockToken::generate()?);
    let start = Instant::now();
    assert!(matches!(
        backend.try_acquire_now("k", &a, TTL)?,
        AcquireOutcome::Acquired(_)
    ));
    let read = Instant::now();
    tokio::time::advance(TTL + Duration::from_millis(50)).await;
    // Another token never matches, whatever the reading.
    assert_eq!(backend.release_at("k", &b, read)?, ReleaseOutcome::HeldByOther);
    // As of the reading the lock was ours and alive: released.
    assert_eq!(backend.release_at("k", &a, read)?, ReleaseOutcome::Released);
    // As of now, a lock that expired is gone.
    assert!(matches!(
        backend.try_acquire_at("k", &a, TTL, start)?,
        AcquireOutcome::Acquired(_)
    ));
    assert_eq!(backend.release_now("k", &a)?, ReleaseOutcome::Missing);
    Ok(())
}
