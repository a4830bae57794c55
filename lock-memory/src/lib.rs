//! In-process backend of verrou: [`MemoryBackend`] implements both
//! [`LockBackend`] and [`VersionedStore`] with the same semantics as the
//! remote backends (the conformance suite in `lock-testkit` is the proof).
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lock_core::Result<()> {
//! use lock_core::LockManager;
//! use lock_memory::MemoryBackend;
//!
//! let locks = LockManager::new(MemoryBackend::new())?;
//! let guard = locks.lock("invoice:42").await?;
//! let token = guard.fencing_token(); // always issued
//! assert!(token.is_some());
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! TTLs run on `tokio::time::Instant`, so tests under
//! `#[tokio::test(start_paused = true)]` cover expiry in no wall time.
//! Waiters are woken on release. Fencing tokens and versions come from
//! store-wide counters, so they strictly increase per key and never restart
//! (no ABA), with no per-key state kept once a key is gone: expired locks and
//! values are purged in expiry order, so memory follows the keys in use.
//!
//! Clones share state: hand a clone to each "client" in a test.
//!
//! # Guarantees
//!
//! Exact within one process: it excludes nothing across processes.
//!
//! # URL
//!
//! `verrou::connect("memory://")` builds one (no parameters).
//!
//! # Features
//!
//! None.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
mod election;
mod expiry;
mod fair;
mod multi;
mod rw;
mod semaphore;

use std::collections::HashMap;
use std::collections::hash_map::Entry as MapEntry;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::raw::{FairWaiter, InstantLockBackend};
use lock_core::raw::{validate_key, validate_ttl};
use lock_core::{AcquireOutcome, Lease, ReleaseOutcome, RenewOutcome};
use lock_core::{
    Capabilities, CasOutcome, CreateOutcome, DeleteOutcome, Expiry, FencingToken, LockBackend, LockToken, Result,
    Versioned, VersionedStore,
};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::expiry::Expiries;

pub use config::{MemoryBuilder, MemoryConfig, MemoryConnector};

/// The in-process backend. Cheap to clone; clones share state.
#[derive(Clone, Default)]
pub struct MemoryBackend {
    state: Arc<Mutex<State>>,
    semaphores: Arc<Mutex<semaphore::Semaphores>>,
    rw_locks: Arc<Mutex<rw::RwLocks>>,
    elections: Arc<Mutex<election::Elections>>,
    /// Fair queues; locked after `state` when both are needed.
    queues: Arc<Mutex<fair::Queues>>,
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock_state();
        f.debug_struct("MemoryBackend")
            .field("locks", &s.locks.len())
            .field("values", &s.values.len())
            .finish_non_exhaustive()
    }
}

/// Hashes keys: foldhash is several times faster than SipHash on short
/// keys and randomly seeded per map, which keeps flooding a map with
/// colliding keys impractical.
type KeyHasher = foldhash::fast::RandomState;

#[derive(Default)]
struct State {
    /// Held locks; the key is shared with the lock's expiry entry.
    locks: HashMap<Arc<str>, HeldLock, KeyHasher>,
    /// Every held lock by expiry (keyed by its fencing token).
    lock_expiries: Expiries,
    /// Store-wide fencing counter: tokens never repeat for any key.
    fence_seq: u64,
    /// Release notifications, one per key with waiters.
    waiters: HashMap<String, Arc<Notify>, KeyHasher>,
    values: HashMap<Arc<str>, Entry, KeyHasher>,
    /// Every value with a TTL by expiry (keyed by its version).
    value_expiries: Expiries,
    /// Store-wide version counter: versions never repeat for any key.
    version_seq: u64,
}

struct HeldLock {
    token: LockToken,
    expires_at: Instant,
    fence: u64,
}

struct Entry {
    value: Vec<u8>,
    version: u64,
    expires_at: Option<Instant>,
}

impl State {
    /// Drop every lock and value whose TTL ran out by `now`.
    fn purge(&mut self, now: Instant) {
        while let Some((fence, key)) = self.lock_expiries.pop_due(now) {
            if self.locks.get(&key).is_some_and(|l| l.fence == fence) {
                self.locks.remove(&key);
            }
        }
        while let Some((version, key)) = self.value_expiries.pop_due(now) {
            if self.values.get(&key).is_some_and(|e| e.version == version) {
                self.values.remove(&key);
            }
        }
        shrink(&mut self.locks);
        shrink(&mut self.values);
        shrink(&mut self.waiters);
    }

