//! Counting semaphore with leased permits.
//!
//! Each holder is one lease (a fresh [`LockToken`]) that takes `permits` of a
//! semaphore of `size` permits. The backend stores a per-holder deadline in
//! **server** time, so a crashed holder's permits come back when its lease
//! expires; the size is stored with the holders and a request with another
//! size fails with [`Error::InvalidArgument`] while any permit is held.
//!
//! The [`SemaphoreManager`] runs each holder through a [`LockManager`] (an
//! adapter presents "holder of `name`" as a lock key), so a [`Permit`] has
//! exactly the mutex's lifecycle: background renewal through the batcher,
//! [`LeaseHandle::lost`] at the local deadline, release on drop, fencing
//! tokens, and local FIFO waiters per name (the head of the line polls, the
//! others queue behind it, as in `tokio::sync::Semaphore`).
//!
//! **Fairness across permit sizes: an aging bound, not a FIFO.** A waiter
//! for `k` permits that is refused leaves a reservation of `k` (see
//! [`SemaphoreBackend::acquire_permits`]) that refuses newcomers until
//! enough holders leave; a smaller request never takes it over, so a stream
//! of smaller requests cannot starve it. There is one reservation per
//! name: a larger waiter takes it over, an equal one waits for its turn, so
//! a waiter's wait is bounded by the holds inside, the turns of the equal
//! or larger waiters ahead of it, and for each the gap until the next one
//! retries and reserves (at most a third of the TTL). Checked on every
//! backend by the conformance cases
//! `multi_permit_waiter_completes_under_single_permit_churn` and
//! `two_permit_waiters_complete_under_single_permit_churn`.
//!
//! Every permit carries a fencing token on every backend (whatever the
//! mutex builder's `fencing` setting says); tokens strictly increase per
//! semaphore name across grants. Since up to `size` holders are legal at
//! once, a resource cannot reject "older" tokens as it would for a mutex:
//! hand [`LeaseHandle::fencing_token`] to it with every write and use it to
//! order or deduplicate writes (a permit's token names one grant).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::guard::{KindGuard, kind_locks};
use crate::backend::{AcquireOutcome, Capabilities, LockBackend, ReleaseOutcome, RenewOutcome};
use crate::engine::{Attempt, Identity};
use crate::error::{Error, Result};
use crate::guard::LeaseHandle;
use crate::manager::LockManager;
use crate::options::LockOptions;
use crate::token::LockToken;

/// What one holder asks for: `permits` of a semaphore of `size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitRequest {
    /// Total permits of the semaphore (fixed per name while any is held).
    pub size: u32,
    /// Permits this holder takes, `1..=size`.
    pub permits: u32,
    /// The holder will try again if refused (`acquire`, not `try_acquire`):
    /// a refused waiting request leaves a reservation (see
    /// [`SemaphoreBackend::acquire_permits`]).
    pub waiting: bool,
}

impl PermitRequest {
    /// `permits` of a semaphore of `size` (checked by [`PermitRequest::validate`]).
    pub fn new(size: u32, permits: u32) -> Self {
        PermitRequest {
            size,
            permits,
            waiting: false,
        }
    }

    /// The same request, marked as one that will try again if refused.
    #[must_use]
    pub fn waiting(mut self, waiting: bool) -> Self {
        self.waiting = waiting;
        self
    }

    /// Check `1 <= permits <= size <= Semaphore::MAX_PERMITS`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the bad value.
    pub fn validate(&self) -> Result<()> {
        if self.size == 0 || self.size > Semaphore::MAX_PERMITS {
            return Err(Error::invalid(format!(
                "semaphore size {} must be in 1..={}",
                self.size,
                Semaphore::MAX_PERMITS
            )));
        }
        if self.permits == 0 || self.permits > self.size {
            return Err(Error::invalid(format!(
                "permits {} must be in 1..={} (the semaphore's size)",
                self.permits, self.size
            )));
        }
        Ok(())
    }
}

/// What a backend sees of a semaphore ([`SemaphoreBackend::inspect_permits`]),
/// counting live holders only (an expired lease's permits are free).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitsInfo {
    /// Permits held.
    pub in_use: u32,
    /// Holders holding them.
    pub holders: u32,
    /// The size stored with the holders (`None` when nobody holds a permit).
    pub size: Option<u32>,
}

impl PermitsInfo {
    /// `in_use` permits held by `holders` holders of a semaphore of `size`.
    pub fn new(in_use: u32, holders: u32, size: Option<u32>) -> Self {
        PermitsInfo { in_use, holders, size }
    }
}

/// How long a holder token released before its acquire arrived (a cancelled
/// or timed-out acquire's clean-up) is refused by later acquires, ms: a
/// backend remembers it that long so that the late acquire cannot take
/// permits nobody will release.
pub const GONE_WINDOW_MS: u64 = 60_000;

