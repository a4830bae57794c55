//! [`SemaphoreBackend`] on Redis/Valkey: the shared scripts of
//! `lock_redis_family::kinds::semaphore` (a sorted set of holder → server-time
//! deadline, a hash of permits and size, a fence counter; all in the name's
//! slot), one script per operation, run by [`crate::kinds`]. With
//! [`crate::ReplicaAck`], a grant WAITs like a mutex acquire and a shortfall
//! is handled the same way; a renewal WAITs too and counts only once
//! confirmed.

use std::time::Duration;

use async_trait::async_trait;
use lock_core::{AcquireOutcome, LockToken, PermitRequest, ReleaseOutcome, RenewOutcome, Result, SemaphoreBackend};
use lock_redis_family::kinds::semaphore as semaphore_lua;

use crate::RedisLuaBackend;

#[async_trait]
impl SemaphoreBackend for RedisLuaBackend {
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
