//! Multi-key lock: all-or-nothing over a set of keys.
//!
//! The keys are the mutex's own keys (same storage, same token format), so a
//! multi-key lock over `{a, b}` excludes a plain [`LockManager::lock`] of `a`
//! on the same backend, and the other way round. The backend checks and
//! takes every key in one atomic step, so a caller never holds some keys
//! while waiting for others: two callers locking overlapping sets cannot
//! deadlock. Keys are deduplicated and sorted, so the set, not the order the
//! caller wrote, names the lock. On a cluster all keys must share one hash
//! slot (give them a common hash tag, e.g. `{acct}:1`, `{acct}:2`), or the
//! backend answers [`Error::InvalidArgument`].
//!
//! The [`MultiLockManager`] runs each acquisition through a [`LockManager`]
//! (an adapter presents the key set as one lock key), so a [`MultiLockGuard`]
//! has the mutex's lifecycle: renewal of all keys at once, `lost()` at the
//! local deadline or when any key is found lost, release on drop, local FIFO
//! waiters per key set.
//!
//! **Fencing:** every grant carries one fencing token, on every backend
//! (whatever the mutex's `fencing` setting), that is above every earlier
//! token of *each* of its keys, whether a plain lock's or another set's:
//! the backend draws it from the keys' own fence counters (the mutex's) and
//! sets each of them to it. Hand [`LeaseHandle::fencing_token`] with every
//! write to each resource the keys protect; a resource that keeps the
//! highest token it has seen per key refuses the write of a holder that
//! stalled past its deadline while another took one of its keys.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::guard::{KindGuard, adapter_capabilities, kind_locks};
use crate::backend::{AcquireOutcome, Capabilities, LockBackend, ReleaseOutcome, RenewOutcome};
use crate::error::{Error, Result};
use crate::guard::LeaseHandle;
use crate::manager::LockManager;
use crate::options::LockOptions;
use crate::token::LockToken;
use crate::validate::validate_key;

/// Primitive, owner-checked operations over a set of keys (sorted, no
/// duplicates, at most [`MultiLockManager::MAX_KEYS`]): one round trip each.
///
/// # Cancel safety
///
/// As [`LockBackend`]: dropping a call's future leaves its outcome unknown
/// (a write applied whole or not at all) and must leave the backend usable.
#[async_trait]
pub trait MultiLockBackend: LockBackend {
    /// Take every key for `token` if none is held by another token (keys
    /// already ours are refreshed: a re-sent request is harmless); else take
    /// none and answer `Held` with the blocking key's remaining TTL.
    async fn try_acquire_all(&self, keys: &[&str], token: &LockToken, ttl: Duration) -> Result<AcquireOutcome>;

    /// Delete each key `token` still holds. `Released` when all were ours;
    /// else `HeldByOther` if any is held by another token, else `Missing`.
    async fn release_all(&self, keys: &[&str], token: &LockToken) -> Result<ReleaseOutcome>;

    /// Reset every key's TTL if `token` holds them all; else touch none and
    /// answer `HeldByOther` or `Missing`.
    async fn renew_all(&self, keys: &[&str], token: &LockToken, ttl: Duration) -> Result<RenewOutcome>;
}

/// Check, deduplicate and sort `keys`.
///
/// # Errors
/// [`Error::InvalidArgument`] for no keys, more than [`MultiLockManager::MAX_KEYS`], or an
/// invalid key.
pub(crate) fn key_set<S: AsRef<str>>(keys: &[S]) -> Result<Vec<String>> {
    let mut set: Vec<String> = Vec::with_capacity(keys.len());
    for key in keys {
        validate_key(key.as_ref())?;
        set.push(key.as_ref().to_owned());
    }
    set.sort();
    set.dedup();
    if set.is_empty() {
        return Err(Error::invalid("a multi-key lock needs at least one key"));
    }
    if set.len() > MultiLockManager::MAX_KEYS {
        return Err(Error::invalid(format!(
            "a multi-key lock takes at most {} keys, got {}",
            MultiLockManager::MAX_KEYS,
            set.len()
        )));
    }
    Ok(set)
}

