//! Per-manager waiting lanes. Tasks of one manager that wait for the same key
//! queue locally in FIFO order, so only the head of the line polls the
//! backend (no local herd, fair hand-off), and a local release wakes the head
//! at once instead of at its next backoff tick.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// One key's lane.
#[derive(Default)]
pub(crate) struct KeyLane {
    /// Held by the task currently trying to acquire (tokio's mutex is FIFO).
    pub(crate) turn: Arc<tokio::sync::Mutex<()>>,
    /// Signalled when a guard of this manager releases the key.
    pub(crate) released: Notify,
}

/// Lanes by key.
#[derive(Default)]
pub(crate) struct Lanes {
    map: Mutex<HashMap<String, Arc<KeyLane>>>,
}

/// Lanes nobody uses are pruned once the map grows past this.
const PRUNE_ABOVE: usize = 1024;

impl Lanes {
    pub(crate) fn get(&self, key: &str) -> Arc<KeyLane> {
        let mut map = match self.map.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        if map.len() > PRUNE_ABOVE {
            map.retain(|_, lane| Arc::strong_count(lane) > 1);
        }
        map.entry(key.to_owned()).or_default().clone()
    }
}
