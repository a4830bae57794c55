//! In-process backend of verrou: [`MemoryBackend`] implements both
//! [`LockBackend`] and [`VersionedStore`] with the same semantics as the
//! remote backends (the conformance suite in `lock-testkit` is the proof).
//!
//! TTLs run on `tokio::time::Instant`, so tests under
//! `#[tokio::test(start_paused = true)]` cover expiry in no wall time.
//! Waiters are woken on release. Fencing tokens strictly increase per key;
//! versions come from one store-wide counter, so they never restart (no ABA).
//!
//! Clones share state: hand a clone to each "client" in a test.

mod election;
mod multi;
mod rw;
mod semaphore;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::options::{validate_key, validate_ttl};
use lock_core::{
    AcquireOutcome, Capabilities, CasOutcome, CreateOutcome, DeleteOutcome, Expiry, FencingToken, Lease, LockBackend,
    LockToken, ReleaseOutcome, RenewOutcome, Result, Versioned, VersionedStore,
};
use tokio::sync::Notify;
use tokio::time::Instant;

/// The in-process backend. Cheap to clone; clones share state.
#[derive(Clone, Default)]
pub struct MemoryBackend {
    state: Arc<Mutex<State>>,
    semaphores: Arc<Mutex<semaphore::Semaphores>>,
    rw_locks: Arc<Mutex<rw::RwLocks>>,
    elections: Arc<Mutex<election::Elections>>,
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock_state();
        f.debug_struct("MemoryBackend")
            .field("locks", &s.locks.len())
            .field("values", &s.values.len())
            .finish()
    }
}

#[derive(Default)]
struct State {
    locks: HashMap<String, HeldLock>,
    /// Last fencing token per key; kept after release so tokens never repeat.
    fences: HashMap<String, u64>,
    /// Release notifications, one per key with waiters.
    waiters: HashMap<String, Arc<Notify>>,
    values: HashMap<String, Entry>,
    /// Store-wide version counter: versions never repeat for any key.
    version_seq: u64,
}

struct HeldLock {
    token: LockToken,
    expires_at: Instant,
}

struct Entry {
    value: Vec<u8>,
    version: u64,
    expires_at: Option<Instant>,
}

impl State {
    fn live_lock(&mut self, key: &str, now: Instant) -> Option<&HeldLock> {
        if self.locks.get(key).is_some_and(|l| l.expires_at <= now) {
            self.locks.remove(key);
        }
        self.locks.get(key)
    }

    fn live_value(&mut self, key: &str, now: Instant) -> Option<&mut Entry> {
        if self
            .values
            .get(key)
            .is_some_and(|e| e.expires_at.is_some_and(|t| t <= now))
        {
            self.values.remove(key);
        }
        self.values.get_mut(key)
    }

    fn renew(&mut self, key: &str, token: &LockToken, ttl: Duration, now: Instant) -> RenewOutcome {
        if self.live_lock(key, now).is_none() {
            return RenewOutcome::Missing;
        }
        match self.locks.get_mut(key) {
            Some(held) if held.token == *token => {
                held.expires_at = now + ttl;
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

    /// Remaining TTL of a held lock (tests and diagnostics).
    pub fn lock_ttl(&self, key: &str) -> Option<Duration> {
        let now = Instant::now();
        let mut s = self.lock_state();
        s.live_lock(key, now).map(|l| l.expires_at - now)
    }
}

fn expires(expiry: Expiry, now: Instant, current: Option<Instant>) -> Option<Instant> {
    match expiry {
        Expiry::After(ttl) => Some(now + ttl),
        Expiry::Persist => None,
        _ => current,
    }
}

#[async_trait]
impl LockBackend for MemoryBackend {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        validate_key(key)?;
        validate_ttl(ttl)?;
        let now = Instant::now();
        let mut s = self.lock_state();
        if let Some(held) = s.live_lock(key, now) {
            return Ok(AcquireOutcome::Held {
                retry_after: Some(held.expires_at - now),
            });
        }
        s.locks.insert(
            key.to_owned(),
            HeldLock {
                token: *token,
                expires_at: now + ttl,
            },
        );
        let fence = s.fences.entry(key.to_owned()).or_insert(0);
        *fence += 1;
        let fence = *fence;
        Ok(AcquireOutcome::Acquired(
            Lease::new().with_fencing_token(Some(FencingToken(fence))),
        ))
    }

    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        validate_key(key)?;
        let now = Instant::now();
        let mut s = self.lock_state();
        match s.live_lock(key, now) {
            None => Ok(ReleaseOutcome::Missing),
            Some(held) if held.token != *token => Ok(ReleaseOutcome::HeldByOther),
            Some(_) => {
                s.locks.remove(key);
                s.notify_release(key);
                Ok(ReleaseOutcome::Released)
            }
        }
    }

    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        validate_key(key)?;
        validate_ttl(ttl)?;
        Ok(self.lock_state().renew(key, token, ttl, Instant::now()))
    }

    async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        let now = Instant::now();
        let mut s = self.lock_state();
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
        let _ = tokio::time::timeout(max_wait, notify.notified()).await;
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new("memory");
        caps.fencing_tokens = true;
        caps.native_compare_and_delete = true;
        caps.release_notifications = true;
        caps.semaphores = true;
        caps.multi_key_locks = true;
        caps.rw_locks = true;
        caps.leader_election = true;
        caps
    }
}

#[async_trait]
impl VersionedStore for MemoryBackend {
    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        validate_key(key)?;
        let now = Instant::now();
        let mut s = self.lock_state();
        Ok(s.live_value(key, now).map(|e| Versioned {
            value: e.value.clone(),
            version: e.version,
        }))
    }

    async fn create(&self, key: &str, value: &[u8], expiry: Expiry) -> Result<CreateOutcome> {
        validate_key(key)?;
        expiry.validate()?;
        let now = Instant::now();
        let mut s = self.lock_state();
        if s.live_value(key, now).is_some() {
            return Ok(CreateOutcome::Exists);
        }
        let version = s.next_version();
        s.values.insert(
            key.to_owned(),
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
        let mut s = self.lock_state();
        let current = match s.live_value(key, now) {
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
        s.values.insert(
            key.to_owned(),
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
        let now = Instant::now();
        let mut s = self.lock_state();
        match s.live_value(key, now) {
            None => Ok(DeleteOutcome::Missing),
            Some(e) if e.version != expected => Ok(DeleteOutcome::Conflict {
                current_version: e.version,
            }),
            Some(_) => {
                s.values.remove(key);
                Ok(DeleteOutcome::Deleted)
            }
        }
    }

    fn store_name(&self) -> &str {
        "memory"
    }
}
