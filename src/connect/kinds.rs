//! The lock kinds beyond the mutex, reached from a connected [`Backend`]:
//! semaphores, leader election, read-write and multi-key locks.

use std::sync::Arc;

use lock_core::{ElectionManager, Error, LockOptions, MultiLockManager, Result, RwLockManager, SemaphoreManager};

use super::Backend;

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
