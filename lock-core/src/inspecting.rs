//! [`LockManager::inspect`]: a backend's [`crate::LockInfo`] with its
//! bound on this process's clock ([`Inspection`]).

use tokio::time::Instant;

use crate::error::Result;
use crate::inspect::Inspection;
use crate::manager::LockManager;

impl LockManager {
    /// Look at `key` without taking it: held or free, the holder's
    /// remaining lease, its fencing token, and [`Inspection::expires_by`]
    /// on this process's clock. A read: no write, no fencing token drawn,
    /// no place taken in a fair queue.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Unsupported`] when the backend cannot look without
    /// taking the lock (with the reason); [`crate::Error::InvalidArgument`]
    /// for a bad key; the backend's error when the read failed.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read leaves nothing behind.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(locks: &lock_core::LockManager) -> lock_core::Result<()> {
    /// let seen = locks.inspect("nightly-report").await?;
    /// if seen.is_held() {
    ///     println!("held, fencing token {:?}, {:?} left", seen.info.fencing_token, seen.info.remaining);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, key: &str) -> Result<Inspection> {
        crate::validate::validate_key(key)?;
        let sent_at = Instant::now();
        let info = self.backend().inspect(key).await?;
        Ok(Inspection::new(info, sent_at, self.options().drift_factor))
    }
}
