//! Read-write lock: many readers or one writer, each a leased holder.
//!
//! **Policy: writer-preferring.** A writer that finds the lock busy leaves
//! an *intent* (its token, with its TTL); while a live intent of another
//! token exists, new readers are refused, so a stream of readers cannot
//! starve a waiting writer. Readers already inside keep renewing until they
//! leave; the writer gets the lock once the last one is gone. Any writer may
//! take a free lock (an intent only holds readers back) and taking it clears
//! the intent; a writer still waiting sets it again at its next attempt.
//! `try_lock` leaves no intent; the intent of a writer that gave up lapses
//! within one TTL (the engine releases it at once when the writer's wait
//! ends). Readers' and the writer's deadlines
//! are server time.
//!
//! The [`RwLockManager`] runs each holder through a [`LockManager`] (an
//! adapter presents "reader of `name`" / "writer of `name`" as lock keys), so
//! an [`RwLockGuard`] has the mutex's lifecycle: renewal, `lost()` at the
//! local deadline, release on drop, local FIFO waiters (readers and writers
//! of one manager queue in separate lines).
//!
//! **Liveness: a waiting writer is never starved by readers.** The engine
//! keeps one token for a writer's whole wait, so each of its retries (at
//! least every third of the TTL) refreshes its intent; new readers stay
//! refused, and the writer gets the lock once the readers inside leave:
//! its wait is bounded by the longest remaining hold of the readers inside
//! (plus the writers ahead of it) and a third of the TTL. A writer that
//! gives up or is cancelled drops its intent at once (the engine releases
//! its token). Refused readers retry at spread instants, not all at the
//! intent's expiry.
//!
//! **Upgradeable reads.** [`RwLockManager::upgradeable_read`] takes a read
//! that can become the write with no other writer in between (read, decide,
//! then write). At most one upgradeable holder per name at a time (a second
//! one is refused, as a reader is by a writer); plain readers share the lock
//! with it; writers are excluded, as by any reader. [`RwLockGuard::upgrade`]
//! waits until the other readers have left, then turns the hold into the
//! write (with a fencing token). **While an upgrade waits, new readers are
//! refused** (plain and upgradeable): it leaves a waiting writer's intent,
//! so a stream of readers cannot starve it (writer preference, as for a
//! waiting writer). With one upgradeable holder at a time, two upgrades
//! never wait for each other. [`RwLockGuard::downgrade`] turns a write
//! (upgraded or not) back into the upgradeable read at once, nobody let in
//! between. Both keep the holder's token and consume the guard: when they
//! fail (a timeout, a lost lease) the hold is released.
//!
//! **Fencing:** every writer grant carries a fencing token, strictly
//! increasing per name (on every backend, whatever the mutex's `fencing`
//! setting). Hand [`LeaseHandle::fencing_token`] to the protected resource
//! with every write; it refuses a write whose token is lower than the
//! highest it has seen (a stalled writer's). Readers carry none.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::guard::{KindGuard, adapter_capabilities, kind_locks};
use crate::backend::{AcquireOutcome, Capabilities, LockBackend, ReleaseOutcome, RenewOutcome};
use crate::engine::Identity;
use crate::error::{Error, NotHeldReason, Result};
use crate::guard::LeaseHandle;
use crate::manager::LockManager;
use crate::options::LockOptions;
use crate::token::LockToken;
use crate::validate::validate_key;

mod hold;
pub use hold::{RwHold, RwLockGuard};

/// Read, write, or a read that can become the write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RwMode {
    /// Shared with other readers.
    Read,
    /// Exclusive.
    Write,
    /// A read shared with plain readers, at most one per name at a time,
    /// that can be upgraded to the write (see the module docs).
    Upgradeable,
}

/// Primitive, owner-checked read-write lock operations: one round trip each.
///
/// # Cancel safety
///
/// As [`LockBackend`]: dropping a call's future leaves its outcome unknown
/// (a write applied whole or not at all) and must leave the backend usable.
#[async_trait]
pub trait RwLockBackend: LockBackend {
    /// Take `name` in `mode` for `token` if the policy allows (see the module
    /// docs). A refused writer that is `waiting` (it will try again) leaves
    /// its intent; a granted writer clears any intent. An upgradeable reader
    /// is a reader that is also refused while another token's upgradeable
    /// read is live (`waiting` means nothing to readers). A repeated call
    /// for a holder refreshes its lease.
    async fn try_acquire_rw(
        &self,
        name: &str,
        mode: RwMode,
        waiting: bool,
        token: &LockToken,
        ttl: Duration,
    ) -> Result<AcquireOutcome>;

