//! Redlock and read-write locks (upgradeable reads included): not supported yet. A quorum per operation
//! would be sound (pairwise exclusion), but the nodes are plain
//! [`LockBackend`]s without reader sets; so every call answers
//! [`Error::Unsupported`] and
//! [`Capabilities::rw_locks`](lock_core::Capabilities::rw_locks) is false.

use std::time::Duration;

use async_trait::async_trait;
use lock_core::raw::RwLockBackend;
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{Error, LockBackend, LockToken, Result, RwMode};

use crate::Redlock;

fn unsupported(redlock: &Redlock) -> Error {
    Error::Unsupported {
        backend: redlock.capabilities().name,
        what: "read-write locks (the nodes have no reader sets)".to_owned(),
    }
}

#[async_trait]
impl RwLockBackend for Redlock {
    async fn try_acquire_rw(
        &self,
        _name: &str,
        _mode: RwMode,
        _waiting: bool,
        _token: &LockToken,
        _ttl: Duration,
    ) -> Result<AcquireOutcome> {
        Err(unsupported(self))
    }

    async fn release_rw(&self, _name: &str, _token: &LockToken) -> Result<ReleaseOutcome> {
        Err(unsupported(self))
    }

    async fn renew_rw(&self, _name: &str, _token: &LockToken, _ttl: Duration) -> Result<RenewOutcome> {
        Err(unsupported(self))
    }

    async fn upgrade_rw(&self, _name: &str, _token: &LockToken, _ttl: Duration) -> Result<AcquireOutcome> {
        Err(unsupported(self))
    }

    async fn downgrade_rw(&self, _name: &str, _token: &LockToken, _ttl: Duration) -> Result<AcquireOutcome> {
        Err(unsupported(self))
    }
}
