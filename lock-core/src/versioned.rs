//! Optimistic (versioned) updates: read a value with its version, write only
//! if the version is unchanged.

use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::options::Backoff;
pub use crate::value::Versioned;

/// TTL policy of a versioned write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Expiry {
    /// Keep the key's current TTL (none for a new key).
    #[default]
    Keep,
    /// Remove any TTL.
    Persist,
    /// Expire this long after the write.
    After(Duration),
}

impl Expiry {
    /// Check the TTL of `After` against [`crate::LockOptions::MIN_TTL`] / [`crate::LockOptions::MAX_TTL`].
    pub fn validate(self) -> Result<()> {
        if let Expiry::After(ttl) = self {
            crate::validate::validate_ttl(ttl)?;
        }
        Ok(())
    }
}

/// Settings of the optimistic-update loop ([`crate::VersionedStoreExt::update_opts`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct UpdateOptions {
    /// Give up with [`Error::Conflict`] after this many attempts.
    pub max_attempts: u32,
    /// Delay between conflicting attempts.
    pub backoff: Backoff,
    /// TTL policy of each write.
    pub expiry: Expiry,
}

impl Default for UpdateOptions {
    /// 64 attempts; backoff 0.1 ms doubling to 20 ms with full jitter; keep the TTL.
    fn default() -> Self {
        UpdateOptions {
            max_attempts: 64,
            backoff: Backoff {
                initial: Duration::from_micros(100),
                max: Duration::from_millis(20),
                factor: 2.0,
                min: Duration::ZERO,
            },
            expiry: Expiry::Keep,
        }
    }
}

impl UpdateOptions {
    /// Set the attempt bound.
    #[must_use]
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }

    /// Set the TTL policy.
    #[must_use]
    pub fn expiry(mut self, expiry: Expiry) -> Self {
        self.expiry = expiry;
        self
    }

    /// Set the backoff.
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }
}

/// Result of [`VersionedStore::create`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CreateOutcome {
    /// The key was absent and now holds the value at this version.
    Created {
        /// The new version.
        version: u64,
    },
    /// The key already exists; nothing was written.
    Exists,
}

/// Result of [`VersionedStore::compare_and_set`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CasOutcome {
    /// Written; the key is now at this version.
    Written {
        /// The new version.
        version: u64,
    },
    /// The version did not match; this is what the key holds now, so a retry
    /// needs no extra read.
    Conflict(Versioned),
    /// The key does not exist.
    Missing,
}

/// Result of [`VersionedStore::delete`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeleteOutcome {
    /// Deleted.
    Deleted,
    /// The version did not match; nothing was deleted.
    Conflict {
        /// The key's current version.
        current_version: u64,
    },
    /// The key does not exist.
    Missing,
}

/// A key-value store with per-key versions and compare-and-set.
///
/// Object safe: use it as `Arc<dyn VersionedStore>`.
///
/// # Errors
///
/// Every method fails with [`Error::InvalidArgument`] for a bad key, value
/// or expiry and [`Error::Backend`] for a transport or server failure
/// (`outcome_unknown` when a write may have been applied).
///
/// # Cancel safety
///
/// Dropping a write's future leaves its outcome unknown: applied whole or
/// not at all, never half. Re-read before relying on either.
#[async_trait]
pub trait VersionedStore: Send + Sync + 'static {
    /// Read the value and its version; `None` if the key is absent.
    async fn get(&self, key: &str) -> Result<Option<Versioned>>;

    /// Create the key if it is absent.
    async fn create(&self, key: &str, value: &[u8], expiry: Expiry) -> Result<CreateOutcome>;

    /// Write `value` only if the key is at version `expected`.
    async fn compare_and_set(&self, key: &str, expected: u64, value: &[u8], expiry: Expiry) -> Result<CasOutcome>;

    /// Delete the key only if it is at version `expected`.
    async fn delete(&self, key: &str, expected: u64) -> Result<DeleteOutcome>;

    /// Short backend name, used in errors and logs: the same name as the
    /// backend's [`Capabilities::name`](crate::Capabilities::name) when it
    /// implements [`LockBackend`](crate::LockBackend) too.
    fn name(&self) -> &str;
}

