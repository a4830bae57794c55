//! Redlock and semaphores: not supported. A majority vote keeps *pairs* of
//! holders apart (any two majorities share a node), but it does not bound a
//! semaphore of N ≥ 2: with 3 nodes and 2 permits, three clients can hold
//! the node pairs AB, BC and AC, each a majority, each node within its
//! bound. So every operation answers [`Error::Unsupported`] and
//! [`Capabilities::semaphores`](lock_core::Capabilities::semaphores) is false
//! (N quorum-locked slots would be sound; not built yet).

use std::time::Duration;

use async_trait::async_trait;
use lock_core::raw::{PermitRequest, SemaphoreBackend};
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{Error, LockBackend, LockToken, Result};

use crate::Redlock;

fn unsupported(redlock: &Redlock) -> Error {
    Error::Unsupported {
        backend: redlock.capabilities().name,
        what: "leased semaphores: a majority vote does not bound a semaphore of 2 or more permits".to_owned(),
    }
}

#[async_trait]
impl SemaphoreBackend for Redlock {
    async fn acquire_permits(
        &self,
        _name: &str,
        _holder: &LockToken,
        _request: PermitRequest,
        _ttl: Duration,
    ) -> Result<AcquireOutcome> {
        Err(unsupported(self))
    }

    async fn release_permits(&self, _name: &str, _holder: &LockToken) -> Result<ReleaseOutcome> {
        Err(unsupported(self))
    }

    async fn renew_permits(&self, _name: &str, _holder: &LockToken, _ttl: Duration) -> Result<RenewOutcome> {
        Err(unsupported(self))
    }
}