    /// Drop `token`'s hold (either mode) and its intent, if any.
    /// `Released` when it held; `Missing` otherwise.
    async fn release_rw(&self, name: &str, token: &LockToken) -> Result<ReleaseOutcome>;

    /// Reset `token`'s lease (either mode) if still live; else `Missing`.
    async fn renew_rw(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome>;

    /// Turn `token`'s upgradeable read of `name` into the write (a lease of
    /// `ttl`, with a fencing token above every earlier writer's) when no
    /// other reader is inside; else `Held`, leaving `token`'s intent as a
    /// refused waiting writer does (new readers are refused while it is
    /// live). A repeated call by the writer it became refreshes its lease.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when `token` holds neither the upgradeable read nor
    /// the write of `name` (expired or released): nothing is written.
    async fn upgrade_rw(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome>;

    /// Turn `token`'s write of `name` into the upgradeable read (a lease of
    /// `ttl`, no fencing token) at once: nobody gets in between. A repeated
    /// call by the upgradeable holder it became refreshes its lease.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when `token` holds neither the write nor the
    /// upgradeable read of `name`: nothing is written.
    async fn downgrade_rw(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome>;
    /// Readers and writer of `name`, without taking it: a read that never
    /// writes, never draws a fencing token and never touches an intent.
    /// The default answers [`Error::Unsupported`].
    async fn inspect_rw(&self, name: &str) -> Result<RwInfo> {
        let _ = name;
        Err(Error::unsupported(
            self.capabilities().name,
            "inspecting a read-write lock without taking it",
        ))
    }
}

/// What a backend sees of a read-write lock ([`RwLockBackend::inspect_rw`]),
/// counting live holders only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwInfo {
    /// Readers inside.
    pub readers: u32,
    /// A writer holds the lock.
    pub writer: bool,
    /// The writer's fencing token, when a writer holds it.
    pub writer_fencing_token: Option<crate::FencingToken>,
    /// A waiting writer's intent holds new readers back.
    pub writer_waiting: bool,
}

impl RwInfo {
    /// `readers` readers and no writer.
    pub fn readers(readers: u32) -> Self {
        RwInfo {
            readers,
            ..RwInfo::default()
        }
    }

    /// A writer holding the lock with `token`.
    pub fn writer(token: Option<crate::FencingToken>) -> Self {
        RwInfo {
            writer: true,
            writer_fencing_token: token,
            ..RwInfo::default()
        }
    }

    /// Mark whether a waiting writer's intent is live.
    #[must_use]
    pub fn with_writer_waiting(mut self, waiting: bool) -> Self {
        self.writer_waiting = waiting;
        self
    }
}

/// The error a backend answers an upgrade or a downgrade of a token that
/// holds nothing of `name` with.
pub fn conversion_not_held(name: &str) -> Error {
    Error::NotHeld {
        key: name.to_owned(),
        reason: NotHeldReason::Missing,
    }
}

/// What an adapter key asks for.
#[derive(Clone, Copy)]
enum Op {
    /// Take the lock in a mode (waiting or not).
    Take(RwMode, bool),
    /// Upgrade the holder's upgradeable read.
    Upgrade,
    /// Downgrade the holder's write.
    Downgrade,
}

/// The lock key: a one-letter prefix (`r` read, `u` upgradeable read, `w`
/// waiting writer, `W` writer without intent, `U` upgrade, `D` downgrade),
/// then the name.
fn encode(op: Op, name: &str) -> String {
    let prefix = match op {
        Op::Take(RwMode::Read, _) => 'r',
        Op::Take(RwMode::Upgradeable, _) => 'u',
        Op::Take(RwMode::Write, true) => 'w',
        Op::Take(RwMode::Write, false) => 'W',
        Op::Upgrade => 'U',
        Op::Downgrade => 'D',
    };
    format!("{prefix}{name}")
}

fn decode(key: &str) -> Result<(Op, &str)> {
    let op = match key.split_at_checked(1) {
        Some(("r", name)) => (Op::Take(RwMode::Read, true), name),
        Some(("u", name)) => (Op::Take(RwMode::Upgradeable, true), name),
        Some(("w", name)) => (Op::Take(RwMode::Write, true), name),
        Some(("W", name)) => (Op::Take(RwMode::Write, false), name),
        Some(("U", name)) => (Op::Upgrade, name),
        Some(("D", name)) => (Op::Downgrade, name),
        _ => return Err(Error::invalid(format!("not a read-write lock key: {key:?}"))),
    };
    Ok(op)
}

struct RwAsLock {
    backend: Arc<dyn RwLockBackend>,
}

#[async_trait]
impl LockBackend for RwAsLock {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        match decode(key)? {
            (Op::Take(mode, waiting), name) => self.backend.try_acquire_rw(name, mode, waiting, token, ttl).await,
            (Op::Upgrade, name) => self.backend.upgrade_rw(name, token, ttl).await,
            (Op::Downgrade, name) => self.backend.downgrade_rw(name, token, ttl).await,
        }
    }
    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.backend.release_rw(decode(key)?.1, token).await
    }
    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.backend.renew_rw(decode(key)?.1, token, ttl).await
    }
    fn capabilities(&self) -> Capabilities {
        adapter_capabilities(self.backend.capabilities(), true)
    }
}