/// The error for a request whose size differs from the stored one.
pub fn size_mismatch(name: &str, requested: u32, stored: u64) -> Error {
    Error::invalid(format!(
        "semaphore {name:?} has size {stored} while permits are held; this request said {requested}"
    ))
}

/// Primitive, owner-checked semaphore operations: one round trip each on
/// remote backends. Holders are identified by `(name, holder)`; a holder's
/// permits count until its lease expires by the server's clock.
///
/// Release and renew answer `Released`/`Renewed` or `Missing` (a holder whose
/// lease expired, or that never held); they never touch another holder.
///
/// # Cancel safety
///
/// As [`LockBackend`]: dropping a call's future leaves its outcome unknown
/// (a write applied whole or not at all) and must leave the backend usable.
#[async_trait]
pub trait SemaphoreBackend: LockBackend {
    /// Take `request.permits` of `name` for `holder` for `ttl` if that many
    /// are free. A repeated call for a holder that already holds refreshes its
    /// lease (a re-sent request is harmless). `Held { retry_after }` hints
    /// when the earliest current lease expires.
    ///
    /// **No waiter is starved:** a refused request that is
    /// [`PermitRequest::waiting`] leaves a *reservation* (its holder and
    /// permit count, for `ttl`) unless another holder's live reservation
    /// asks for as many permits or more; its next attempts (same holder)
    /// refresh it. While another holder's
    /// reservation is live, a request is granted only if the permits left
    /// after the reservation's suffice, so single-permit churn cannot keep a
    /// multi-permit waiter out. A grant or a release of the holder drops its
    /// reservation; a reservation whose waiter gave up lapses within `ttl`.
    async fn acquire_permits(
        &self,
        name: &str,
        holder: &LockToken,
        request: PermitRequest,
        ttl: Duration,
    ) -> Result<AcquireOutcome>;

    /// Return `holder`'s permits of `name`, if its lease is still live.
    async fn release_permits(&self, name: &str, holder: &LockToken) -> Result<ReleaseOutcome>;

    /// Reset `holder`'s lease on `name` to `ttl`, if it is still live (an
    /// expired lease is never revived).
    async fn renew_permits(&self, name: &str, holder: &LockToken, ttl: Duration) -> Result<RenewOutcome>;

    /// Renew many holders for the same `ttl`, one result per item, in order.
    /// The default renews each concurrently.
    async fn renew_permits_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        futures::future::join_all(items.iter().map(|(name, holder)| self.renew_permits(name, holder, ttl))).await
    }

    /// Wait until permits of `name` may have been returned, or `max_wait`
    /// passes. A hint only; the default sleeps.
    async fn wait_for_permits(&self, name: &str, max_wait: Duration) {
        let _ = name;
        tokio::time::sleep(max_wait).await;
    }

    /// The permits of `name` in use, without taking any: a read that
    /// never writes, never draws a fencing token and never touches a
    /// reservation. The default answers [`Error::Unsupported`].
    async fn inspect_permits(&self, name: &str) -> Result<PermitsInfo> {
        let _ = name;
        Err(Error::unsupported(
            self.capabilities().name,
            "inspecting a semaphore without taking a permit",
        ))
    }
}

/// One holder's attempt, handed to the manager's acquire engine: the
/// request travels with the attempt, not through the key.
struct PermitAttempt<'a> {
    backend: &'a dyn SemaphoreBackend,
    request: PermitRequest,
}

#[async_trait]
impl Attempt for PermitAttempt<'_> {
    async fn attempt(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.backend.acquire_permits(key, token, self.request, ttl).await
    }
}

/// Presents semaphore holders as lock leases to a [`LockManager`]: key =
/// semaphore name, token = holder.
struct HolderAsLock {
    backend: Arc<dyn SemaphoreBackend>,
}

#[async_trait]
impl LockBackend for HolderAsLock {
    async fn try_acquire(&self, _key: &str, _token: &LockToken, _ttl: Duration) -> Result<AcquireOutcome> {
        // The manager hands every acquire its `PermitAttempt`.
        Err(Error::invalid("a semaphore acquire must go through SemaphoreManager"))
    }
    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.backend.release_permits(key, token).await
    }
    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.backend.renew_permits(key, token, ttl).await
    }
    async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        self.backend.renew_permits_many(items, ttl).await
    }
    async fn wait_for_release(&self, key: &str, max_wait: Duration) {
        self.backend.wait_for_permits(key, max_wait).await;
    }
    fn capabilities(&self) -> Capabilities {
        // Every permit carries a fencing token, whatever the mutex's setting.
        let mut caps = self.backend.capabilities();
        caps.fencing_tokens = true;
        caps
    }
}

