//! The lock manager: acquire with timeout and backoff, try-lock, and
//! renewal (its scoped critical sections are in `scoped.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::backend::LockBackend;
use crate::engine::{AtOnce, Attempt, Call, Engine, Identity};
use crate::error::{Error, Result};
use crate::guard::{LeaseHandle, LockGuard};
use crate::lane::Lanes;
use crate::lease::{Grant, LeaseCtx, LeaseState};
use crate::options::{LockOptions, Renewal};
use crate::renewer::{Plan, Renewer};

/// Hands out [`LockGuard`]s over one backend. Cheap to clone.
///
/// ```
/// # async fn demo(backend: impl lock_core::LockBackend) -> lock_core::Result<()> {
/// use lock_core::LockManager;
/// let locks = LockManager::new(backend)?;
/// let guard = locks.lock("orders:42").await?;   // waits up to the acquire timeout
/// // ... critical section; the lease is renewed in the background ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockManager {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Arc<dyn LockBackend>,
    options: LockOptions,
    /// Set by `shutdown`: no renewals from then on. Dropping the last
    /// manager clone does not stop renewals (guards keep their renewer).
    shut_down: AtomicBool,
    /// Local FIFO order of this manager's waiters, per key.
    lanes: Lanes,
    /// One renewer per tokio runtime with auto-renewed guards, started with
    /// the first of them: a lease's renewals run on the runtime it was
    /// acquired on, never on another runtime that may be idle or gone.
    /// A list, not a map: it holds one entry or a few, and a scan of one
    /// costs less than hashing the id.
    renewers: std::sync::Mutex<Vec<(tokio::runtime::Id, Renewer)>>,
    /// The default options' TTL less its drift (see `Engine`).
    validity: std::time::Duration,
    /// The backend and lanes again, as every lease holds them.
    lease_ctx: Arc<LeaseCtx>,
    /// The first renewer started, also in `renewers`: found without the
    /// lock while it is alive (most managers live on one runtime).
    first_renewer: std::sync::OnceLock<(tokio::runtime::Id, Renewer)>,
}

impl Inner {
    fn new(backend: Arc<dyn LockBackend>, options: LockOptions) -> Self {
        let lanes = Lanes::default();
        let lease_ctx = Arc::new(LeaseCtx {
            backend: backend.clone(),
            lanes: lanes.clone(),
        });
        Inner {
            backend,
            validity: crate::engine::validity(&options),
            options,
            shut_down: AtomicBool::new(false),
            lanes,
            lease_ctx,
            renewers: std::sync::Mutex::default(),
            first_renewer: std::sync::OnceLock::new(),
        }
    }

    fn renewers(&self) -> std::sync::MutexGuard<'_, Vec<(tokio::runtime::Id, Renewer)>> {
        match self.renewers.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The renewer of `runtime`, or `None` after `shutdown`.
    fn renewer(&self, runtime: &tokio::runtime::Handle) -> Option<Renewer> {
        let id = runtime.id();
        // The lock-free path: `shutdown` sets the flag before it stops the
        // renewers, and a renewer stopped since then renews nothing (its
        // `start` checks, under its queue's lock).
        if let Some((first, renewer)) = self.first_renewer.get()
            && *first == id
            && renewer.is_alive()
            && !self.shut_down.load(Ordering::Acquire)
        {
            return Some(renewer.clone());
        }
        let mut renewers = self.renewers();
        // Checked under the map's lock, which `shutdown` takes after setting
        // the flag: no renewer is started past a shutdown.
        if self.shut_down.load(Ordering::Acquire) {
            return None;
        }
        if let Some((_, renewer)) = renewers.iter().find(|(i, _)| *i == id)
            && renewer.is_alive()
        {
            return Some(renewer.clone());
        }
        // Forget the renewers of runtimes that shut down (and this runtime's,
        // if its driver is gone).
        renewers.retain(|(i, r)| *i != id && r.is_alive());
        let renewer = Renewer::spawn(self.backend.clone(), runtime);
        renewers.push((id, renewer.clone()));
        // Only the first one ever: a later renewer is found under the lock.
        let _ = self.first_renewer.set((id, renewer.clone()));
        Some(renewer)
    }
}

