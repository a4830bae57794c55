//! [`SemaphoreBackend`] on Tair: TairString has no per-member expiry, so the
//! semaphore runs the same Lua scripts as the redis-lua backend
//! (`lock_core::kinds::semaphore_lua`: holders' server-time deadlines in a
//! sorted set, permits and size in a hash, a fence counter; all keys in the
//! name's slot), one `EVALSHA` per operation (`EVAL` after `NOSCRIPT`).
//!
//! Not with [`crate::ReplicaAck`]: grants are not followed by `WAIT` here, so
//! a backend built with it says `semaphores: false` and refuses with
//! [`Error::Unsupported`] rather than grant permits a failover could lose
//! unnoticed.

use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use fred::types::Value;
use lock_core::kinds::semaphore_lua::{self as lua, SemaphoreKeys};
use lock_core::options::{validate_key, validate_ttl};
use lock_core::{
    AcquireOutcome, Error, LockToken, PermitRequest, ReleaseOutcome, RenewOutcome, Result, SemaphoreBackend,
};

use crate::conn::{Access, NAME, unexpected_reply};
use crate::script::Script;
use crate::{TairBackend, px, token_arg};

struct Scripts {
    acquire: Script,
    release: Script,
    renew: Script,
}

fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| Scripts {
        acquire: Script::new(lua::ACQUIRE),
        release: Script::new(lua::RELEASE),
        renew: Script::new(lua::RENEW),
    })
}

impl TairBackend {
    /// Runs a semaphore script (refused under replica acknowledgement).
    async fn semaphore_script(&self, what: &str, script: &Script, keys: &[&str], args: Vec<Value>) -> Result<Value> {
        if self.inner.ack.is_some() {
            return Err(unsupported());
        }
        self.run_script(what, script, keys, args).await
    }
}

fn unsupported() -> Error {
    Error::Unsupported {
        backend: NAME.into(),
        what: "leased semaphores with replica acknowledgement (use a backend without ReplicaAck)".to_owned(),
    }
}

fn ints(value: &Value) -> Option<Vec<i64>> {
    match value {
        Value::Array(items) => items
            .iter()
            .map(|v| match v {
                Value::Integer(n) => Some(*n),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

#[async_trait]
impl SemaphoreBackend for TairBackend {
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
        let keys = SemaphoreKeys::prefixed(crate::keys::KIND_PREFIX, name)?;
        let what = "EVAL (semaphore acquire)";
        let args = vec![
            token_arg(holder),
            px(ttl).into(),
            i64::from(request.size).into(),
            i64::from(request.permits).into(),
        ];
        let reply = self
            .semaphore_script(
                what,
                &scripts().acquire,
                &[&keys.holders, &keys.info, &keys.fence, &keys.gone],
                args,
            )
            .await?;
        let codes = ints(&reply).ok_or_else(|| unexpected_reply(what, name, Access::Script, &reply))?;
        lua::acquire_outcome(NAME, name, request.size, &codes, self.inner.fence_prefix.is_some())
    }

    async fn release_permits(&self, name: &str, holder: &LockToken) -> Result<ReleaseOutcome> {
        validate_key(name)?;
        let keys = SemaphoreKeys::prefixed(crate::keys::KIND_PREFIX, name)?;
        let what = "EVAL (semaphore release)";
        let reply = self
            .semaphore_script(
                what,
                &scripts().release,
                &[&keys.holders, &keys.info, &keys.gone],
                vec![token_arg(holder)],
            )
            .await?;
        match reply {
            Value::Integer(n) => lua::release_outcome(NAME, name, n),
            other => Err(unexpected_reply(what, name, Access::Script, &other)),
        }
    }

    async fn renew_permits(&self, name: &str, holder: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        validate_key(name)?;
        validate_ttl(ttl)?;
        let keys = SemaphoreKeys::prefixed(crate::keys::KIND_PREFIX, name)?;
        let what = "EVAL (semaphore renew)";
        let reply = self
            .semaphore_script(
                what,
                &scripts().renew,
                &[&keys.holders, &keys.info],
                vec![token_arg(holder), px(ttl).into()],
            )
            .await?;
        match reply {
            Value::Integer(n) => lua::renew_outcome(NAME, name, n),
            other => Err(unexpected_reply(what, name, Access::Script, &other)),
        }
    }
}
