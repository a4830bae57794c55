//! Which nodes each held lock may hold a key on, so a release deletes only
//! there: nodes that refused the acquire never had our token, and a delete
//! sent to them would only find someone else's key (or none).
//!
//! Nodes whose acquire was still in flight when the quorum was reached are
//! kept apart: a release does not call them (a delete could overtake the
//! acquire's write on another connection, and the acquire's follow-up would
//! then have to delete again); the follow-up settles them when their answer
//! arrives — into the record while the lock is held, or by a delete of its
//! own once the release took the record.
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
    /// Nodes that granted or may have written.
    nodes: Vec<usize>,
    /// Nodes whose acquire had not answered when the lock was granted.
    in_flight: Vec<usize>,
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

    /// A lock was granted; `nodes` may hold its key, `in_flight` may still
    /// write it.
    pub(crate) fn record(
        &self,
        key: &str,
        token: &LockToken,
        nodes: Vec<usize>,
        in_flight: Vec<usize>,
        expires: Instant,
    ) {
        let mut map = self.map();
        if map.len() >= MAX_HELD {
            let now = Instant::now();
            map.retain(|_, held| held.expires > now);
            if map.len() >= MAX_HELD {
                return;
            }
        }
        map.insert(
            (key.to_owned(), *token),
            Held {
                nodes,
                in_flight,
                expires,
            },
        );
    }

    /// Node `i`'s acquire answered after the grant (`wrote`: it may have
    /// written the key). True when the record took the answer, so the
    /// release will see it; false when there is no record any more (the
    /// release took it first, and left this node to the caller).
    pub(crate) fn settle_in_flight(&self, key: &str, token: &LockToken, i: usize, wrote: bool) -> bool {
        let mut map = self.map();
        let Some(held) = map.get_mut(&(key.to_owned(), *token)) else {
            return false;
        };
        held.in_flight.retain(|&n| n != i);
        if wrote && !held.nodes.contains(&i) {
            held.nodes.push(i);
        }
        true
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

    /// The nodes to release and those whose acquire is still in flight,
    /// forgetting the lock; `None` when unknown.
    pub(crate) fn take(&self, key: &str, token: &LockToken) -> Option<(Vec<usize>, Vec<usize>)> {
        self.map()
            .remove(&(key.to_owned(), *token))
            .map(|held| (held.nodes, held.in_flight))
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
        holdings.record("k", &t, vec![0, 2], vec![1, 3], later);
        holdings.add_node("k", &t, 4);
        holdings.add_node("k", &t, 0);
        assert!(holdings.settle_in_flight("k", &t, 1, true));
        assert!(holdings.settle_in_flight("k", &t, 3, false));
        assert_eq!(holdings.take("k", &t), Some((vec![0, 2, 4, 1], vec![])));
        assert!(
            !holdings.settle_in_flight("k", &t, 1, true),
            "no record after the release"
        );
        assert_eq!(holdings.take("k", &t), None);
        holdings.add_node("k", &t, 1);
        assert_eq!(holdings.take("k", &t), None, "nothing recorded after the release");
    }
}
