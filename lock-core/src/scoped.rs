//! Scoped critical sections: [`LockManager::with_lock`] and its variants,
//! and the rule they share with every lock kind's `with_*` helper
//! ([`run_while_held`]).

use std::future::Future;

use tracing::{Instrument, Span};

use crate::backend::ReleaseOutcome;
use crate::error::{Error, Result};
use crate::guard::{LeaseHandle, LockGuard};
use crate::manager::LockManager;
use crate::options::LockOptions;

impl LockManager {
    /// Run `body` while holding `key`, then release the lock.
    ///
    /// `Ok` means the body returned while the lease was still valid and the
    /// release found our own lock. If the lease is lost during the body, the
    /// body is cancelled (dropped at its next await point) and
    /// [`Error::Lost`] is returned. The body's output is discarded with an
    /// [`Error::Lost`] too when the lease turns out lost after all: the body
    /// returned past the local deadline (it blocked its runtime, so the loss
    /// signal could not interrupt it), or the release answered that another
    /// client holds the key or that it is gone. The body's own release is
    /// never reported as a loss; its lease handles see
    /// [`crate::LossReason::Released`] once `with_lock` returns.
    ///
    /// A release that fails in transport (outcome unknown) does not turn a
    /// valid run into an error: the body finished inside its validity
    /// window, and the TTL frees the key at the latest.
    ///
    /// # Errors
    ///
    /// Those of [`LockManager::lock`], and [`Error::Lost`] as above.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future cancels the body and releases the lock in the
    /// background (the guard's drop); while waiting, as [`LockManager::lock`].
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(locks: &lock_core::LockManager) -> lock_core::Result<()> {
    /// let total = locks
    ///     .with_lock("accounts:7", |lease| async move {
    ///         // lease.fencing_token() goes with every write to the resource
    ///         let _ = lease.fencing_token();
    ///         40 + 2
    ///     })
    ///     .await?;
    /// assert_eq!(total, 42);
    /// # Ok(()) }
    /// ```
    pub async fn with_lock<F, Fut, T>(&self, key: &str, body: F) -> Result<T>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        self.with_lock_opts(key, self.options(), body).await
    }

    /// [`LockManager::with_lock`] with per-call options (validated).
    ///
    /// # Errors
    ///
    /// As [`LockManager::with_lock`], plus [`Error::InvalidArgument`] for
    /// invalid `options`.
    ///
    /// # Cancel safety
    ///
    /// As [`LockManager::with_lock`].
    pub async fn with_lock_opts<F, Fut, T>(&self, key: &str, options: &LockOptions, body: F) -> Result<T>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let span = crate::observe::with_lock_span(key);
        let scoped = async {
            let guard = self.lock_opts(key, options).await?;
            run_while_held(guard, key, body).await
        };
        let result = scoped.instrument(span.clone()).await;
        span.record(
            "outcome",
            match &result {
                Ok(_) => "ok",
                Err(Error::Lost { .. }) => "lost",
                Err(_) => "error",
            },
        );
        result
    }

    /// [`LockManager::with_lock`] for a body returning a `Result`: its error
    /// and the lock's own errors come back as one `E`.
    ///
    /// # Errors
    ///
    /// The body's error, or the lock's (see [`LockManager::with_lock`])
    /// converted with `E::from`.
    ///
    /// # Cancel safety
    ///
    /// As [`LockManager::with_lock`].
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(locks: &lock_core::LockManager) -> lock_core::Result<()> {
    /// let written: u32 = locks
    ///     .try_with_lock("files:a", |_lease| async move { Ok::<_, lock_core::Error>(3) })
    ///     .await?;
    /// # let _ = written; Ok(()) }
    /// ```
    pub async fn try_with_lock<F, Fut, T, E>(&self, key: &str, body: F) -> std::result::Result<T, E>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
        E: From<Error>,
    {
        self.try_with_lock_opts(key, self.options(), body).await
    }

    /// [`LockManager::try_with_lock`] with per-call options (validated).
    ///
    /// # Errors
    ///
    /// As [`LockManager::try_with_lock`], plus [`Error::InvalidArgument`]
    /// (converted with `E::from`) for invalid `options`.
    ///
    /// # Cancel safety
    ///
    /// As [`LockManager::with_lock`].
    pub async fn try_with_lock_opts<F, Fut, T, E>(
        &self,
        key: &str,
        options: &LockOptions,
        body: F,
    ) -> std::result::Result<T, E>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
        E: From<Error>,
    {
        self.with_lock_opts(key, options, body).await?
    }
}

/// Runs `body` while `guard` holds `what` (a key, or a kind's description),
/// with [`LockManager::with_lock`]'s semantics: a loss during the body drops
/// the body and returns [`Error::Lost`]; so does a body that returned past
/// the local deadline, or a release that found the lock gone or another's.
/// A release that fails in transport keeps the body's output (the TTL frees
/// the key). Shared by `with_lock` and every kind's `with_*` helper.
pub(crate) async fn run_while_held<F, Fut, T>(guard: LockGuard, what: &str, body: F) -> Result<T>
where
    F: FnOnce(LeaseHandle) -> Fut,
    Fut: Future<Output = T>,
{
    let lost = guard.lost();
    let handle = guard.handle();
    let lost_with = |guard: &LockGuard, reason| Error::Lost {
        key: what.to_owned(),
        held_for: guard.acquired_at().elapsed(),
        reason,
    };
    let out = tokio::select! {
        biased;
        reason = lost => {
            let err = lost_with(&guard, reason);
            drop(guard); // best-effort release in the background
            return Err(err);
        }
        out = body(handle) => out,
    };
    if guard.is_lost() {
        // The body returned, but after the lease ran out.
        let err = lost_with(&guard, guard.handle.state.reason());
        drop(guard);
        return Err(err);
    }
    let held_for = guard.acquired_at().elapsed();
    Span::current().record("held_us", crate::observe::micros(held_for));
    match guard.release().await {
        Ok(ReleaseOutcome::Released) => Ok(out),
        Ok(_) => Err(Error::Lost {
            key: what.to_owned(),
            held_for,
            reason: crate::error::LossReason::NotOwner,
        }),
        Err(e) => {
            tracing::warn!(what, error = %e, "release after the scoped body failed; the TTL will free the lock");
            Ok(out)
        }
    }
}
