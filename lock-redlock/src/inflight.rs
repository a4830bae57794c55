//! Writes that outlive the call that started them, so a release can stop
//! them from leaving a key behind.
//!
//! An acquire returns as soon as the quorum granted, and a renewal re-seeds
//! nodes after it returned; their node calls finish in a background task.
//! If the lock is released meanwhile, a late `SET NX` could land after the
//! release's delete. `release` marks the (key, token) released here; the
//! background task checks the mark after each write completes and deletes
//! what it wrote. Checking after the write's reply is what makes this sound:
//! either the mark was set first (we delete), or the release's deletes are
//! sent after our write was applied.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use lock_core::LockToken;

#[derive(Debug, Default)]
struct Watch {
    released: bool,
    /// Background tasks still working on this (key, token).
    tasks: usize,
}

/// The registry; one per [`crate::Redlock`] (clones share it). Entries live
/// only while a background task works on them.
#[derive(Debug, Default)]
pub(crate) struct Inflight {
    map: Mutex<HashMap<(String, LockToken), Watch>>,
}

impl Inflight {
    fn map(&self) -> MutexGuard<'_, HashMap<(String, LockToken), Watch>> {
        // Every update is a single map operation: a poisoned map is consistent.
        match self.map.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// A background task starts working on (key, token). Call before the
    /// foreground call returns, so a release right after sees it.
    pub(crate) fn begin(&self, key: &str, token: &LockToken) {
        self.map().entry((key.to_owned(), *token)).or_default().tasks += 1;
    }

    /// The task is done.
    pub(crate) fn end(&self, key: &str, token: &LockToken) {
        let mut map = self.map();
        let id = (key.to_owned(), *token);
        if let Some(watch) = map.get_mut(&id) {
            watch.tasks = watch.tasks.saturating_sub(1);
            if watch.tasks == 0 {
                map.remove(&id);
            }
        }
    }

    /// A release of (key, token) has started.
    pub(crate) fn mark_released(&self, key: &str, token: &LockToken) {
        if let Some(watch) = self.map().get_mut(&(key.to_owned(), *token)) {
            watch.released = true;
        }
    }

    /// True once a release of (key, token) started while a task was working.
    pub(crate) fn is_released(&self, key: &str, token: &LockToken) -> bool {
        self.map().get(&(key.to_owned(), *token)).is_some_and(|w| w.released)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_live_only_while_tasks_run() {
        let reg = Inflight::default();
        let t = LockToken::from_bytes([7; 16]);
        reg.mark_released("k", &t);
        assert!(!reg.is_released("k", &t), "no task: nothing to mark");
        reg.begin("k", &t);
        reg.begin("k", &t);
        assert!(!reg.is_released("k", &t));
        reg.mark_released("k", &t);
        assert!(reg.is_released("k", &t));
        assert!(!reg.is_released("other", &t));
        reg.end("k", &t);
        assert!(reg.is_released("k", &t));
        reg.end("k", &t);
        assert_eq!(reg.len(), 0);
    }
}
