//! Redlock and leader election: not supported. A quorum could keep two
//! leaders apart, but there is no strictly increasing term across
//! independent nodes (a max over node counters is not monotonic when nodes
//! lose data), and the nodes are plain [`LockBackend`]s without identities;
//! so every call answers [`Error::Unsupported`] and
//! [`Capabilities::leader_election`](lock_core::Capabilities::leader_election)
//! is false.

use std::time::Duration;

use async_trait::async_trait;
use lock_core::raw::ElectionBackend;
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{Error, LeaderInfo, LockBackend, LockToken, Result};

use crate::Redlock;

fn unsupported(redlock: &Redlock) -> Error {
    Error::Unsupported {
        backend: redlock.capabilities().name,
        what: "leader election (no strict term across independent nodes)".to_owned(),
    }
}

#[async_trait]
impl ElectionBackend for Redlock {
    async fn try_lead(
        &self,
        _name: &str,
        _token: &LockToken,
        _identity: &[u8],
        _ttl: Duration,
    ) -> Result<AcquireOutcome> {
        Err(unsupported(self))
    }

    async fn resign(&self, _name: &str, _token: &LockToken) -> Result<ReleaseOutcome> {
        Err(unsupported(self))
    }

    async fn renew_lead(&self, _name: &str, _token: &LockToken, _ttl: Duration) -> Result<RenewOutcome> {
        Err(unsupported(self))
    }

    async fn leader(&self, _name: &str) -> Result<Option<LeaderInfo>> {
        Err(unsupported(self))
    }
}