    fn insert_lock(&mut self, key: &str, token: LockToken, expires_at: Instant) -> u64 {
        self.fence_seq += 1;
        let fence = self.fence_seq;
        let key: Arc<str> = Arc::from(key);
        self.lock_expiries.insert(expires_at, fence, key.clone());
        self.locks.insert(
            key,
            HeldLock {
                token,
                expires_at,
                fence,
            },
        );
        fence
    }

    /// Take `key` for `token` unless it is held: one hash lookup for both
    /// (the key is copied before it: a wasted copy when the key is held).
    /// `Err` carries the holder's expiry.
    fn try_insert_lock(
        &mut self,
        key: &str,
        token: LockToken,
        expires_at: Instant,
    ) -> std::result::Result<u64, Instant> {
        match self.locks.entry(Arc::from(key)) {
            MapEntry::Occupied(held) => Err(held.get().expires_at),
            MapEntry::Vacant(free) => {
                self.fence_seq += 1;
                let fence = self.fence_seq;
                self.lock_expiries.insert(expires_at, fence, free.key().clone());
                free.insert(HeldLock {
                    token,
                    expires_at,
                    fence,
                });
                Ok(fence)
            }
        }
    }

    fn remove_lock(&mut self, key: &str) {
        if let Some(held) = self.locks.remove(key) {
            self.lock_expiries.remove(held.expires_at, held.fence);
        }
    }

    fn insert_value(&mut self, key: &str, entry: Entry) {
        self.remove_value(key);
        let key: Arc<str> = Arc::from(key);
        if let Some(at) = entry.expires_at {
            self.value_expiries.insert(at, entry.version, key.clone());
        }
        self.values.insert(key, entry);
    }

    fn remove_value(&mut self, key: &str) {
        if let Some(Entry {
            expires_at: Some(at),
            version,
            ..
        }) = self.values.remove(key)
        {
            self.value_expiries.remove(at, version);
        }
    }

    fn renew(&mut self, key: &str, token: &LockToken, ttl: Duration, now: Instant) -> RenewOutcome {
        match self.locks.get_mut(key) {
            Some(held) if held.token == *token => {
                let expires_at = now + ttl;
                self.lock_expiries.reschedule(held.expires_at, expires_at, held.fence);
                held.expires_at = expires_at;
                RenewOutcome::Renewed
            }
            Some(_) => RenewOutcome::HeldByOther,
            None => RenewOutcome::Missing,
        }
    }

    fn next_version(&mut self) -> u64 {
        self.version_seq += 1;
        self.version_seq
    }

    fn notify_release(&mut self, key: &str) {
        if self.waiters.is_empty() {
            return; // no hashing when nobody waits
        }
        if let Some(n) = self.waiters.remove(key) {
            n.notify_waiters();
        }
    }
}

impl MemoryBackend {
    /// An empty backend.
    pub fn new() -> Self {
        MemoryBackend::default()
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave State half-updated in a
        // way that breaks invariants (every update is a single map operation),
        // so a poisoned mutex is still usable.
        match self.state.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn lock_queues(&self) -> MutexGuard<'_, fair::Queues> {
        // Every update leaves the queues consistent, as for `lock_state`.
        match self.queues.lock() {
            Ok(q) => q,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn lock_semaphores(&self) -> MutexGuard<'_, semaphore::Semaphores> {
        // Every update is a single map operation, as for `lock_state`.
        match self.semaphores.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn lock_elections(&self) -> MutexGuard<'_, election::Elections> {
        match self.elections.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn lock_rw(&self) -> MutexGuard<'_, rw::RwLocks> {
        match self.rw_locks.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The state as of `now`: whatever expired by then is gone.
    fn state_at(&self, now: Instant) -> MutexGuard<'_, State> {
        let mut s = self.lock_state();
        s.purge(now);
        s
    }

    /// Entries this backend keeps for keys (locks, values, waiters, and the
    /// expiry index of locks and values): diagnostics, and the proof that
    /// memory follows the keys in use.
    pub fn tracked_keys(&self) -> usize {
        let s = self.state_at(Instant::now());
        s.locks.len()
            + s.values.len()
            + s.waiters.len()
            + s.lock_expiries.len()
            + s.value_expiries.len()
            + self.lock_queues().len()
    }

    /// Remaining TTL of a held lock (tests and diagnostics).
    pub fn lock_ttl(&self, key: &str) -> Option<Duration> {
        let now = Instant::now();
        let s = self.state_at(now);
        s.locks.get(key).map(|l| l.expires_at - now)
    }
}

/// A waiter's interest in a key's release notification; the last one to go
/// removes the key's entry, so keys waited for once leave nothing behind.
struct Waiting<'a> {
    backend: &'a MemoryBackend,
    key: &'a str,
    notify: Arc<Notify>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut s = self.backend.lock_state();
        // Only the map's reference and ours left: nobody else waits.
        if s.waiters
            .get(self.key)
            .is_some_and(|n| Arc::ptr_eq(n, &self.notify) && Arc::strong_count(n) == 2)
        {
            s.waiters.remove(self.key);
        }
    }
}

