//! Looking at a lock without taking it: [`crate::LockBackend::inspect`]
//! answers what the server sees of a key (held or free, the holder's
//! remaining lease, its fencing token), and [`crate::LockManager::inspect`]
//! adds the bound on this process's clock that the answer supports.
//!
//! An inspection is a read: it never writes, never advances a fencing
//! counter, never joins or reorders a fair queue, and never makes a waiter
//! back off. It is a snapshot: the holder may release, renew or lose the
//! lock as soon as the reply leaves the server, so it reports, never
//! reserves (take the lock to act on it).

use std::time::Duration;

use tokio::time::Instant;

use crate::error::Result;
use crate::manager::LockManager;
use crate::token::FencingToken;

/// What a backend sees of a lock key ([`crate::LockBackend::inspect`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// Someone holds the key.
    pub held: bool,
    /// The holder's remaining lease as the server sees it, when held and
    /// the backend reports it (a server with no expiry on the key: `None`).
    pub remaining: Option<Duration>,
    /// The holder's fencing token, when held and the backend issues them
    /// (and still knows the holder's: a Redis-family backend with fencing
    /// off has none).
    pub fencing_token: Option<FencingToken>,
}

impl LockInfo {
    /// Nobody holds the key.
    pub fn free() -> Self {
        LockInfo::default()
    }

    /// Someone holds the key, with `remaining` of its lease left.
    pub fn held(remaining: Option<Duration>) -> Self {
        LockInfo {
            held: true,
            remaining,
            fencing_token: None,
        }
    }

    /// Attach the holder's fencing token.
    #[must_use]
    pub fn with_fencing_token(mut self, token: Option<FencingToken>) -> Self {
        self.fencing_token = token;
        self
    }
}

/// A [`LockInfo`] with what it means on this process's monotonic clock
/// ([`LockManager::inspect`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Inspection {
    /// What the server answered.
    pub info: LockInfo,
    /// When the request was sent.
    pub sent_at: Instant,
    /// When the reply arrived.
    pub received_at: Instant,
    /// The latest the observed lease can end unless its holder renews it:
    /// the reply's arrival plus the remaining lease plus the manager's
    /// drift allowance on it. A client that finds the key still held after
    /// this instant sees a renewal or another holder. `None` when free or
    /// when the backend reported no remaining lease.
    pub expires_by: Option<Instant>,
}

impl Inspection {
    /// Someone held the key.
    pub fn is_held(&self) -> bool {
        self.info.held
    }
}

impl LockManager {
    /// Look at `key` without taking it: held or free, the holder's
    /// remaining lease, its fencing token, and [`Inspection::expires_by`]
    /// on this process's clock. A read: no write, no fencing token drawn,
    /// no place taken in a fair queue.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Unsupported`] when the backend cannot look without
    /// taking the lock (with the reason); [`crate::Error::InvalidArgument`]
    /// for a bad key; the backend's error when the read failed.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read leaves nothing behind.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(locks: &lock_core::LockManager) -> lock_core::Result<()> {
    /// let seen = locks.inspect("nightly-report").await?;
    /// if seen.is_held() {
    ///     println!("held, fencing token {:?}, {:?} left", seen.info.fencing_token, seen.info.remaining);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, key: &str) -> Result<Inspection> {
        crate::validate::validate_key(key)?;
        let sent_at = Instant::now();
        let info = self.backend().inspect(key).await?;
        Ok(self.inspection(info, sent_at))
    }

    /// The local reading of a backend's answer sent at `sent_at`.
    pub(crate) fn inspection(&self, info: LockInfo, sent_at: Instant) -> Inspection {
        let received_at = Instant::now();
        let expires_by = match info.remaining {
            Some(left) if info.held => {
                Some(received_at + left + crate::validate::clock_drift(left, self.options().drift_factor))
            }
            _ => None,
        };
        Inspection {
            info,
            sent_at,
            received_at,
            expires_by,
        }
    }
}
