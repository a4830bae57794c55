//! The guard and manager plumbing every lock kind shares: a kind's manager
//! runs its holders through a [`LockManager`] (an adapter presents the
//! kind's operations as lock keys), so a [`KindGuard`] is the mutex's
//! [`LockGuard`] plus what the kind knows of the hold: renewal, `lost()` at
//! the local deadline, release on drop (handed to the runtime by the inner
//! guard's `Drop`), cancellation safety.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::{Capabilities, LockBackend, ReleaseOutcome};
use crate::error::{Error, Result};
use crate::guard::{LeaseHandle, LockGuard};
use crate::manager::LockManager;
use crate::options::LockOptions;

/// A held lease of one lock kind ([`crate::RwLockGuard`],
/// [`crate::MultiLockGuard`], [`crate::Permit`], [`crate::Leadership`]):
/// `K` is what the kind knows of the hold (the mode, the key set, the
/// permit count). Owned and `'static`; dropping it releases in the
/// background.
#[must_use = "dropping the guard releases what it holds (in the background)"]
#[derive(Debug)]
pub struct KindGuard<K> {
    guard: LockGuard,
    kind: K,
}

impl<K> std::ops::Deref for KindGuard<K> {
    type Target = LeaseHandle;
    fn deref(&self) -> &LeaseHandle {
        &self.guard
    }
}

impl<K> KindGuard<K> {
    pub(crate) fn new(guard: LockGuard, kind: K) -> Self {
        KindGuard { guard, kind }
    }

    /// What the kind knows of the hold.
    pub(crate) fn kind(&self) -> &K {
        &self.kind
    }

    /// The inner guard (its hold handed over, say).
    pub(crate) fn into_guard(self) -> LockGuard {
        self.guard
    }

    /// The adapter's lock key.
    pub(crate) fn lock_key(&self) -> &str {
        self.guard.key()
    }

    /// A cloneable view of the lease (for `select!`, tasks, logging).
    pub fn handle(&self) -> LeaseHandle {
        self.guard.handle()
    }

    /// Reset the lease to `ttl` now (owner-checked).
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the lease is lost; a transport error leaves
    /// the lease's deadline as it was.
    ///
    /// # Cancel safety
    /// Safe: at worst the renewal happens without moving the local deadline.
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        self.guard.extend(ttl).await
    }

    /// Stop renewing and release what this lease still holds (owner-checked).
    /// `Missing` means the lease had already expired (nothing else touched).
    ///
    /// # Errors
    /// The backend's error; the lease then expires on its own.
    ///
    /// # Cancel safety
    /// Safe: if dropped mid-flight, the release is sent again in the background.
    pub async fn release(self) -> Result<ReleaseOutcome> {
        self.guard.release().await
    }

    /// Runs `body` while this guard holds, for every kind's `with_*` helper,
    /// with the mutex's `with_lock` semantics (see
    /// `crate::scoped::run_while_held`): [`Error::Lost`] (naming `what`) on
    /// loss during the body, on a body that returned past the deadline, or
    /// on a release that found the lease gone; otherwise the guard is
    /// released and the body's output returned.
    pub(crate) async fn run_while_held<F, Fut, T>(self, what: &str, body: F) -> Result<T>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        crate::scoped::run_while_held(self.guard, what, body).await
    }
}

/// The [`LockManager`] behind a kind's manager: refuses a backend whose
/// capabilities (`caps`) lack the kind (`supported`, named `what`), then
/// runs `adapter` (the kind's operations presented as lock keys).
pub(crate) fn kind_locks(
    caps: Capabilities,
    supported: fn(&Capabilities) -> bool,
    what: &str,
    adapter: impl LockBackend,
    options: LockOptions,
) -> Result<LockManager> {
    if !supported(&caps) {
        return Err(Error::Unsupported {
            backend: caps.name,
            what: what.to_owned(),
        });
    }
    LockManager::from_arc(Arc::new(adapter), options)
}

/// An adapter's capabilities: the kind's backend's, with the kind's own
/// fencing, and no release notifications (the adapter's lock keys are not
/// keys whose releases the backend announces).
pub(crate) fn adapter_capabilities(mut caps: Capabilities, fencing_tokens: bool) -> Capabilities {
    caps.fencing_tokens = fencing_tokens;
    caps.release_notifications = false;
    caps
}
