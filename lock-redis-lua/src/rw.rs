//! [`RwLockBackend`] on Redis/Valkey: the shared scripts of
//! `lock_core::kinds::rw_lua` (readers' server-time deadlines in a sorted
//! set, the writer and a waiting writer's intent as strings with TTLs; all
//! keys in the name's slot), one per operation. Refused under
//! [`crate::ReplicaAck`] (grants are not followed by `WAIT` here).

use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_redis::redis::Value;
use lock_core::kinds::rw_lua::{self, RwKeys};
use lock_core::options::{ttl_millis, validate_key, validate_ttl};
use lock_core::{AcquireOutcome, Error, Lease, LockToken, ReleaseOutcome, RenewOutcome, Result, RwLockBackend, RwMode};

use crate::error::{Access, BACKEND, unexpected_reply};
use crate::scripts::LuaScript;
use crate::{Call, RedisLuaBackend, keys};

struct RwScripts {
    acquire: LuaScript,
    release: LuaScript,
    renew: LuaScript,
}

fn scripts() -> &'static RwScripts {
    static SCRIPTS: OnceLock<RwScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| RwScripts {
        acquire: LuaScript::new(rw_lua::ACQUIRE),
        release: LuaScript::new(rw_lua::RELEASE),
        renew: LuaScript::new(rw_lua::RENEW),
    })
}

impl RedisLuaBackend {
    fn rw_keys(&self, name: &str) -> Result<RwKeys> {
        if self.inner.replica_ack.is_some() {
            return Err(Error::Unsupported {
                backend: BACKEND.to_owned(),
                what: "read-write locks with replica acknowledgement".to_owned(),
            });
        }
        validate_key(name)?;
        RwKeys::prefixed(keys::RESERVED_PREFIX, name)
    }
}

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
        let keys = self.rw_keys(name)?;
        validate_ttl(ttl)?;
        let hex = token.hex_bytes();
        let mut ms = itoa::Buffer::new();
        let mode: &[u8] = match (mode, waiting) {
            (RwMode::Read, _) => b"r",
            (RwMode::Write, true) => b"w",
            (RwMode::Write, false) => b"W",
        };
        let call = Call::Script {
            script: &scripts().acquire,
            keys: &[&keys.readers, &keys.writer, &keys.intent],
            args: &[&hex, ms.format(ttl_millis(ttl)).as_bytes(), mode],
        };
        let op = "read-write acquire";
        let value = self.inner.exec(op, &keys.readers, Access::Write, call).await?;
        match &value {
            Value::Array(items) => match items.as_slice() {
                [Value::Int(1)] => Ok(AcquireOutcome::Acquired(Lease::new())),
                [Value::Int(0), Value::Int(wait)] => Ok(AcquireOutcome::Held {
                    retry_after: u64::try_from(*wait).ok().map(Duration::from_millis),
                }),
                _ => Err(unexpected_reply(op, name, &value)),
            },
            _ => Err(unexpected_reply(op, name, &value)),
        }
    }

    async fn release_rw(&self, name: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        let keys = self.rw_keys(name)?;
        let hex = token.hex_bytes();
        let call = Call::Script {
            script: &scripts().release,
            keys: &[&keys.readers, &keys.writer, &keys.intent],
            args: &[&hex],
        };
        match self
            .inner
            .exec("read-write release", &keys.readers, Access::Write, call)
            .await?
        {
            Value::Int(1) => Ok(ReleaseOutcome::Released),
            Value::Int(0) => Ok(ReleaseOutcome::Missing),
            other => Err(unexpected_reply("read-write release", name, &other)),
        }
    }

    async fn renew_rw(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        let keys = self.rw_keys(name)?;
        validate_ttl(ttl)?;
        let hex = token.hex_bytes();
        let mut ms = itoa::Buffer::new();
        let call = Call::Script {
            script: &scripts().renew,
            keys: &[&keys.readers, &keys.writer],
            args: &[&hex, ms.format(ttl_millis(ttl)).as_bytes()],
        };
        match self
            .inner
            .exec("read-write renew", &keys.readers, Access::Write, call)
            .await?
        {
            Value::Int(1) => Ok(RenewOutcome::Renewed),
            Value::Int(0) => Ok(RenewOutcome::Missing),
            other => Err(unexpected_reply("read-write renew", name, &other)),
        }
    }
}
