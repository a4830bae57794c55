//! [`SemaphoreBackend`] on Redis/Valkey: the shared scripts of
//! `lock_core::kinds::semaphore_lua` (a sorted set of holder → server-time
//! deadline, a hash of permits and size, a fence counter; all in the name's
//! slot), one script per operation. With [`crate::ReplicaAck`], a grant
//! WAITs like a mutex acquire and a shortfall is handled the same way; a
//! renewal WAITs too and counts only once confirmed.

use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_redis::redis::Value;
use lock_core::kinds::semaphore_lua::{self as lua, SemaphoreKeys};
use lock_core::options::{ttl_millis, validate_key, validate_ttl};
use lock_core::{
    AcquireOutcome, Error, LockToken, OnShortfall, PermitRequest, ReleaseOutcome, RenewOutcome, Replication, Result,
    SemaphoreBackend,
};

use crate::error::{Access, BACKEND, unexpected_reply};
use crate::scripts::LuaScript;
use crate::{Call, RedisLuaBackend, keys};

struct SemaphoreScripts {
    acquire: LuaScript,
    release: LuaScript,
    renew: LuaScript,
}

fn scripts() -> &'static SemaphoreScripts {
    static SCRIPTS: OnceLock<SemaphoreScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| SemaphoreScripts {
        acquire: LuaScript::new(lua::ACQUIRE),
        release: LuaScript::new(lua::RELEASE),
        renew: LuaScript::new(lua::RENEW),
    })
}

fn ints(value: &Value) -> Option<Vec<i64>> {
    match value {
        Value::Array(items) => items
            .iter()
            .map(|v| match v {
                Value::Int(n) => Some(*n),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

#[async_trait]
impl SemaphoreBackend for RedisLuaBackend {
    async fn acquire_permits(
        &self,
        name: &str,
        holder: &LockToken,
        request: PermitRequest,
        ttl: Duration,
    ) -> Result<AcquireOutcome> {
        validate_key(name)?;
        validate_ttl(ttl)?;
        request.validate()?;
        let keys = SemaphoreKeys::prefixed(keys::RESERVED_PREFIX, name)?;
        let hex = holder.hex_bytes();
        let (mut ms, mut size, mut permits) = (itoa::Buffer::new(), itoa::Buffer::new(), itoa::Buffer::new());
        let args: [&[u8]; 4] = [
            &hex,
            ms.format(ttl_millis(ttl)).as_bytes(),
            size.format(u64::from(request.size)).as_bytes(),
            permits.format(u64::from(request.permits)).as_bytes(),
        ];
        let call = Call::Script {
            script: &scripts().acquire,
            keys: &[&keys.holders, &keys.info, &keys.fence, &keys.gone],
            args: &args,
        };
        let i = &self.inner;
        let op = "semaphore acquire";
        let (value, replication) = match &i.replica_ack {
            Some(ack) => {
                let granted = |v: &Value| ints(v).is_some_and(|r| r.first() == Some(&1));
                i.exec_acked(op, &keys.holders, call, ack, granted, None).await?
            }
            None => (i.exec(op, &keys.holders, Access::Write, call).await?, None),
        };
        let reply = ints(&value).ok_or_else(|| unexpected_reply(op, name, &value))?;
        let outcome = lua::acquire_outcome(BACKEND, name, request.size, &reply, i.fencing)?;
        match (outcome, replication, &i.replica_ack) {
            (
                AcquireOutcome::Acquired(_),
                Some(Replication::Unconfirmed {
                    acknowledged,
                    requested,
                }),
                Some(ack),
            ) if ack.on_shortfall == OnShortfall::ReleaseAndFail => {
                let released = self.release_permits(name, holder).await;
                let message = format!(
                    "took permits of {name:?} but only {acknowledged} of {requested} replicas acknowledged within \
                     {:?}; {}",
                    ack.timeout,
                    match &released {
                        Ok(_) => "gave them back".to_owned(),
                        Err(e) => format!("giving them back failed ({e})"),
                    }
                );
                Err(match released {
                    Ok(_) => Error::backend(BACKEND, message),
                    Err(_) => Error::outcome_unknown(BACKEND, message),
                })
            }
            (AcquireOutcome::Acquired(lease), replication, _) => Ok(AcquireOutcome::Acquired(
                lease.with_replication(replication.unwrap_or_default()),
            )),
            (held, _, _) => Ok(held),
        }
    }

    async fn release_permits(&self, name: &str, holder: &LockToken) -> Result<ReleaseOutcome> {
        validate_key(name)?;
        let keys = SemaphoreKeys::prefixed(keys::RESERVED_PREFIX, name)?;
        let hex = holder.hex_bytes();
        let call = Call::Script {
            script: &scripts().release,
            keys: &[&keys.holders, &keys.info, &keys.gone],
            args: &[&hex],
        };
        match self
            .inner
            .exec("semaphore release", &keys.holders, Access::Write, call)
            .await?
        {
            Value::Int(n) => lua::release_outcome(BACKEND, name, n),
            other => Err(unexpected_reply("semaphore release", name, &other)),
        }
    }

    async fn renew_permits(&self, name: &str, holder: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        validate_key(name)?;
        validate_ttl(ttl)?;
        let keys = SemaphoreKeys::prefixed(keys::RESERVED_PREFIX, name)?;
        let hex = holder.hex_bytes();
        let mut ms = itoa::Buffer::new();
        let call = Call::Script {
            script: &scripts().renew,
            keys: &[&keys.holders, &keys.info],
            args: &[&hex, ms.format(ttl_millis(ttl)).as_bytes()],
        };
        let i = &self.inner;
        let op = "semaphore renew";
        // With replica acknowledgement a renewal counts only once WAIT
        // confirms it, as for the mutex.
        let (value, replication) = match &i.replica_ack {
            Some(ack) => {
                i.exec_acked(op, &keys.holders, call, ack, |v| *v == Value::Int(1), None)
                    .await?
            }
            None => (i.exec(op, &keys.holders, Access::Write, call).await?, None),
        };
        let outcome = match value {
            Value::Int(n) => lua::renew_outcome(BACKEND, name, n)?,
            other => return Err(unexpected_reply(op, name, &other)),
        };
        match (outcome, i.renewal_shortfall(name, replication)) {
            (RenewOutcome::Renewed, Some(e)) => Err(e),
            _ => Ok(outcome),
        }
    }
}