/// Hands out [`Semaphore`]s over one backend; they share its renewal batcher
/// and local waiting lines. Cheap to clone.
///
/// ```
/// # async fn demo(backend: impl lock_core::raw::SemaphoreBackend) -> lock_core::Result<()> {
/// use lock_core::SemaphoreManager;
/// let semaphores = SemaphoreManager::new(backend)?;
/// let api = semaphores.semaphore("partner-api", 4)?; // at most 4 permits at once
/// let permit = api.acquire(1).await?;               // leased and renewed
/// // ... call the rate-limited API ...
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SemaphoreManager {
    locks: LockManager,
    backend: Arc<dyn SemaphoreBackend>,
}

impl std::fmt::Debug for SemaphoreManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemaphoreManager")
            .field("locks", &self.locks)
            .finish_non_exhaustive()
    }
}

impl SemaphoreManager {
    /// A manager with the default [`LockOptions`].
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the backend's [`Capabilities::semaphores`]
    /// is false; [`Error::InvalidArgument`] as [`LockManager::new`].
    pub fn new(backend: impl SemaphoreBackend) -> Result<Self> {
        Self::with_options(backend, LockOptions::default())
    }

    /// A manager with custom options (validated as for [`LockManager`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for bad options, [`Error::Unsupported`] as
    /// for [`SemaphoreManager::new`].
    pub fn with_options(backend: impl SemaphoreBackend, options: LockOptions) -> Result<Self> {
        Self::from_arc(Arc::new(backend), options)
    }

    /// A manager over a shared backend handle (the same `Arc` can back a
    /// [`LockManager`] and every other kind's manager).
    ///
    /// # Errors
    /// As [`SemaphoreManager::with_options`].
    pub fn from_arc(backend: Arc<dyn SemaphoreBackend>, options: LockOptions) -> Result<Self> {
        let caps = backend.capabilities();
        let adapter = HolderAsLock {
            backend: backend.clone(),
        };
        Ok(SemaphoreManager {
            locks: kind_locks(caps, |c| c.semaphores, "leased semaphores", adapter, options)?,
            backend,
        })
    }

    /// The options in force.
    pub fn options(&self) -> &LockOptions {
        self.locks.options()
    }

    /// Stop every renewer started by this manager.
    pub fn shutdown(&self) {
        self.locks.shutdown();
    }

    /// The permits of semaphore `name` in use, without taking any (a read:
    /// see [`SemaphoreBackend::inspect_permits`]); no size needed.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name; [`Error::Unsupported`]
    /// when the backend cannot read them; the backend's error.
    ///
    /// # Cancel safety
    /// Cancel safe: a read leaves nothing behind.
    pub async fn inspect(&self, name: &str) -> Result<PermitsInfo> {
        crate::validate::validate_key(name)?;
        self.backend.inspect_permits(name).await
    }

    /// The semaphore `name` of `size` permits.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty name or a size outside
    /// `1..=`[`Semaphore::MAX_PERMITS`].
    pub fn semaphore(&self, name: &str, size: u32) -> Result<Semaphore> {
        crate::validate::validate_key(name)?;
        PermitRequest::new(size, 1).validate()?;
        Ok(Semaphore {
            name: name.to_owned(),
            size,
            locks: self.locks.clone(),
            backend: self.backend.clone(),
        })
    }
}