/// Give memory back once a map is mostly empty (a burst of keys has gone);
/// the 4× margin keeps this amortized O(1) per removal.
fn shrink<K: std::hash::Hash + Eq, V, S: std::hash::BuildHasher>(map: &mut HashMap<K, V, S>) {
    if map.capacity() > 4 * map.len() + 64 {
        map.shrink_to(2 * map.len());
    }
}

fn expires(expiry: Expiry, now: Instant, current: Option<Instant>) -> Option<Instant> {
    match expiry {
        Expiry::After(ttl) => Some(now + ttl),
        Expiry::Persist => None,
        _ => current,
    }
}

impl InstantLockBackend for MemoryBackend {
    fn try_acquire_now(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.try_acquire_at(key, token, ttl, Instant::now())
    }

    fn release_now(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.release_at(key, token, Instant::now())
    }

    /// Answered as of `now` (the caller's reading, taken before the call):
    /// the lock expires at `now + ttl`, and what expired by `now` is freed.
    fn try_acquire_at(&self, key: &str, token: &LockToken, ttl: Duration, now: Instant) -> Result<AcquireOutcome> {
        validate_key(key)?;
        validate_ttl(ttl)?;
        let mut s = self.state_at(now);
        match s.try_insert_lock(key, *token, now + ttl) {
            Ok(fence) => Ok(AcquireOutcome::Acquired(
                Lease::new().with_fencing_token(Some(FencingToken(fence))),
            )),
            Err(expires_at) => Ok(AcquireOutcome::Held {
                retry_after: Some(expires_at.saturating_duration_since(now)),
            }),
        }
    }

    /// Answered as of `now`: a lock that expired by then is gone.
    fn release_at(&self, key: &str, token: &LockToken, now: Instant) -> Result<ReleaseOutcome> {
        validate_key(key)?;
        let mut s = self.state_at(now);
        // One lookup: taken out, and put back if another token holds it.
        match s.locks.remove_entry(key) {
            None => Ok(ReleaseOutcome::Missing),
            Some((key, held)) if held.token != *token => {
                s.locks.insert(key, held);
                Ok(ReleaseOutcome::HeldByOther)
            }
            Some((key, held)) => {
                s.lock_expiries.remove(held.expires_at, held.fence);
                s.notify_release(&key);
                Ok(ReleaseOutcome::Released)
            }
        }
    }
}

