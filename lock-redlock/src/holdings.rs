//! Which nodes each held lock may hold a key on, so a release deletes only
//! there: nodes that refused the acquire never had our token, and a delete
//! sent to them would only find someone else's key (or none).
//!
//! The record is an optimisation, never needed for safety: without one (a
//! full registry, a lock acquired through another `Redlock`) a release
//! deletes on every node, as before.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use lock_core::LockToken;
use tokio::time::Instant;

/// Most locks tracked at once; beyond this, releases go to every node.
const MAX_HELD: usize = 65_536;

#[derive(Debug)]
struct Held {
    /// Nodes that granted, may have written, or were still in flight.
    nodes: Vec<usize>,
    /// When the lock expires unless renewed: a lock never released (lost,
    /// leaked) is pruned after this.
    expires: Instant,
}

/// The registry; one per [`crate::Redlock`] (clones share it).
#[derive(Debug, Default)]
pub(crate) struct Holdings {
    map: Mutex<HashMap<(String, LockToken), Held>>,
}

impl Holdings {
    fn map(&self) -> MutexGuard<'_, HashMap<(String, LockToken), Held>> {
        // Every update is a single map operation: a poisoned map is consistent.
        match self.map.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// A lock was granted; `nodes` may hold its key.
    pub(crate) fn record(&self, key: &str, token: &LockToken, nodes: Vec<usize>, expires: Instant) {
        let mut map = self.map();
        if map.len() >= MAX_HELD {
            let now = Instant::now();
            map.retain(|_, held| held.expires > now);
            if map.len() >= MAX_HELD {
                return;
            }
        }
        map.insert((key.to_owned(), *token), Held { nodes, expires });
    }

    /// A renewal reached the quorum: the lock lives until `expires`.
    pub(crate) fn renewed(&self, key: &str, token: &LockToken, expires: Instant) {
        if let Some(held) = self.map().get_mut(&(key.to_owned(), *token)) {
            held.expires = held.expires.max(expires);
        }
    }

    /// Node `i` got the key again (re-seeded).
    pub(crate) fn add_node(&self, key: &str, token: &LockToken, i: usize) {
        if let Some(held) = self.map().get_mut(&(key.to_owned(), *token))
            && !held.nodes.contains(&i)
        {
            held.nodes.push(i);
        }
    }

    /// The nodes to release, forgetting the lock; `None` when unknown.
    pub(crate) fn take(&self, key: &str, token: &LockToken) -> Option<Vec<usize>> {
        self.map().remove(&(key.to_owned(), *token)).map(|held| held.nodes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn records_are_taken_once_and_grow_with_reseeds() {
        let holdings = Holdings::default();
        let t = LockToken::from_bytes([3; 16]);
        let later = Instant::now() + Duration::from_secs(10);
        holdings.record("k", &t, vec![0, 2], later);
        holdings.add_node("k", &t, 4);
        holdings.add_node("k", &t, 0);
        assert_eq!(holdings.take("k", &t), Some(vec![0, 2, 4]));
        assert_eq!(holdings.take("k", &t), None);
        holdings.add_node("k", &t, 1);
        assert_eq!(holdings.take("k", &t), None, "nothing recorded after the release");
    }
}