/// One named semaphore of a fixed size. Cheap to clone.
#[derive(Clone)]
pub struct Semaphore {
    name: String,
    size: u32,
    locks: LockManager,
    backend: Arc<dyn SemaphoreBackend>,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl Semaphore {
    /// Largest semaphore size accepted, so the most permits one semaphore
    /// has (keeps every count exact in Lua and small enough to be a
    /// plausible request rather than a unit mistake).
    pub const MAX_PERMITS: u32 = 1 << 20;

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its size.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Take `permits`, waiting up to the acquire timeout for them to be free.
    ///
    /// # Errors
    /// [`Error::Timeout`] when they stayed taken, [`Error::InvalidArgument`]
    /// for `permits` outside `1..=size` or a size that differs from the one
    /// stored by current holders, the last backend error when it kept failing.
    ///
    /// # Cancel safety
    /// Dropping the future gives back anything it may have taken (an
    /// owner-checked release is sent in the background).
    pub async fn acquire(&self, permits: u32) -> Result<Permit> {
        self.acquire_opts(permits, self.locks.options()).await
    }

    /// [`Semaphore::acquire`] with per-call options.
    ///
    /// # Errors
    /// As [`Semaphore::acquire`].
    ///
    /// # Cancel safety
    /// As [`Semaphore::acquire`].
    pub async fn acquire_opts(&self, permits: u32, options: &LockOptions) -> Result<Permit> {
        // A waiter keeps one holder token for its whole wait: the
        // reservation the backend keeps for it survives its retries.
        let attempt = PermitAttempt {
            backend: &*self.backend,
            request: self.request(permits)?.waiting(true),
        };
        let guard = self
            .locks
            .lock_kind(&self.name, options, Some(&attempt), Identity::Kept)
            .await?;
        Ok(KindGuard::new(guard, Permits(permits)))
    }

    /// One attempt, no waiting: `Ok(None)` when not enough permits are free.
    ///
    /// # Errors
    /// As [`Semaphore::acquire`], without the timeout.
    ///
    /// # Cancel safety
    /// As [`Semaphore::acquire`].
    pub async fn try_acquire(&self, permits: u32) -> Result<Option<Permit>> {
        self.try_acquire_opts(permits, self.locks.options()).await
    }

    /// [`Semaphore::try_acquire`] with per-call options.
    ///
    /// # Errors
    /// As [`Semaphore::try_acquire`].
    ///
    /// # Cancel safety
    /// As [`Semaphore::acquire`].
    pub async fn try_acquire_opts(&self, permits: u32, options: &LockOptions) -> Result<Option<Permit>> {
        let attempt = PermitAttempt {
            backend: &*self.backend,
            request: self.request(permits)?,
        };
        let guard = self.locks.try_lock_kind(&self.name, options, Some(&attempt)).await?;
        Ok(guard.map(|guard| KindGuard::new(guard, Permits(permits))))
    }

    /// Run `body` while holding `permits`. If the lease is lost, the body is
    /// dropped at its next await point and [`Error::Lost`] is returned;
    /// otherwise the permits are returned and the body's output given back.
    ///
    /// # Errors
    /// As [`Semaphore::acquire`], plus [`Error::Lost`].
    ///
    /// # Cancel safety
    /// Dropping the future drops the permit, which releases it in the
    /// background.
    pub async fn with_permits<F, Fut, T>(&self, permits: u32, body: F) -> Result<T>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        self.with_permits_opts(permits, self.locks.options(), body).await
    }

    /// [`Semaphore::with_permits`] with per-call options.
    ///
    /// # Errors
    /// As [`Semaphore::with_permits`].
    ///
    /// # Cancel safety
    /// As [`Semaphore::with_permits`].
    pub async fn with_permits_opts<F, Fut, T>(&self, permits: u32, options: &LockOptions, body: F) -> Result<T>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let permit = self.acquire_opts(permits, options).await?;
        permit.run_while_held(&self.name, body).await
    }

    /// The permits in use, without taking any (a read: see
    /// [`SemaphoreBackend::inspect_permits`]).
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the backend cannot read them; the
    /// backend's error when the read failed.
    ///
    /// # Cancel safety
    /// Cancel safe: a read leaves nothing behind.
    pub async fn inspect(&self) -> Result<PermitsInfo> {
        self.backend.inspect_permits(&self.name).await
    }

    fn request(&self, permits: u32) -> Result<PermitRequest> {
        let request = PermitRequest::new(self.size, permits);
        request.validate()?;
        Ok(request)
    }
}

/// What a [`Permit`] holds: its number of permits.
#[derive(Debug)]
pub struct Permits(u32);

/// Held permits of a semaphore: a leased, renewed holder (the shared
/// [`KindGuard`], holding its [`Permits`]). Owned and `'static`; dropping it
/// returns the permits in the background.
pub type Permit = KindGuard<Permits>;

impl KindGuard<Permits> {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.lock_key()
    }

    /// How many permits this holder has.
    pub fn permits(&self) -> u32 {
        self.kind().0
    }
}

#[async_trait]
impl<B: SemaphoreBackend + ?Sized> SemaphoreBackend for Arc<B> {
    async fn acquire_permits(
        &self,
        name: &str,
        holder: &LockToken,
        request: PermitRequest,
        ttl: Duration,
    ) -> Result<AcquireOutcome> {
        (**self).acquire_permits(name, holder, request, ttl).await
    }
    async fn release_permits(&self, name: &str, holder: &LockToken) -> Result<ReleaseOutcome> {
        (**self).release_permits(name, holder).await
    }
    async fn renew_permits(&self, name: &str, holder: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        (**self).renew_permits(name, holder, ttl).await
    }
    async fn renew_permits_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        (**self).renew_permits_many(items, ttl).await
    }
    async fn wait_for_permits(&self, name: &str, max_wait: Duration) {
        (**self).wait_for_permits(name, max_wait).await;
    }
    async fn inspect_permits(&self, name: &str) -> Result<PermitsInfo> {
        (**self).inspect_permits(name).await
    }
}