#[async_trait]
impl LockBackend for MemoryBackend {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.try_acquire_now(key, token, ttl)
    }

    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.release_now(key, token)
    }

    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        validate_key(key)?;
        validate_ttl(ttl)?;
        let now = Instant::now();
        Ok(self.state_at(now).renew(key, token, ttl, now))
    }

    async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        let now = Instant::now();
        let mut s = self.state_at(now);
        items
            .iter()
            .map(|(key, token)| {
                validate_key(key)?;
                validate_ttl(ttl)?;
                Ok(s.renew(key, token, ttl, now))
            })
            .collect()
    }

    async fn wait_for_release(&self, key: &str, max_wait: Duration) {
        let notify = {
            let mut s = self.lock_state();
            s.waiters.entry(key.to_owned()).or_default().clone()
        };
        // Also on cancellation: the entry goes with the last waiter.
        let waiting = Waiting {
            backend: self,
            key,
            notify,
        };
        let _ = tokio::time::timeout(max_wait, waiting.notify.notified()).await;
    }

    async fn try_acquire_fair(
        &self,
        key: &str,
        token: &LockToken,
        ttl: Duration,
        waiter: &FairWaiter,
    ) -> Result<AcquireOutcome> {
        validate_key(key)?;
        validate_ttl(ttl)?;
        let now = Instant::now();
        let mut s = self.state_at(now);
        Ok(self.lock_queues().attempt(&mut s, key, token, ttl, waiter, now))
    }

    /// Waits for a release of `key` unless `waiter` may take it already:
    /// the check follows the registration, so no release goes unheard.
    async fn wait_fair(&self, key: &str, waiter: &FairWaiter, max_wait: Duration) {
        let notify = self.lock_state().waiters.entry(key.to_owned()).or_default().clone();
        let waiting = Waiting {
            backend: self,
            key,
            notify,
        };
        let notified = waiting.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let now = Instant::now();
        let free = !self.state_at(now).locks.contains_key(key);
        if free && self.lock_queues().may_take(key, &waiter.id, now) {
            return;
        }
        let _ = tokio::time::timeout(max_wait, notified).await;
    }

    async fn leave_queue(&self, key: &str, waiter: &FairWaiter) -> Result<()> {
        validate_key(key)?;
        let mut s = self.state_at(Instant::now());
        if self.lock_queues().leave(key, &waiter.id) && !s.locks.contains_key(key) {
            // The next waiter heads a free key now.
            s.notify_release(key);
        }
        Ok(())
    }

    async fn inspect(&self, key: &str) -> Result<lock_core::LockInfo> {
        validate_key(key)?;
        let now = Instant::now();
        let s = self.lock_state();
        Ok(match s.locks.get(key).filter(|l| l.expires_at > now) {
            Some(l) => {
                lock_core::LockInfo::held(Some(l.expires_at - now)).with_fencing_token(Some(FencingToken(l.fence)))
            }
            None => lock_core::LockInfo::free(),
        })
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new("memory");
        caps.fair_queue = true;
        caps.fencing_tokens = true;
        caps.native_compare_and_delete = true;
        caps.release_notifications = true;
        caps.semaphores = true;
        caps.multi_key_locks = true;
        caps.rw_locks = true;
        caps.leader_election = true;
        caps
    }

    fn instant(&self) -> Option<&dyn InstantLockBackend> {
        Some(self)
    }
}

#[async_trait]
impl VersionedStore for MemoryBackend {
    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        validate_key(key)?;
        let s = self.state_at(Instant::now());
        Ok(s.values.get(key).map(|e| Versioned {
            value: e.value.clone(),
            version: e.version,
        }))
    }

    async fn create(&self, key: &str, value: &[u8], expiry: Expiry) -> Result<CreateOutcome> {
        validate_key(key)?;
        expiry.validate()?;
        let now = Instant::now();
        let mut s = self.state_at(now);
        if s.values.contains_key(key) {
            return Ok(CreateOutcome::Exists);
        }
        let version = s.next_version();
        s.insert_value(
            key,
            Entry {
                value: value.to_vec(),
                version,
                expires_at: expires(expiry, now, None),
            },
        );
        Ok(CreateOutcome::Created { version })
    }

    async fn compare_and_set(&self, key: &str, expected: u64, value: &[u8], expiry: Expiry) -> Result<CasOutcome> {
        validate_key(key)?;
        expiry.validate()?;
        let now = Instant::now();
        let mut s = self.state_at(now);
        let current = match s.values.get(key) {
            None => return Ok(CasOutcome::Missing),
            Some(e) if e.version != expected => {
                return Ok(CasOutcome::Conflict(Versioned {
                    value: e.value.clone(),
                    version: e.version,
                }));
            }
            Some(e) => e.expires_at,
        };
        let version = s.next_version();
        s.insert_value(
            key,
            Entry {
                value: value.to_vec(),
                version,
                expires_at: expires(expiry, now, current),
            },
        );
        Ok(CasOutcome::Written { version })
    }

    async fn delete(&self, key: &str, expected: u64) -> Result<DeleteOutcome> {
        validate_key(key)?;
        let mut s = self.state_at(Instant::now());
        match s.values.get(key) {
            None => Ok(DeleteOutcome::Missing),
            Some(e) if e.version != expected => Ok(DeleteOutcome::Conflict {
                current_version: e.version,
            }),
            Some(_) => {
                s.remove_value(key);
                Ok(DeleteOutcome::Deleted)
            }
        }
    }

    fn name(&self) -> &str {
        "memory"
    }
}