/// The set as one lock key: each key length-prefixed (`3:abc1:d`), so any
/// bytes round-trip.
fn encode(keys: &[String]) -> String {
    let mut out = String::with_capacity(keys.iter().map(|k| k.len() + 6).sum());
    for key in keys {
        out.push_str(&key.len().to_string());
        out.push(':');
        out.push_str(key);
    }
    out
}

fn decode(encoded: &str) -> Result<Vec<&str>> {
    let bad = || Error::invalid(format!("not a multi-key lock name: {encoded:?}"));
    let mut keys = Vec::new();
    let mut rest = encoded;
    while !rest.is_empty() {
        let (len, tail) = rest.split_once(':').ok_or_else(bad)?;
        let len: usize = len.parse().map_err(|_| bad())?;
        let key = tail.get(..len).ok_or_else(bad)?;
        keys.push(key);
        rest = &tail[len..];
    }
    Ok(keys)
}

/// Presents a key set as one lock key to a [`LockManager`].
struct SetAsLock {
    backend: Arc<dyn MultiLockBackend>,
}

#[async_trait]
impl LockBackend for SetAsLock {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.backend.try_acquire_all(&decode(key)?, token, ttl).await
    }
    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.backend.release_all(&decode(key)?, token).await
    }
    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.backend.renew_all(&decode(key)?, token, ttl).await
    }
    fn capabilities(&self) -> Capabilities {
        adapter_capabilities(self.backend.capabilities(), true)
    }
}

/// Hands out [`MultiLockGuard`]s over one backend. Cheap to clone.
///
/// ```
/// # async fn demo(backend: impl lock_core::raw::MultiLockBackend) -> lock_core::Result<()> {
/// use lock_core::MultiLockManager;
/// let locks = MultiLockManager::new(backend)?;
/// // Both accounts or neither; the order written does not matter.
/// let guard = locks.lock(&["{acct}:7", "{acct}:3"]).await?;
/// // ... move money between the two accounts ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MultiLockManager {
    locks: LockManager,
}

impl MultiLockManager {
    /// Most keys in one multi-key lock (one script holds the server while
    /// it checks them all).
    pub const MAX_KEYS: usize = 64;

    /// A manager with the default [`LockOptions`].
    ///
    /// # Errors
    /// [`Error::Unsupported`] when [`Capabilities::multi_key_locks`] is false;
    /// [`Error::InvalidArgument`] as [`LockManager::new`].
    pub fn new(backend: impl MultiLockBackend) -> Result<Self> {
        Self::with_options(backend, LockOptions::default())
    }

    /// A manager with custom options (validated as for [`LockManager`]).
    ///
    /// # Errors
    /// As [`MultiLockManager::new`], and [`Error::InvalidArgument`] for bad
    /// options.
    pub fn with_options(backend: impl MultiLockBackend, options: LockOptions) -> Result<Self> {
        Self::from_arc(Arc::new(backend), options)
    }

    /// A manager over a shared backend handle (the same `Arc` can back a
    /// [`LockManager`] and every other kind's manager).
    ///
    /// # Errors
    /// As [`MultiLockManager::with_options`].
    pub fn from_arc(backend: Arc<dyn MultiLockBackend>, options: LockOptions) -> Result<Self> {
        let caps = backend.capabilities();
        let adapter = SetAsLock { backend };
        Ok(MultiLockManager {
            locks: kind_locks(caps, |c| c.multi_key_locks, "multi-key locks", adapter, options)?,
        })
    }

    /// The options in force.
    pub fn options(&self) -> &LockOptions {
        self.locks.options()
    }

    /// Take every key of `keys`, waiting up to the acquire timeout.
    ///
    /// # Errors
    /// [`Error::Timeout`] when some key stayed held; [`Error::InvalidArgument`]
    /// for a bad key set (or keys in several cluster slots); the last backend
    /// error when it kept failing.
    ///
    /// # Cancel safety
    /// Dropping the future releases whatever it may have taken (owner-checked,
    /// in the background).
    pub async fn lock<S: AsRef<str>>(&self, keys: &[S]) -> Result<MultiLockGuard> {
        self.lock_opts(keys, self.locks.options()).await
    }

