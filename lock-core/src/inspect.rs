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
/// ([`crate::LockManager::inspect`]).
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

    /// The local reading of `info`, asked for at `sent_at` and answered
    /// now, with a drift allowance of `drift_factor` on the remaining lease.
    pub(crate) fn new(info: LockInfo, sent_at: Instant, drift_factor: f64) -> Self {
        let received_at = Instant::now();
        let expires_by = match info.remaining {
            Some(left) if info.held => Some(received_at + left + crate::validate::clock_drift(left, drift_factor)),
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
