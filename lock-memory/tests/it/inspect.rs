//! `inspect` on the memory backend: its fencing tokens come from one
//! counter per store, so the exact next token shows that inspecting drew
//! none, and the kinds' inspections count live holders only.

use std::time::Duration;

use lock_core::{LockManager, LockOptions, Result, RwLockManager, SemaphoreManager};
use lock_memory::MemoryBackend;

const TTL: Duration = Duration::from_millis(300);

#[tokio::test(start_paused = true)]
async fn the_lock_after_inspections_gets_the_next_token() -> Result<()> {
    let locks = LockManager::with_options(MemoryBackend::new(), LockOptions::with_ttl(TTL))?;
    let g = locks.lock("k").await?;
    let first = g.fencing_token().map(|t| t.0);
    g.release().await?;
    for _ in 0..5 {
        assert!(!locks.inspect("k").await?.is_held());
        assert!(!locks.inspect("never-used").await?.is_held());
    }
    let g = locks.lock("k").await?;
    assert_eq!(g.fencing_token().map(|t| t.0), first.map(|f| f + 1));
    let seen = locks.inspect("k").await?;
    assert_eq!(seen.info.remaining, Some(TTL), "paused clock: the whole TTL is left");
    assert_eq!(
        seen.expires_by,
        Some(seen.received_at + TTL + locks.options().drift(TTL))
    );
    g.release().await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn kinds_report_their_live_holders() -> Result<()> {
    let backend = MemoryBackend::new();
    let options = LockOptions::with_ttl(TTL).renewal(lock_core::Renewal::Manual);
    let semaphores = SemaphoreManager::with_options(backend.clone(), options.clone())?;
    let api = semaphores.semaphore("api", 4)?;
    assert_eq!(api.inspect().await?.in_use, 0);
    let two = api.acquire(2).await?;
    let one = api.acquire(1).await?;
    let seen = api.inspect().await?;
    assert_eq!((seen.in_use, seen.holders, seen.size), (3, 2, Some(4)));
    drop(one);
    tokio::time::sleep(TTL * 2).await; // `two` expires unrenewed
    assert_eq!(api.inspect().await?.in_use, 0, "expired holders count no more");
    drop(two);

    let rw = RwLockManager::with_options(backend, options)?;
    let (r1, r2) = (rw.read("cfg").await?, rw.read("cfg").await?);
    let seen = rw.inspect("cfg").await?;
    assert_eq!((seen.readers, seen.writer), (2, false));
    r1.release().await?;
    r2.release().await?;
    let w = rw.write("cfg").await?;
    let seen = rw.inspect("cfg").await?;
    assert!(seen.writer);
    assert_eq!(seen.writer_fencing_token, w.fencing_token());
    w.release().await?;
    assert_eq!(rw.inspect("cfg").await?, lock_core::RwInfo::default());
    Ok(())
}

/// The kinds' guards release through the mutex's path: a permit given back
/// before its minimum hold keeps its permits taken until then.
#[tokio::test(start_paused = true)]
async fn a_permit_given_back_early_stays_taken_for_its_minimum_hold() -> Result<()> {
    let hold = Duration::from_secs(5);
    let options = LockOptions::with_ttl(TTL).min_hold(hold);
    let semaphores = SemaphoreManager::with_options(MemoryBackend::new(), options)?;
    let job = semaphores.semaphore("job", 1)?;
    let permit = job.acquire(1).await?;
    let until = permit.acquired_at() + hold;
    permit.release().await?;
    assert!(
        job.try_acquire(1).await?.is_none(),
        "given back before the minimum hold"
    );
    tokio::time::sleep_until(until).await;
    let next = job.try_acquire(1).await?.expect("free once the hold is over");
    assert!(tokio::time::Instant::now() >= until);
    next.release().await?;
    Ok(())
}