    /// [`MultiLockManager::lock`] with per-call options.
    ///
    /// # Errors
    /// As [`MultiLockManager::lock`].
    ///
    /// # Cancel safety
    /// As [`MultiLockManager::lock`].
    pub async fn lock_opts<S: AsRef<str>>(&self, keys: &[S], options: &LockOptions) -> Result<MultiLockGuard> {
        let keys = key_set(keys)?;
        let guard = self.locks.lock_checked_name(&encode(&keys), options, true).await?;
        match guard {
            Some(guard) => Ok(KindGuard::new(guard, KeySet(keys))),
            None => Err(Error::Timeout {
                key: format!("{} keys", keys.len()),
                waited: options.acquire_timeout,
            }),
        }
    }

    /// One attempt, no waiting: `Ok(None)` when some key is held.
    ///
    /// # Errors
    /// As [`MultiLockManager::lock`], without the timeout.
    ///
    /// # Cancel safety
    /// As [`MultiLockManager::lock`].
    pub async fn try_lock<S: AsRef<str>>(&self, keys: &[S]) -> Result<Option<MultiLockGuard>> {
        self.try_lock_opts(keys, self.locks.options()).await
    }

    /// [`MultiLockManager::try_lock`] with per-call options.
    ///
    /// # Errors
    /// As [`MultiLockManager::try_lock`].
    ///
    /// # Cancel safety
    /// As [`MultiLockManager::lock`].
    pub async fn try_lock_opts<S: AsRef<str>>(
        &self,
        keys: &[S],
        options: &LockOptions,
    ) -> Result<Option<MultiLockGuard>> {
        let keys = key_set(keys)?;
        let guard = self.locks.lock_checked_name(&encode(&keys), options, false).await?;
        Ok(guard.map(|guard| KindGuard::new(guard, KeySet(keys))))
    }

    /// Run `body` while holding every key; on loss the body is dropped at its
    /// next await point and [`Error::Lost`] returned.
    ///
    /// # Errors
    /// As [`MultiLockManager::lock`], plus [`Error::Lost`].
    ///
    /// # Cancel safety
    /// Dropping the future drops the guard, which releases in the background.
    pub async fn with_locks<S, F, Fut, T>(&self, keys: &[S], body: F) -> Result<T>
    where
        S: AsRef<str>,
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        self.with_locks_opts(keys, self.locks.options(), body).await
    }

    /// [`MultiLockManager::with_locks`] with per-call options.
    ///
    /// # Errors
    /// As [`MultiLockManager::with_locks`].
    ///
    /// # Cancel safety
    /// As [`MultiLockManager::with_locks`].
    pub async fn with_locks_opts<S, F, Fut, T>(&self, keys: &[S], options: &LockOptions, body: F) -> Result<T>
    where
        S: AsRef<str>,
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.lock_opts(keys, options).await?;
        let what = guard.keys().join(",");
        guard.run_while_held(&what, body).await
    }
}

/// What a [`MultiLockGuard`] holds: its keys, sorted.
#[derive(Debug)]
pub struct KeySet(Vec<String>);

/// A held multi-key lock (the shared [`KindGuard`], holding its
/// [`KeySet`]). Owned and `'static`; dropping it releases every key in the
/// background.
pub type MultiLockGuard = KindGuard<KeySet>;

impl KindGuard<KeySet> {
    /// The locked keys, sorted.
    pub fn keys(&self) -> &[String] {
        &self.kind().0
    }
}

#[async_trait]
impl<B: MultiLockBackend + ?Sized> MultiLockBackend for Arc<B> {
    async fn try_acquire_all(&self, keys: &[&str], token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        (**self).try_acquire_all(keys, token, ttl).await
    }
    async fn release_all(&self, keys: &[&str], token: &LockToken) -> Result<ReleaseOutcome> {
        (**self).release_all(keys, token).await
    }
    async fn renew_all(&self, keys: &[&str], token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        (**self).renew_all(keys, token, ttl).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_sets_round_trip_through_one_key() {
        let set = key_set(&["b", "a:1", "b", "{x}:3:4", "ü"]).expect("valid");
        assert_eq!(set, ["a:1", "b", "{x}:3:4", "ü"]);
        let encoded = encode(&set);
        assert_eq!(decode(&encoded).expect("decodes"), set);
        assert!(key_set::<&str>(&[]).is_err());
        assert!(key_set(&["a", ""]).is_err());
        assert!(decode("3:ab").is_err());
    }
}