/// Hands out read and write guards over one backend. Cheap to clone.
///
/// ```
/// # async fn demo(backend: impl lock_core::raw::RwLockBackend) -> lock_core::Result<()> {
/// use lock_core::RwLockManager;
/// let locks = RwLockManager::new(backend)?;
/// let r1 = locks.read("config").await?;  // readers share
/// let r2 = locks.read("config").await?;
/// drop((r1, r2));
/// let w = locks.write("config").await?;  // one writer, no readers
/// w.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLockManager {
    locks: LockManager,
    backend: Arc<dyn RwLockBackend>,
}

impl std::fmt::Debug for RwLockManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLockManager")
            .field("locks", &self.locks)
            .finish_non_exhaustive()
    }
}

impl RwLockManager {
    /// A manager with the default [`LockOptions`].
    ///
    /// # Errors
    /// [`Error::Unsupported`] when [`Capabilities::rw_locks`] is false;
    /// [`Error::InvalidArgument`] as [`LockManager::new`].
    pub fn new(backend: impl RwLockBackend) -> Result<Self> {
        Self::with_options(backend, LockOptions::default())
    }

    /// A manager with custom options.
    ///
    /// # Errors
    /// As [`RwLockManager::new`], and [`Error::InvalidArgument`] for bad options.
    pub fn with_options(backend: impl RwLockBackend, options: LockOptions) -> Result<Self> {
        Self::from_arc(Arc::new(backend), options)
    }

    /// A manager over a shared backend handle (the same `Arc` can back a
    /// [`LockManager`] and every other kind's manager).
    ///
    /// # Errors
    /// As [`RwLockManager::with_options`].
    pub fn from_arc(backend: Arc<dyn RwLockBackend>, options: LockOptions) -> Result<Self> {
        let caps = backend.capabilities();
        let adapter = RwAsLock {
            backend: backend.clone(),
        };
        Ok(RwLockManager {
            locks: kind_locks(caps, |c| c.rw_locks, "read-write locks", adapter, options)?,
            backend,
        })
    }

    /// Readers and writer of `name`, without taking it (a read: see
    /// [`RwLockBackend::inspect_rw`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name; [`Error::Unsupported`]
    /// when the backend cannot read them; the backend's error.
    ///
    /// # Cancel safety
    /// Cancel safe: a read leaves nothing behind.
    pub async fn inspect(&self, name: &str) -> Result<RwInfo> {
        validate_key(name)?;
        self.backend.inspect_rw(name).await
    }

    /// The options in force.
    pub fn options(&self) -> &LockOptions {
        self.locks.options()
    }

    /// Take `name` in `mode`, waiting up to the acquire timeout
    /// ([`RwLockManager::read`], [`RwLockManager::write`] and
    /// [`RwLockManager::upgradeable_read`] are its modes;
    /// [`RwLockManager::lock_opts`] takes per-call options).
    ///
    /// # Errors
    /// [`Error::Timeout`], [`Error::InvalidArgument`], or the last backend error.
    ///
    /// # Cancel safety
    /// Dropping the future releases whatever it may have taken (in the background).
    pub async fn lock(&self, name: &str, mode: RwMode) -> Result<RwLockGuard> {
        self.lock_opts(name, mode, self.locks.options()).await
    }

    /// [`RwLockManager::lock`] with per-call options.
    ///
    /// # Errors
    /// As [`RwLockManager::lock`].
    ///
    /// # Cancel safety
    /// As [`RwLockManager::lock`].
    pub async fn lock_opts(&self, name: &str, mode: RwMode, options: &LockOptions) -> Result<RwLockGuard> {
        validate_key(name)?;
        // A waiting writer keeps one token for its whole wait, so its intent
        // survives its own retries (each refreshes it) and is dropped by the
        // release the engine sends when the wait ends without a grant.
        // Readers have nothing to keep.
        let identity = match mode {
            RwMode::Read | RwMode::Upgradeable => Identity::PerAttempt,
            RwMode::Write => Identity::Kept,
        };
        let guard = self
            .locks
            .lock_kind(&encode(Op::Take(mode, true), name), options, None, identity)
            .await?;
        Ok(KindGuard::new(guard, self.hold(mode, options)))
    }

