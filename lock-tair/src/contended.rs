//! Keys whose last release by this backend left waiters registered: the
//! next acquire of such a key writes the token already marked
//! ([`lock_redis_family::wake::WAITER_MARK`]), so that its release runs
//! the release script and wakes them. Without it a holder that takes the
//! key right back (barging: nobody was starving yet) would hold a bare
//! token that the registered waiters, past their one look at the key, never
//! mark, and its `CAD` would wake nobody until their timers.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Most keys remembered; past it the set is cleared (the next releases of
/// those keys learn again).
const KEPT: usize = 4096;

/// See the module docs. One per backend (clones share it).
#[derive(Debug, Default)]
pub(crate) struct Contended {
    keys: Mutex<HashSet<String>>,
    /// Entries in `keys`, so that the uncontended path takes no lock.
    len: AtomicUsize,
}

impl Contended {
    fn keys(&self) -> MutexGuard<'_, HashSet<String>> {
        // Each update is one set operation: a poisoned set is consistent.
        match self.keys.lock() {
            Ok(k) => k,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Whether the last release of `key` by this backend left waiters.
    pub(crate) fn contains(&self, key: &str) -> bool {
        self.len.load(Ordering::Relaxed) > 0 && self.keys().contains(key)
    }

    /// A release of `key` by this backend: `waiters`, it left some
    /// registered.
    pub(crate) fn released(&self, key: &str, waiters: bool) {
        if !waiters && self.len.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut keys = self.keys();
        if waiters {
            if keys.len() >= KEPT {
                keys.clear();
            }
            keys.insert(key.to_owned());
        } else {
            keys.remove(key);
        }
        self.len.store(keys.len(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_remembered_until_a_release_leaves_no_waiter() {
        let contended = Contended::default();
        assert!(!contended.contains("k"));
        contended.released("k", true);
        assert!(contended.contains("k"));
        assert!(!contended.contains("other"));
        contended.released("k", false);
        assert!(!contended.contains("k"));
        assert_eq!(contended.len.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_set_stays_bounded() {
        let contended = Contended::default();
        for i in 0..=KEPT {
            contended.released(&i.to_string(), true);
        }
        assert!(contended.len.load(Ordering::Relaxed) <= KEPT);
    }
}
