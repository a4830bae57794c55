//! The lock kinds beyond the mutex, reached from a connected [`Backend`]:
//! semaphores, leader election, read-write and multi-key locks.

use std::sync::Arc;

use lock_core::{ElectionManager, Error, LockOptions, MultiLockManager, Result, RwLockManager, SemaphoreManager};

use lock_core::raw::{ElectionBackend, MultiLockBackend, RwLockBackend, SemaphoreBackend};

use super::Backend;

/// The kind operations of a connected backend; `None` for a kind it cannot
/// do (every kind of a `redlock://` URL: its nodes are plain lock backends).
#[derive(Clone, Default)]
pub(crate) struct Kinds {
    semaphores: Option<Arc<dyn SemaphoreBackend>>,
    elections: Option<Arc<dyn ElectionBackend>>,
    rw_locks: Option<Arc<dyn RwLockBackend>>,
    multi_locks: Option<Arc<dyn MultiLockBackend>>,
}

impl Kinds {
    /// Every kind of `backend` (each manager still checks the backend's
    /// capabilities: a Tair server without the semaphore script says so).
    #[cfg(any(
        feature = "memory",
        feature = "redis-lua",
        feature = "tair",
        feature = "postgres",
        feature = "etcd"
    ))]
    pub(crate) fn of<B>(backend: &Arc<B>) -> Kinds
    where
        B: SemaphoreBackend + ElectionBackend + RwLockBackend + MultiLockBackend + 'static,
    {
        Kinds {
            semaphores: Some(backend.clone()),
            elections: Some(backend.clone()),
            rw_locks: Some(backend.clone()),
            multi_locks: Some(backend.clone()),
        }
    }

    /// No kind beyond the mutex.
    #[cfg_attr(not(feature = "redlock"), allow(dead_code))]
    pub(crate) fn none() -> Kinds {
        Kinds::default()
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
        let backend = self.kind(self.kinds.semaphores.as_ref(), "leased semaphores")?;
        SemaphoreManager::with_options(backend, options)
    }

    /// An [`ElectionManager`] over this backend.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the backend has no leader election
    /// (`redlock://`); [`Error::InvalidArgument`] for invalid options.
    pub fn elections(&self, options: LockOptions) -> Result<ElectionManager> {
        let backend = self.kind(self.kinds.elections.as_ref(), "leader election")?;
        ElectionManager::with_options(backend, options)
    }

    /// An [`RwLockManager`] over this backend.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the backend has no read-write locks
    /// (`redlock://`); [`Error::InvalidArgument`] for invalid options.
    pub fn rw_locks(&self, options: LockOptions) -> Result<RwLockManager> {
        let backend = self.kind(self.kinds.rw_locks.as_ref(), "read-write locks")?;
        RwLockManager::with_options(backend, options)
    }

    /// A [`MultiLockManager`] over this backend.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the backend has no multi-key locks
    /// (`redlock://`); [`Error::InvalidArgument`] for invalid options.
    pub fn multi_locks(&self, options: LockOptions) -> Result<MultiLockManager> {
        let backend = self.kind(self.kinds.multi_locks.as_ref(), "multi-key locks")?;
        MultiLockManager::with_options(backend, options)
    }

    fn kind<T: ?Sized>(&self, backend: Option<&Arc<T>>, what: &str) -> Result<Arc<T>> {
        backend.cloned().ok_or_else(|| Error::Unsupported {
            backend: self.locks.capabilities().name,
            what: format!("{what} (not offered by {})", self.description),
        })
    }
}
