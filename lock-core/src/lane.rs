//! Per-manager waiting lanes. Tasks of one manager that wait for the same key
//! queue locally in FIFO order, so only the head of the line polls the
//! backend (no local herd, fair hand-off), and a local release wakes the head
//! at once instead of at its next backoff tick.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// One key's lane.
pub(crate) struct KeyLane {
    key: String,
    /// Held by the task currently trying to acquire (tokio's mutex is FIFO).
    pub(crate) turn: Arc<tokio::sync::Mutex<()>>,
    /// Signalled when a guard of this manager releases the key.
    pub(crate) released: Notify,
}

/// The lanes, and their number readable without the lock: with no lane at
/// all (the uncontended case) neither the lock nor a hash is needed.
#[derive(Default)]
struct LaneMap {
    lanes: Mutex<HashMap<String, Arc<KeyLane>>>,
    len: AtomicUsize,
}

impl LaneMap {
    fn is_empty(&self) -> bool {
        self.len.load(Ordering::SeqCst) == 0
    }

    fn publish_len(&self, map: &HashMap<String, Arc<KeyLane>>) {
        self.len.store(map.len(), Ordering::SeqCst);
    }
}

/// Lanes by key. A lane lives exactly as long as someone uses it: the last
/// [`LaneRef`] removes it from the map, so the map never grows with keys
/// nobody waits for or holds.
#[derive(Default, Clone)]
pub(crate) struct Lanes {
    map: Arc<LaneMap>,
}

fn lock(map: &LaneMap) -> MutexGuard<'_, HashMap<String, Arc<KeyLane>>> {
    match map.lanes.lock() {
        Ok(m) => m,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl Lanes {
    pub(crate) fn get(&self, key: &str) -> LaneRef {
        let mut map = lock(&self.map);
        let lane = match map.get(key) {
            Some(lane) => lane.clone(),
            None => {
                let lane = Arc::new(KeyLane {
                    key: key.to_owned(),
                    turn: Arc::default(),
                    released: Notify::new(),
                });
                map.insert(key.to_owned(), lane.clone());
                self.map.publish_len(&map);
                lane
            }
        };
        LaneRef {
            lane: Some(lane),
            map: self.map.clone(),
        }
    }

    /// The lane of `key` if someone waits for it (no allocation otherwise).
    pub(crate) fn existing(&self, key: &str) -> Option<LaneRef> {
        if self.map.is_empty() {
            return None;
        }
        let map = lock(&self.map);
        let lane = map.get(key)?.clone();
        Some(LaneRef {
            lane: Some(lane),
            map: self.map.clone(),
        })
    }

    /// Whether someone of this manager waits for `key` (no lock, no hash
    /// when nobody waits at all).
    pub(crate) fn is_waited(&self, key: &str) -> bool {
        !self.map.is_empty() && lock(&self.map).contains_key(key)
    }

    /// Wake the head of `key`'s line, if there is one.
    pub(crate) fn notify_released(&self, key: &str) {
        // A lane created after this check is a waiter that arrived after the
        // release: it tries the key before waiting, as it always did.
        if self.map.is_empty() {
            return;
        }
        if let Some(lane) = lock(&self.map).get(key) {
            lane.released.notify_one();
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.map).len()
    }
}

/// A counted use of a lane.
pub(crate) struct LaneRef {
    /// Always `Some` until dropped.
    lane: Option<Arc<KeyLane>>,
    map: Arc<LaneMap>,
}

impl std::ops::Deref for LaneRef {
    type Target = KeyLane;
    fn deref(&self) -> &KeyLane {
        match &self.lane {
            Some(lane) => lane,
            None => unreachable!("a LaneRef holds its lane until dropped"),
        }
    }
}

impl Clone for LaneRef {
    fn clone(&self) -> Self {
        LaneRef {
            lane: self.lane.clone(),
            map: self.map.clone(),
        }
    }
}

impl Drop for LaneRef {
    fn drop(&mut self) {
        let mut map = lock(&self.map);
        // Drop our reference under the map lock, so the count we read next is
        // exact: only the map's own reference left means nobody uses the lane.
        if let Some(lane) = self.lane.take() {
            let key = lane.key.clone();
            drop(lane);
            if map.get(&key).is_some_and(|l| Arc::strong_count(l) == 1) {
                map.remove(&key);
                self.map.publish_len(&map);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_live_as_long_as_their_users() {
        let lanes = Lanes::default();
        let a = lanes.get("a");
        let a2 = lanes.get("a");
        let b = lanes.get("b");
        let a3 = a.clone();
        assert_eq!(lanes.len(), 2);
        drop(a);
        drop(a2);
        assert_eq!(lanes.len(), 2, "a3 still uses lane a");
        drop(a3);
        assert_eq!(lanes.len(), 1);
        drop(b);
        assert_eq!(lanes.len(), 0);
    }
}