impl std::fmt::Debug for LockManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockManager")
            .field("backend", &self.inner.backend.capabilities().name)
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl LockManager {
    /// A manager with the default [`LockOptions`]. Every manager
    /// (this one and each lock kind's) has the same three constructors,
    /// `new`, `with_options` and `from_arc`, each checking the options
    /// against the backend and returning a `Result`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the default TTL (30 s) is outside the
    /// backend's [`Capabilities::min_ttl`](crate::Capabilities::min_ttl) ..=
    /// [`Capabilities::max_ttl`](crate::Capabilities::max_ttl) (e.g. an etcd
    /// server whose minimum lease TTL is longer).
    pub fn new(backend: impl LockBackend) -> Result<Self> {
        Self::with_options(backend, LockOptions::default())
    }

    /// A manager with custom options.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for invalid options, or a TTL outside the
    /// backend's bounds (as [`LockManager::new`]).
    pub fn with_options(backend: impl LockBackend, options: LockOptions) -> Result<Self> {
        Self::from_arc(Arc::new(backend), options)
    }

    /// A manager over a shared backend (the same `Arc` can back every lock
    /// kind's manager).
    ///
    /// # Errors
    /// As [`LockManager::with_options`].
    pub fn from_arc(backend: Arc<dyn LockBackend>, options: LockOptions) -> Result<Self> {
        options.validate()?;
        let max_ttl = backend.capabilities().max_ttl;
        if options.ttl > max_ttl {
            return Err(Error::invalid(format!(
                "ttl {:?} is above this backend's maximum {max_ttl:?}",
                options.ttl
            )));
        }
        let min_ttl = backend.capabilities().min_ttl;
        if options.ttl < min_ttl {
            return Err(Error::invalid(format!(
                "ttl {:?} is below this backend's minimum {min_ttl:?}",
                options.ttl
            )));
        }
        Ok(LockManager {
            inner: Arc::new(Inner::new(backend, options)),
        })
    }

    /// The options in force.
    pub fn options(&self) -> &LockOptions {
        &self.inner.options
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn LockBackend> {
        &self.inner.backend
    }

    /// Stop every renewer started by this manager (their leases then run out
    /// at their TTL unless released).
    pub fn shutdown(&self) {
        self.inner.shut_down.store(true, Ordering::Release);
        let renewers: Vec<Renewer> = self.inner.renewers().drain(..).map(|(_, r)| r).collect();
        // Also in the list while alive; stopping it twice is harmless.
        if let Some((_, first)) = self.inner.first_renewer.get() {
            first.shutdown();
        }
        for renewer in renewers {
            renewer.shutdown();
        }
    }

    /// Acquire `key`, waiting up to the acquire timeout while another client
    /// holds it, with the manager's options ([`LockManager::lock_opts`] for
    /// per-call ones). The lease is renewed in the background until the
    /// guard is released or dropped.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when the key stayed held for the whole acquire
    /// timeout; the last backend error when the backend kept failing until
    /// then; [`Error::InvalidArgument`] for a bad key;
    /// [`Error::InvalidArgument`] when called outside a tokio runtime (with
    /// or without automatic renewal; nothing is sent to the backend).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future never leaves a lock behind: an attempt whose reply
    /// had not arrived is released (owner-checked) in the background. A
    /// cancelled waiter loses its place in this manager's FIFO line for the
    /// key: calling `lock` again queues it at the back.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(locks: &lock_core::LockManager) -> lock_core::Result<()> {
    /// let guard = locks.lock("orders:42").await?;
    /// // ... critical section: check guard.is_lost() before irreversible steps ...
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self, key: &str) -> Result<LockGuard> {
        self.lock_opts(key, &self.inner.options).await
    }

    /// [`LockManager::lock`] with per-call options (validated; errors and
    /// cancel safety as there).
    ///
    /// # Errors
    ///
    /// As [`LockManager::lock`], plus [`Error::InvalidArgument`] for invalid
    /// `options`.
    ///
    /// # Cancel safety
    ///
    /// As [`LockManager::lock`].
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(locks: &lock_core::LockManager) -> lock_core::Result<()> {
    /// use std::time::Duration;
    /// let quick = locks.options().clone().acquire_timeout(Duration::from_millis(200));
    /// let guard = locks.lock_opts("orders:42", &quick).await?;
    /// # drop(guard); Ok(()) }
    /// ```
    pub async fn lock_opts(&self, key: &str, options: &LockOptions) -> Result<LockGuard> {
        match self.acquire_observed(&Call::mutex(key, options, true)).await? {
            Some(guard) => Ok(guard),
            None => Err(Error::Timeout {
                key: key.to_owned(),
                waited: options.acquire_timeout,
            }),
        }
    }

    /// One attempt, no waiting: `Ok(None)` if another client holds the key.
    /// Does not queue behind this manager's waiters.
    ///
    /// # Errors
    ///
    /// The backend's error when the attempt failed (an attempt whose outcome
    /// is unknown was released in the background); [`Error::InvalidArgument`]
    /// for a bad key.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future never leaves a lock behind (as [`LockManager::lock`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(locks: &lock_core::LockManager) -> lock_core::Result<()> {
    /// match locks.try_lock("nightly-report").await? {
    ///     Some(guard) => { /* we run the report */ guard.release().await?; }
    ///     None => { /* another instance is running it */ }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self, key: &str) -> Result<Option<LockGuard>> {
        self.try_lock_opts(key, &self.inner.options).await
    }

    /// [`LockManager::try_lock`] with per-call options (validated).
    ///
    /// # Errors
    ///
    /// As [`LockManager::try_lock`], plus [`Error::InvalidArgument`] for
    /// invalid `options`.
    ///
    /// # Cancel safety
    ///
    /// As [`LockManager::try_lock`].
    pub async fn try_lock_opts(&self, key: &str, options: &LockOptions) -> Result<Option<LockGuard>> {
        self.acquire_observed(&Call::mutex(key, options, false)).await
    }

    /// `lock` (`wait`) or `try_lock`, in its span: the fast path first,
    /// then the engine's loop.
    pub(crate) async fn acquire_observed(&self, call: &Call<'_>) -> Result<Option<LockGuard>> {
        // Before anything reaches the backend: outside a runtime, no timer,
        // renewal or clean-up release could run, and a grant would be left
        // held with nobody to release it.
        crate::runtime::current()?;
        let span = crate::observe::lock_span(call.key, call.wait);
        let started = crate::observe::lock_started(&span);
        let engine = Engine::new(
            &self.inner.backend,
            &self.inner.lanes,
            &self.inner.options,
            self.inner.validity,
        );
        let finish = |grant| self.guard(grant, call.options);
        let attempted = match engine.acquire_at_once(call, finish) {
            AtOnce::Done(result) => {
                crate::observe::record_lock(&span, call.wait, started, 1, &result);
                return result;
            }
            AtOnce::Tried => 1,
            AtOnce::NotTried => 0,
        };
        // Boxed: the call that waits (or talks to a server) pays one
        // allocation, and the uncontended in-process call moves no large
        // future around.
        let acquire = async {
            let mut made = 0;
            let result = engine.acquire(call, finish, &mut made).await;
            (result, made)
        };
        Box::pin(crate::observe::acquiring(call.wait, span, started, attempted, acquire)).await
    }

    /// `lock_opts` (`wait`) or `try_lock_opts` on a kind's internal name
    /// made of keys the kind checked one by one (a multi-key lock's
    /// encoded set), which the limit of a single key does not bound.
    pub(crate) async fn lock_checked_name(
        &self,
        name: &str,
        options: &LockOptions,
        wait: bool,
    ) -> Result<Option<LockGuard>> {
        let call = Call {
            key_checked: true,
            ..Call::mutex(name, options, wait)
        };
        match self.acquire_observed(&call).await? {
            None if wait => Err(call.timed_out()),
            acquired => Ok(acquired),
        }
    }

    /// A lock kind's `lock`: [`LockManager::lock_opts`] with the kind's own
    /// attempt (`None`: the backend's `try_acquire`) and token policy.
    pub(crate) async fn lock_kind(
        &self,
        key: &str,
        options: &LockOptions,
        attempt: Option<&dyn Attempt>,
        identity: Identity,
    ) -> Result<LockGuard> {
        let call = Call {
            key,
            options,
            wait: true,
            attempt,
            identity,
            spread: true,
            key_checked: false,
        };
        match self.acquire_observed(&call).await? {
            Some(guard) => Ok(guard),
            None => Err(call.timed_out()),
        }
    }

    /// A lock kind's `try_lock`, with its own attempt.
    pub(crate) async fn try_lock_kind(
        &self,
        key: &str,
        options: &LockOptions,
        attempt: Option<&dyn Attempt>,
    ) -> Result<Option<LockGuard>> {
        let call = Call {
            key,
            options,
            wait: false,
            attempt,
            identity: Identity::PerAttempt,
            spread: true,
            key_checked: false,
        };
        self.acquire_observed(&call).await
    }

    pub(crate) fn guard(&self, grant: Grant, options: &LockOptions) -> Result<LockGuard> {
        // Checked before the guard exists: a guard whose runtime check fails
        // would be dropped with no runtime to release on, leaving the key
        // held for its TTL. The grant is given back here instead (at once on
        // a backend that answers at once; else the TTL frees it).
        let runtime = match crate::runtime::current() {
            Ok(runtime) => runtime,
            Err(e) => {
                crate::guard::release_without_runtime(&self.inner.backend, &grant.key, &grant.token);
                return Err(e);
            }
        };
        let state = Arc::new(LeaseState::new(
            self.inner.lease_ctx.clone(),
            grant,
            options.drift_factor,
        ));
        let mut guard = LockGuard {
            handle: LeaseHandle { state: state.clone() },
            ttl: options.ttl,
            op_timeout: options.op_timeout,
            renewer: None,
            released: false,
            min_hold: options.min_hold,
        };
        if let Renewal::Auto { interval } = options.renewal
            && let Some(renewer) = self.inner.renewer(&runtime)
        {
            let plan = Plan {
                ttl: options.ttl,
                interval,
                op_timeout: options.op_timeout,
            };
            renewer.start(state, plan);
            guard.renewer = Some(renewer);
        }
        Ok(guard)
    }
}