    fn hold(&self, mode: RwMode, options: &LockOptions) -> RwHold {
        RwHold {
            mode,
            locks: self.locks.clone(),
            options: options.clone(),
        }
    }

    /// Take `name` for reading: [`RwLockManager::lock`] in [`RwMode::Read`].
    ///
    /// # Errors
    /// As [`RwLockManager::lock`].
    ///
    /// # Cancel safety
    /// As [`RwLockManager::lock`].
    pub async fn read(&self, name: &str) -> Result<RwLockGuard> {
        self.lock(name, RwMode::Read).await
    }

    /// Take `name` for writing: [`RwLockManager::lock`] in [`RwMode::Write`].
    ///
    /// # Errors
    /// As [`RwLockManager::lock`].
    ///
    /// # Cancel safety
    /// As [`RwLockManager::lock`].
    pub async fn write(&self, name: &str) -> Result<RwLockGuard> {
        self.lock(name, RwMode::Write).await
    }

    /// Take `name` for an upgradeable read: [`RwLockManager::lock`] in
    /// [`RwMode::Upgradeable`] (one such holder at a time, plain readers
    /// beside it; see [`RwLockGuard::upgrade`]).
    ///
    /// # Errors
    /// As [`RwLockManager::lock`].
    ///
    /// # Cancel safety
    /// As [`RwLockManager::lock`].
    ///
    /// ```
    /// # async fn demo(locks: lock_core::RwLockManager) -> lock_core::Result<()> {
    /// let read = locks.upgradeable_read("config").await?; // plain readers may join
    /// // ... read, decide ...
    /// let write = read.upgrade().await?; // no writer got in between
    /// write.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn upgradeable_read(&self, name: &str) -> Result<RwLockGuard> {
        self.lock(name, RwMode::Upgradeable).await
    }

    /// One attempt in `mode`, no waiting: `Ok(None)` when refused.
    ///
    /// # Errors
    /// As [`RwLockManager::lock`], without the timeout.
    ///
    /// # Cancel safety
    /// As [`RwLockManager::lock`].
    pub async fn try_lock(&self, name: &str, mode: RwMode) -> Result<Option<RwLockGuard>> {
        self.try_lock_opts(name, mode, self.locks.options()).await
    }

    /// [`RwLockManager::try_lock`] with per-call options.
    ///
    /// # Errors
    /// As [`RwLockManager::try_lock`].
    ///
    /// # Cancel safety
    /// As [`RwLockManager::lock`].
    pub async fn try_lock_opts(&self, name: &str, mode: RwMode, options: &LockOptions) -> Result<Option<RwLockGuard>> {
        validate_key(name)?;
        let guard = self
            .locks
            .try_lock_opts(&encode(Op::Take(mode, false), name), options)
            .await?;
        Ok(guard.map(|guard| KindGuard::new(guard, self.hold(mode, options))))
    }

    /// Run `body` holding `name` in `mode`; on loss the body is dropped and
    /// [`Error::Lost`] returned.
    ///
    /// # Errors
    /// As [`RwLockManager::lock`], plus [`Error::Lost`].
    ///
    /// # Cancel safety
    /// Dropping the future drops the guard, which releases in the background.
    pub async fn with_rw<F, Fut, T>(&self, name: &str, mode: RwMode, body: F) -> Result<T>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        self.with_rw_opts(name, mode, self.locks.options(), body).await
    }

    /// [`RwLockManager::with_rw`] with per-call options.
    ///
    /// # Errors
    /// As [`RwLockManager::with_rw`].
    ///
    /// # Cancel safety
    /// As [`RwLockManager::with_rw`].
    pub async fn with_rw_opts<F, Fut, T>(&self, name: &str, mode: RwMode, options: &LockOptions, body: F) -> Result<T>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.lock_opts(name, mode, options).await?;
        guard.run_while_held(name, body).await
    }
}

#[async_trait]
impl<B: RwLockBackend + ?Sized> RwLockBackend for Arc<B> {
    async fn try_acquire_rw(
        &self,
        name: &str,
        mode: RwMode,
        waiting: bool,
        token: &LockToken,
        ttl: Duration,
    ) -> Result<AcquireOutcome> {
        (**self).try_acquire_rw(name, mode, waiting, token, ttl).await
    }
    async fn release_rw(&self, name: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        (**self).release_rw(name, token).await
    }
    async fn renew_rw(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        (**self).renew_rw(name, token, ttl).await
    }
    async fn upgrade_rw(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        (**self).upgrade_rw(name, token, ttl).await
    }
    async fn downgrade_rw(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        (**self).downgrade_rw(name, token, ttl).await
    }
    async fn inspect_rw(&self, name: &str) -> Result<RwInfo> {
        (**self).inspect_rw(name).await
    }
}
