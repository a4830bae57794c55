//! Releases remembered long enough that no write started before them can
//! leave a key behind.
//!
//! An acquire returns as soon as the quorum granted, and a renewal re-seeds
//! nodes after it returned; their node calls finish in a background task.
//! A renewal can also be in flight when the lock is released (the manager's
//! batched renewals run on their own schedule), and answer "renewed" by a
//! quorum afterwards: its writes were applied before the release's deletes.
//! If anything then wrote the key again (a late `SET NX`, a re-seed), it
//! would stay for a full TTL with nobody holding it.
//!
//! So `release` marks the (key, token) released here, whether or not a
//! background task exists yet, and the mark lasts for the longest TTL this
//! `Redlock` has used plus the node calls' time bound: any renewal or
//! acquire started before the release has answered by then. Background work
//! checks the mark before and after each write; checking after the write's
//! reply is what makes this sound: either the mark was set first (we
//! delete), or the release's deletes are sent after our write was applied.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use lock_core::LockToken;
use tokio::time::Instant;

/// Fewest marks before expired ones are swept (sweeps are amortised: the
/// next one waits until the map has doubled).
const MIN_SWEEP: usize = 1_024;

#[derive(Debug, Default)]
struct Marks {
    /// (key, token) → when the mark may be forgotten.
    until: HashMap<(String, LockToken), Instant>,
    /// Sweep expired marks once the map reaches this size.
    sweep_at: usize,
}

/// The registry; one per [`crate::Redlock`] (clones share it). Holds one
/// entry per release for about one TTL.
#[derive(Debug, Default)]
pub(crate) struct Inflight {
    marks: Mutex<Marks>,
    /// Longest TTL of any acquire or renewal so far, in milliseconds.
    longest_ttl_ms: AtomicU64,
}

impl Inflight {
    fn marks(&self) -> MutexGuard<'_, Marks> {
        // Every update is a single map operation: a poisoned map is consistent.
        match self.marks.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// An acquire or renewal with `ttl` is about to start.
    pub(crate) fn note_ttl(&self, ttl: Duration) {
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).saturating_add(1);
        self.longest_ttl_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// A release of (key, token) has started: remember it for the longest
    /// TTL plus `margin` (the time bound of the node calls still to come).
    pub(crate) fn mark_released(&self, key: &str, token: &LockToken, margin: Duration) {
        let now = Instant::now();
        let ttl = Duration::from_millis(self.longest_ttl_ms.load(Ordering::Relaxed));
        let until = now
            + ttl
                .saturating_add(margin)
                .min(lock_core::LockOptions::MAX_TTL.saturating_mul(2));
        let mut marks = self.marks();
        marks.until.insert((key.to_owned(), *token), until);
        if marks.until.len() >= marks.sweep_at {
            marks.until.retain(|_, until| *until > now);
            marks.sweep_at = (marks.until.len() * 2).max(MIN_SWEEP);
        }
    }

    /// True when a release of (key, token) started within its mark's life.
    pub(crate) fn is_released(&self, key: &str, token: &LockToken) -> bool {
        self.marks()
            .until
            .get(&(key.to_owned(), *token))
            .is_some_and(|until| *until > Instant::now())
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.marks().until.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn marks_last_one_ttl_whatever_runs() {
        let reg = Inflight::default();
        let t = LockToken::from_bytes([7; 16]);
        reg.note_ttl(Duration::from_secs(10));
        assert!(!reg.is_released("k", &t));
        reg.mark_released("k", &t, Duration::from_secs(1));
        assert!(reg.is_released("k", &t), "marked with no task running");
        assert!(!reg.is_released("other", &t));
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(reg.is_released("k", &t), "still within the TTL and the margin");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(!reg.is_released("k", &t), "forgotten after the TTL and the margin");
    }

    #[tokio::test(start_paused = true)]
    async fn expired_marks_are_swept() {
        let reg = Inflight::default();
        reg.note_ttl(Duration::from_millis(100));
        for i in 0..MIN_SWEEP - 1 {
            reg.mark_released(&format!("k{i}"), &LockToken::from_bytes([1; 16]), Duration::ZERO);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        reg.mark_released("last", &LockToken::from_bytes([1; 16]), Duration::ZERO);
        assert!(reg.len() < 10, "{} marks left", reg.len());
    }
}
