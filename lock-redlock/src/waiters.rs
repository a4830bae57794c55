//! One waiter per key across the nodes. A node that wakes one waiter per
//! release reserves the key for the one whose acquire has waited longest;
//! a waiter that drew its own id and counted its own age on each node
//! would be a different waiter on each, and the nodes would pick different
//! ones: none with a quorum of reservations, which then expire while the
//! key stays free. So each acquire waiting on a key gets one id and one age
//! here, the same on every node, kept across its waits until a quorum
//! grants it the key.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use lock_core::LockToken;
use lock_core::raw::Waiter;
use tokio::time::Instant;

/// A waiter not seen waiting for this long is a new acquire's.
const FORGOTTEN: Duration = Duration::from_secs(1);

/// Keys remembered before the forgotten ones are looked for.
const KEPT: usize = 4096;

#[derive(Debug)]
struct Entry {
    id: LockToken,
    since: Instant,
    last: Instant,
}

/// The waiting acquires, one per key (the manager sends one waiter per key
/// to its backend; others queue behind it in the manager).
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    by_key: Mutex<HashMap<String, Entry>>,
}

impl Waiters {
    fn map(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // Every update is a single map operation: a poisoned map is consistent.
        match self.by_key.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// A wait on `key` starts: its waiter, with how long its acquire has
    /// waited so far. `None` when no id could be drawn (each node then
    /// names the waiter itself).
    pub(crate) fn start(&self, key: &str) -> Option<Waiter> {
        let now = Instant::now();
        let mut map = self.map();
        if map.len() >= KEPT && !map.contains_key(key) {
            map.retain(|_, e| now.duration_since(e.last) < FORGOTTEN);
        }
        let entry = match map.get_mut(key) {
            Some(e) if now.duration_since(e.last) < FORGOTTEN => e,
            _ => {
                let id = LockToken::generate().ok()?;
                map.insert(
                    key.to_owned(),
                    Entry {
                        id,
                        since: now,
                        last: now,
                    },
                );
                map.get_mut(key)?
            }
        };
        entry.last = now;
        Some(Waiter::new(entry.id, now.duration_since(entry.since)))
    }

    /// A quorum granted `key`: its waiter's wait is over.
    pub(crate) fn acquired(&self, key: &str) {
        let mut map = self.map();
        if !map.is_empty() {
            map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_acquire_keeps_its_id_and_age_across_waits_until_granted() {
        let waiters = Waiters::default();
        let first = waiters.start("k").expect("an id");
        assert_eq!(first.waited, Duration::ZERO);
        tokio::time::sleep(Duration::from_millis(30)).await;
        let again = waiters.start("k").expect("an id");
        assert_eq!(again.id, first.id);
        assert_eq!(again.waited, Duration::from_millis(30));
        waiters.acquired("k");
        let next = waiters.start("k").expect("an id");
        assert_ne!(next.id, first.id, "a new acquire");
        assert_eq!(next.waited, Duration::ZERO);
        // A waiter not seen for a while was another acquire's.
        tokio::time::sleep(FORGOTTEN).await;
        let later = waiters.start("k").expect("an id");
        assert_ne!(later.id, next.id);
        assert_eq!(later.waited, Duration::ZERO);
    }
}
