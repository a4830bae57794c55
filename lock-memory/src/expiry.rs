//! Keys in order of expiry, so an expired lock or value is purged even when
//! nobody touches its key again: memory follows the keys in use.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::time::Instant;

/// One entry per live lock or value with a TTL, keyed by (expiry, id). The id
/// is unique per write (a fencing token, a version), so entries are removed
/// and moved without allocating, and a stale entry can never match a newer
/// write of the same key.
#[derive(Default)]
pub(crate) struct Expiries(BTreeMap<(Instant, u64), Arc<str>>);

impl Expiries {
    pub(crate) fn insert(&mut self, at: Instant, id: u64, key: Arc<str>) {
        self.0.insert((at, id), key);
    }

    pub(crate) fn remove(&mut self, at: Instant, id: u64) {
        self.0.remove(&(at, id));
    }

    /// Move an entry to a new expiry (a renewal).
    pub(crate) fn reschedule(&mut self, from: Instant, to: Instant, id: u64) {
        if let Some(key) = self.0.remove(&(from, id)) {
            self.0.insert((to, id), key);
        }
    }

    /// The next entry due at or before `now`, removed: (id, key).
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(u64, Arc<str>)> {
        let (&(at, _), _) = self.0.first_key_value()?;
        if at > now {
            return None;
        }
        self.0.pop_first().map(|((_, id), key)| (id, key))
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}