#[async_trait]
#[deny(clippy::missing_trait_methods)] // a wrapper forwards every method
impl<S: VersionedStore + ?Sized> VersionedStore for std::sync::Arc<S> {
    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        (**self).get(key).await
    }
    async fn create(&self, key: &str, value: &[u8], expiry: Expiry) -> Result<CreateOutcome> {
        (**self).create(key, value, expiry).await
    }
    async fn compare_and_set(&self, key: &str, expected: u64, value: &[u8], expiry: Expiry) -> Result<CasOutcome> {
        (**self).compare_and_set(key, expected, value, expiry).await
    }
    async fn delete(&self, key: &str, expected: u64) -> Result<DeleteOutcome> {
        (**self).delete(key, expected).await
    }
    fn name(&self) -> &str {
        (**self).name()
    }
}

/// Convenience built on the primitive [`VersionedStore`] operations.
#[async_trait]
pub trait VersionedStoreExt: VersionedStore {
    /// Read-modify-write with retries and the default [`UpdateOptions`]: `f`
    /// gets the current value (`None` if absent) and returns the new one, or
    /// `None` to stop without writing (like `AtomicU64::fetch_update`); the
    /// call then returns `Ok(None)`. On a conflict the value and version
    /// carried by the conflict reply are fed straight back into `f`: one round
    /// trip per retry, no re-read. [`VersionedStoreExt::update_opts`] takes
    /// per-call options.
    ///
    /// # Errors
    ///
    /// [`Error::Conflict`] after [`UpdateOptions::max_attempts`] conflicting
    /// attempts; [`Error::InvalidArgument`] for a bad key; the backend's error
    /// (an outcome-unknown one means the last write may have happened: re-read
    /// before retrying).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future between attempts writes nothing more; dropping it
    /// while a write is in flight leaves that write's outcome unknown (it is
    /// applied whole or not at all, never half).
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(store: impl lock_core::VersionedStore) -> lock_core::Result<()> {
    /// use lock_core::VersionedStoreExt;
    /// // Take a seat unless the room is full.
    /// let taken = store
    ///     .update("room:seats", |old| {
    ///         let seats = old.map_or(0, <[u8]>::len);
    ///         (seats < 10).then(|| [old.unwrap_or_default(), b"x"].concat())
    ///     })
    ///     .await?;
    /// match taken {
    ///     Some(v) => println!("seated; version {}", v.version),
    ///     None => println!("full"),
    /// }
    /// # Ok(()) }
    /// ```
    async fn update<F>(&self, key: &str, f: F) -> Result<Option<Versioned>>
    where
        F: FnMut(Option<&[u8]>) -> Option<Vec<u8>> + Send,
    {
        self.update_opts(key, &UpdateOptions::default(), f).await
    }

    /// [`VersionedStoreExt::update`] with per-call options (attempt bound,
    /// backoff, TTL policy of each write).
    ///
    /// # Errors
    ///
    /// As [`VersionedStoreExt::update`], with the bound `opts.max_attempts`;
    /// also [`Error::InvalidArgument`] for a bad expiry or `max_attempts` 0.
    ///
    /// # Cancel safety
    ///
    /// As [`VersionedStoreExt::update`].
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(store: impl lock_core::VersionedStore) -> lock_core::Result<()> {
    /// use std::time::Duration;
    /// use lock_core::{Expiry, UpdateOptions, VersionedStoreExt};
    /// let opts = UpdateOptions::default()
    ///     .max_attempts(16)
    ///     .expiry(Expiry::After(Duration::from_secs(60)));
    /// let v = store
    ///     .update_opts("counter", &opts, |old| {
    ///         let n: u64 = old.and_then(|b| std::str::from_utf8(b).ok()?.parse().ok()).unwrap_or(0);
    ///         Some((n + 1).to_string().into_bytes())
    ///     })
    ///     .await?;
    /// println!("now at version {:?}", v.map(|v| v.version));
    /// # Ok(()) }
    /// ```
    async fn update_opts<F>(&self, key: &str, opts: &UpdateOptions, f: F) -> Result<Option<Versioned>>
    where
        F: FnMut(Option<&[u8]>) -> Option<Vec<u8>> + Send,
    {
        crate::validate::validate_key(key)?;
        let current = self.get(key).await?;
        update_loop(self, key, current, opts, f).await
    }

    /// [`VersionedStoreExt::update`] starting from a value the caller
    /// already holds (e.g. the result of its previous update) instead of
    /// reading first: when nobody else wrote meanwhile, the update costs
    /// exactly one write (a compare-and-set, or a create from `None`); when
    /// someone did, the conflict reply carries the fresh value and `f` runs
    /// again on it. `current: None` means "believed absent". The closure and
    /// the result are [`VersionedStoreExt::update`]'s; only the start
    /// differs. [`VersionedStoreExt::update_from_opts`] takes per-call
    /// options.
    ///
    /// # Errors
    ///
    /// As [`VersionedStoreExt::update`].
    ///
    /// # Cancel safety
    ///
    /// As [`VersionedStoreExt::update`].
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(store: impl lock_core::VersionedStore) -> lock_core::Result<()> {
    /// use lock_core::VersionedStoreExt;
    /// let incr = |old: Option<&[u8]>| {
    ///     let n: u64 = old.and_then(|b| std::str::from_utf8(b).ok()?.parse().ok()).unwrap_or(0);
    ///     Some((n + 1).to_string().into_bytes())
    /// };
    /// let mut last = store.update("hits", incr).await?;
    /// for _ in 0..3 {
    ///     // No read: start from what the previous update wrote.
    ///     last = store.update_from("hits", last, incr).await?;
    /// }
    /// # Ok(()) }
    /// ```
    async fn update_from<F>(&self, key: &str, current: Option<Versioned>, f: F) -> Result<Option<Versioned>>
    where
        F: FnMut(Option<&[u8]>) -> Option<Vec<u8>> + Send,
    {
        self.update_from_opts(key, current, &UpdateOptions::default(), f).await
    }

    /// [`VersionedStoreExt::update_from`] with per-call options, as
    /// [`VersionedStoreExt::update_opts`].
    ///
    /// # Errors
    ///
    /// As [`VersionedStoreExt::update_opts`].
    ///
    /// # Cancel safety
    ///
    /// As [`VersionedStoreExt::update`].
    async fn update_from_opts<F>(
        &self,
        key: &str,
        current: Option<Versioned>,
        opts: &UpdateOptions,
        f: F,
    ) -> Result<Option<Versioned>>
    where
        F: FnMut(Option<&[u8]>) -> Option<Vec<u8>> + Send,
    {
        update_loop(self, key, current, opts, f).await
    }
}

/// The optimistic-update loop; `f` returning `None` stops it without writing.
async fn update_loop<S, F>(
    store: &S,
    key: &str,
    mut current: Option<Versioned>,
    opts: &UpdateOptions,
    mut f: F,
) -> Result<Option<Versioned>>
where
    S: VersionedStore + ?Sized,
    F: FnMut(Option<&[u8]>) -> Option<Vec<u8>> + Send,
{
    crate::validate::validate_key(key)?;
    opts.expiry.validate()?;
    if opts.max_attempts == 0 {
        return Err(Error::invalid("max_attempts must be at least 1"));
    }
    let mut last_seen = None;
    for attempt in 0..opts.max_attempts {
        if attempt > 0 {
            let delay = opts.backoff.delay(attempt - 1);
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
        }
        match current.take() {
            None => {
                let Some(value) = f(None) else { return Ok(None) };
                match store.create(key, &value, opts.expiry).await? {
                    CreateOutcome::Created { version } => return Ok(Some(Versioned { value, version })),
                    CreateOutcome::Exists => current = store.get(key).await?,
                }
            }
            Some(seen) => {
                let Some(value) = f(Some(&seen.value)) else {
                    return Ok(None);
                };
                match store.compare_and_set(key, seen.version, &value, opts.expiry).await? {
                    CasOutcome::Written { version } => return Ok(Some(Versioned { value, version })),
                    CasOutcome::Conflict(now) => {
                        last_seen = Some(now.clone());
                        current = Some(now);
                    }
                    CasOutcome::Missing => current = None,
                }
            }
        }
    }
    Err(Error::Conflict {
        key: key.to_owned(),
        attempts: opts.max_attempts,
        current: last_seen,
    })
}

impl<S: VersionedStore + ?Sized> VersionedStoreExt for S {}
