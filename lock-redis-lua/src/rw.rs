//! [`RwLockBackend`] on Redis/Valkey: the shared scripts of
//! `lock_redis_family::kinds::rw` (readers' server-time deadlines in a sorted
//! set, the writer and a waiting writer's intent as strings with TTLs; all
//! keys in the name's slot), one per operation, run by [`crate::kinds`].
//! With [`crate::ReplicaAck`], grants and renewals WAIT as the mutex's do
//! (a renewal counts only once confirmed).

use std::time::Duration;

use async_trait::async_trait;
use lock_core::{AcquireOutcome, LockToken, ReleaseOutcome, RenewOutcome, Result, RwLockBackend, RwMode};
use lock_redis_family::kinds::rw as rw_lua;

use crate::RedisLuaBackend;

#[async_trait]
impl RwLockBackend for RedisLuaBackend {
    async fn try_acquire_rw(
        &self,
        name: &str,
        mode: RwMode,
        waiting: bool,
        token: &LockToken,
        ttl: Duration,
    ) -> Result<AcquireOutcome> {
        rw_lua::try_acquire(self, name, mode, waiting, token, ttl).await
    }

    async fn release_rw(&self, name: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        rw_lua::release(self, name, token).await
    }

    async fn renew_rw(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        rw_lua::renew(self, name, token, ttl).await
    }
}
