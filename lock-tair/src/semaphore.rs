//! [`SemaphoreBackend`] on Tair: TairString has no per-member expiry, so the
//! semaphore runs the same Lua scripts as the redis-lua backend
//! (`lock_redis_family::kinds::semaphore`: holders' server-time deadlines in a
//! sorted set, permits and size in a hash, a fence counter; all keys in the
//! name's slot), one `EVALSHA` per operation (`EVAL` after `NOSCRIPT`), run
//! by [`crate::kinds`].
//!
//! With [`crate::ReplicaAck`], a grant WAITs like a mutex acquire (a
//! shortfall handled the same way) and a renewal WAITs too and counts only
//! once confirmed.

use std::time::Duration;

use async_trait::async_trait;
use lock_core::{AcquireOutcome, LockToken, PermitRequest, ReleaseOutcome, RenewOutcome, Result, SemaphoreBackend};
use lock_redis_family::kinds::semaphore as semaphore_lua;

use crate::TairBackend;

#[async_trait]
impl SemaphoreBackend for TairBackend {
    async fn acquire_permits(
        &self,
        name: &str,
        holder: &LockToken,
        request: PermitRequest,
        ttl: Duration,
    ) -> Result<AcquireOutcome> {
        semaphore_lua::acquire(self, name, holder, request, ttl).await
    }

    async fn release_permits(&self, name: &str, holder: &LockToken) -> Result<ReleaseOutcome> {
        semaphore_lua::release(self, name, holder).await
    }

    async fn renew_permits(&self, name: &str, holder: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        semaphore_lua::renew(self, name, holder, ttl).await
    }
}
