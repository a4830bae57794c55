//! The fair (FIFO) queues: per key, waiters in arrival order, each entry
//! with a deadline its next attempt pushes back (`LockBackend::try_acquire_fair`).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use lock_core::{FencingToken, LockToken};

use lock_core::raw::FairWaiter;

use lock_core::{AcquireOutcome, Lease};
use tokio::time::Instant;

use crate::State;

/// Queues by key; a key's queue goes with its last waiter.
#[derive(Default)]
pub(crate) struct Queues {
    by_key: HashMap<String, VecDeque<(LockToken, Instant)>>,
}

impl Queues {
    /// The live head of `key`'s queue, once expired entries are gone.
    fn head(&mut self, key: &str, now: Instant) -> Option<LockToken> {
        let queue = self.by_key.get_mut(key)?;
        queue.retain(|(_, deadline)| *deadline > now);
        let head = queue.front().map(|(id, _)| *id);
        if head.is_none() {
            self.by_key.remove(key);
        }
        head
    }

    /// Whether `id` would be granted a free `key` now (it heads the queue,
    /// or nobody queues).
    pub(crate) fn may_take(&mut self, key: &str, id: &LockToken, now: Instant) -> bool {
        self.head(key, now).is_none_or(|h| h == *id)
    }

    /// One fair attempt against `s` (the caller holds both locks).
    pub(crate) fn attempt(
        &mut self,
        s: &mut State,
        key: &str,
        token: &LockToken,
        ttl: Duration,
        waiter: &FairWaiter,
        now: Instant,
    ) -> AcquireOutcome {
        let head = self.head(key, now);
        let free = !s.locks.contains_key(key);
        if free && head.is_none_or(|h| h == waiter.id) {
            self.leave(key, &waiter.id);
            let fence = s.insert_lock(key, *token, now + ttl);
            return AcquireOutcome::Acquired(Lease::new().with_fencing_token(Some(FencingToken(fence))));
        }
        let queue = self.by_key.entry(key.to_owned()).or_default();
        let deadline = now + waiter.claim;
        match queue.iter_mut().find(|(id, _)| *id == waiter.id) {
            Some(entry) => entry.1 = deadline,
            None => queue.push_back((waiter.id, deadline)),
        }
        let is_head = queue.front().is_some_and(|(id, _)| *id == waiter.id);
        let retry_after = match s.locks.get(key) {
            Some(held) if is_head => Some(held.expires_at - now),
            _ => None,
        };
        AcquireOutcome::Held { retry_after }
    }

    /// Takes `id` out of `key`'s queue; true if it was the head.
    pub(crate) fn leave(&mut self, key: &str, id: &LockToken) -> bool {
        let Some(queue) = self.by_key.get_mut(key) else {
            return false;
        };
        let was_head = queue.front().is_some_and(|(w, _)| w == id);
        queue.retain(|(w, _)| w != id);
        if queue.is_empty() {
            self.by_key.remove(key);
        }
        was_head
    }

    /// Keys with a queue (diagnostics).
    pub(crate) fn len(&self) -> usize {
        self.by_key.len()
    }
}
