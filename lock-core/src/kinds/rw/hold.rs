//! The read-write guard: its hold, and the upgrade and downgrade that turn
//! one hold into another under the same token.

use super::{Op, RwMode, conversion_not_held, encode};
use crate::engine::{Call, Identity};
use crate::error::{Error, NotHeldReason, Result};
use crate::kinds::guard::KindGuard;
use crate::manager::LockManager;
use crate::options::LockOptions;

/// What an [`RwLockGuard`] knows of its hold: its [`RwMode`], and the
/// manager and options that took it (an upgrade or a downgrade runs there).
#[derive(Debug, Clone)]
pub struct RwHold {
    pub(super) mode: RwMode,
    pub(super) locks: LockManager,
    pub(super) options: LockOptions,
}

/// A held read, write or upgradeable read lock (the shared [`KindGuard`],
/// holding its [`RwHold`]). Owned and `'static`; dropping it releases in
/// the background.
pub type RwLockGuard = KindGuard<RwHold>;

impl KindGuard<RwHold> {
    /// The lock's name.
    pub fn name(&self) -> &str {
        self.lock_key().get(1..).unwrap_or_default()
    }

    /// Read, write or upgradeable read.
    pub fn mode(&self) -> RwMode {
        self.kind().mode
    }

    /// Turn this upgradeable read into the write: waits (up to the acquire
    /// timeout of the options it was taken with) until the other readers
    /// have left, refusing new readers meanwhile; no writer can get in
    /// before it (this holder is a reader all along). The write guard keeps
    /// this guard's token, with a fencing token of its own.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] on a guard that is not
    /// [`RwMode::Upgradeable`]; [`Error::NotHeld`] when the read was lost
    /// (before or during the wait); [`Error::Timeout`]; a backend error.
    /// On any error the upgradeable read is released as well.
    ///
    /// # Cancel safety
    /// Dropping the future releases the hold (in the background), whether
    /// it was still the read or already the write.
    pub async fn upgrade(self) -> Result<RwLockGuard> {
        self.convert(RwMode::Upgradeable, Op::Upgrade, RwMode::Write).await
    }

    /// Turn this write into the upgradeable read at once: plain readers may
    /// join from then on, no writer gets in between. The guard keeps its
    /// token; it carries no fencing token any more.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] on a guard that is not [`RwMode::Write`];
    /// [`Error::NotHeld`] when the write was lost; a backend error. On any
    /// error the write is released as well.
    ///
    /// # Cancel safety
    /// Dropping the future releases the hold (in the background).
    pub async fn downgrade(self) -> Result<RwLockGuard> {
        self.convert(RwMode::Write, Op::Downgrade, RwMode::Upgradeable).await
    }

    async fn convert(self, from: RwMode, op: Op, to: RwMode) -> Result<RwLockGuard> {
        let hold = self.kind().clone();
        if hold.mode != from {
            return Err(Error::invalid(format!(
                "only a {from:?} hold can become {to:?}; this one is {:?}",
                hold.mode
            )));
        }
        let name = self.name().to_owned();
        if self.is_lost() {
            return Err(Error::NotHeld {
                key: name,
                reason: NotHeldReason::Expired,
            });
        }
        // The old guard keeps renewing the token's hold while the new call
        // waits; once granted, the new guard renews and releases it.
        let wait = matches!(op, Op::Upgrade);
        let key = encode(op, &name);
        let call = Call {
            key: &key,
            options: &hold.options,
            wait,
            attempt: None,
            identity: Identity::Given(*self.token()),
            spread: false,
            key_checked: false,
        };
        let guard = match hold.locks.acquire_observed(&call).await? {
            Some(guard) => guard,
            None if wait => return Err(call.timed_out()),
            None => return Err(conversion_not_held(&name)),
        };
        self.into_guard().hand_over();
        Ok(KindGuard::new(guard, RwHold { mode: to, ..hold }))
    }
}
