//! [`Backend`]: what [`super::connect`] hands out — the lock operations,
//! the versioned store and the managers of every lock kind the backend has.

use std::sync::Arc;

use lock_core::raw::Connected;
use lock_core::{
    ElectionManager, Error, LockBackend, LockManager, LockOptions, MultiLockManager, Result, RwLockManager,
    SemaphoreManager, VersionedStore,
};

/// A backend chosen and connected by [`super::connect`]: its lock operations, its
/// versioned store when it has one, and managers of the other lock kinds
/// ([`Backend::semaphores`], [`Backend::elections`], [`Backend::rw_locks`],
/// [`Backend::multi_locks`]).
#[derive(Clone)]
pub struct Backend {
    connected: Connected,
}

impl From<Connected> for Backend {
    fn from(connected: Connected) -> Self {
        Backend { connected }
    }
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("url", &self.connected.description)
            .field("backend", &self.connected.locks.capabilities().name)
            .field("store", &self.connected.store.is_some())
            .finish_non_exhaustive()
    }
}

impl Backend {
    /// The lock operations (give them to a [`LockManager`], or use
    /// [`Backend::manager`]).
    pub fn locks(&self) -> &Arc<dyn LockBackend> {
        &self.connected.locks
    }

    /// The versioned store: `None` for `redlock://`, which has none.
    pub fn store(&self) -> Option<&Arc<dyn VersionedStore>> {
        self.connected.store.as_ref()
    }

    /// A [`LockManager`] over this backend.
    ///
    /// # Errors
    /// [`lock_core::Error::InvalidArgument`] for invalid options (see
    /// [`LockManager::from_arc`]).
    pub fn manager(&self, options: LockOptions) -> Result<LockManager> {
        LockManager::from_arc(self.connected.locks.clone(), options)
    }

    /// The URL it was connected with, without passwords.
    pub fn description(&self) -> &str {
        &self.connected.description
    }

    /// True for `memory://` (and a `redlock://` with a `memory://` node): its
    /// locks exist only inside this process.
    pub fn is_in_process(&self) -> bool {
        self.connected.in_process
    }
}

impl Backend {
    /// A [`SemaphoreManager`] over this backend.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> verrou::Result<()> {
    /// let backend = verrou::connect("memory://").await?;
    /// let semaphores = backend.semaphores(verrou::LockOptions::default())?;
    /// let permit = semaphores.semaphore("reports", 3)?.acquire(1).await?; // at most 3 at once
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the backend has no leased semaphores
    /// (`redlock://`, a Tair server built without them);
    /// [`Error::InvalidArgument`] for invalid options.
    pub fn semaphores(&self, options: LockOptions) -> Result<SemaphoreManager> {
        let backend = self.kind(self.connected.semaphores.as_ref(), "leased semaphores")?;
        SemaphoreManager::with_options(backend, options)
    }

    /// An [`ElectionManager`] over this backend.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the backend has no leader election
    /// (`redlock://`); [`Error::InvalidArgument`] for invalid options.
    pub fn elections(&self, options: LockOptions) -> Result<ElectionManager> {
        let backend = self.kind(self.connected.elections.as_ref(), "leader election")?;
        ElectionManager::with_options(backend, options)
    }

    /// An [`RwLockManager`] over this backend.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the backend has no read-write locks
    /// (`redlock://`); [`Error::InvalidArgument`] for invalid options.
    pub fn rw_locks(&self, options: LockOptions) -> Result<RwLockManager> {
        let backend = self.kind(self.connected.rw_locks.as_ref(), "read-write locks")?;
        RwLockManager::with_options(backend, options)
    }

    /// A [`MultiLockManager`] over this backend.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the backend has no multi-key locks
    /// (`redlock://`); [`Error::InvalidArgument`] for invalid options.
    pub fn multi_locks(&self, options: LockOptions) -> Result<MultiLockManager> {
        let backend = self.kind(self.connected.multi_locks.as_ref(), "multi-key locks")?;
        MultiLockManager::with_options(backend, options)
    }

    fn kind<T: ?Sized>(&self, backend: Option<&Arc<T>>, what: &str) -> Result<Arc<T>> {
        backend.cloned().ok_or_else(|| Error::Unsupported {
            backend: self.connected.locks.capabilities().name,
            what: format!("{what} (not offered by {})", self.connected.description),
        })
    }
}
