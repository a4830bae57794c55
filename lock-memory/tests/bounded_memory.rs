//! The backend's memory is bounded by the keys in use, not by every key ever
//! seen: a million distinct short-lived locks leave no per-key state behind.

#![allow(clippy::expect_used)] // test helpers

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use lock_core::{LockBackend, LockToken};
use lock_memory::MemoryBackend;

/// Counts live heap bytes, to report what the per-key state costs.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator; only adds bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Distinct keys acquired and released (the bounded-memory claim).
const KEYS: usize = 1_000_000;
/// Distinct keys left to expire, and waited for: fewer, to keep the test
/// fast in debug builds (a measured run with 1M expired keys ended the same).
const EXPIRED: usize = 250_000;
const WAITED: usize = 50_000;
const TTL: Duration = Duration::from_secs(1);

fn live_bytes() -> isize {
    LIVE.load(Ordering::Relaxed)
}

#[tokio::test(start_paused = true)]
async fn a_million_distinct_keys_leave_no_state_behind() {
    let memory = MemoryBackend::new();
    let token = LockToken::generate().expect("token");
    let before = live_bytes();

    // Released locks.
    for i in 0..KEYS {
        let key = format!("released:{i}");
        memory.try_acquire(&key, &token, TTL).await.expect("acquire");
        memory.release(&key, &token).await.expect("release");
    }
    let released = memory.tracked_keys();
    let released_bytes = live_bytes() - before;

    // Locks nobody releases: they expire.
    for i in 0..EXPIRED {
        memory
            .try_acquire(&format!("expired:{i}"), &token, TTL)
            .await
            .expect("acquire");
    }
    tokio::time::sleep(TTL * 2).await;
    memory.try_acquire("one-more", &token, TTL).await.expect("acquire");

    // Waiters that gave up, and waiters cancelled mid-wait.
    for i in 0..WAITED {
        memory.wait_for_release(&format!("waited:{i}"), Duration::ZERO).await;
        let key = format!("cancelled:{i}");
        let cancelled = memory.wait_for_release(&key, TTL);
        assert!(tokio::time::timeout(Duration::ZERO, cancelled).await.is_err());
    }
    let after = memory.tracked_keys();
    let after_bytes = live_bytes() - before;
    println!(
        "{KEYS} released keys: {released} entries, {released_bytes} bytes; \
         + {EXPIRED} expired + 2 × {WAITED} waited keys: {after} entries, {after_bytes} bytes"
    );
    assert_eq!(released, 0, "released keys left per-key state");
    assert_eq!(after, 2, "one live lock: its entry and its expiry, nothing else");
}
