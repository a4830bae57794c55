//! Redlock and multi-key locks: not supported yet. A quorum would be sound
//! here (any two majorities share a node that refuses the conflicting set),
//! but the nodes are plain [`LockBackend`]s, without an all-or-nothing
//! operation; so every call answers [`Error::Unsupported`] and
//! [`Capabilities::multi_key_locks`](lock_core::Capabilities::multi_key_locks)
//! is false.

use std::time::Duration;

use async_trait::async_trait;
use lock_core::raw::MultiLockBackend;
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{Error, LockBackend, LockToken, Result};

use crate::Redlock;

fn unsupported(redlock: &Redlock) -> Error {
    Error::Unsupported {
        backend: redlock.capabilities().name,
        what: "multi-key locks (the nodes have no all-or-nothing operation)".to_owned(),
    }
}

#[async_trait]
impl MultiLockBackend for Redlock {
    async fn try_acquire_all(&self, _keys: &[&str], _token: &LockToken, _ttl: Duration) -> Result<AcquireOutcome> {
        Err(unsupported(self))
    }

    async fn release_all(&self, _keys: &[&str], _token: &LockToken) -> Result<ReleaseOutcome> {
        Err(unsupported(self))
    }

    async fn renew_all(&self, _keys: &[&str], _token: &LockToken, _ttl: Duration) -> Result<RenewOutcome> {
        Err(unsupported(self))
    }
}
