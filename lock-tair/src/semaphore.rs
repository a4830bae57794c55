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
use fred::types::{ClusterHash, CustomCommand, Value};
use fred::util::redis_keyslot;
use lock_core::kinds::semaphore_lua::{self as lua, SemaphoreKeys};
use lock_core::options::{validate_key, validate_ttl};
use lock_core::{
    AcquireOutcome, Error, LockToken, PermitRequest, ReleaseOutcome, RenewOutcome, Result, SemaphoreBackend,
};

use crate::conn::{Access, NAME, is_no_script, map_error, send, unexpected_reply};
use crate::{TairBackend, px, token_arg};

/// A script and its SHA1, computed once.
struct Script {
    source: &'static str,
    sha: String,
}

struct Scripts {
    acquire: Script,
    release: Script,
    renew: Script,
}

fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| {
        let script = |source: &'static str| Script {
            source,
            sha: fred::util::sha1_hash(source),
        };
        Scripts {
            acquire: script(lua::ACQUIRE),
            release: script(lua::RELEASE),
            renew: script(lua::RENEW),
        }
    })
}

impl TairBackend {
    /// `EVALSHA` of `script` on `keys` (one slot) with `args`, `EVAL` after
    /// `NOSCRIPT`. Any failure is outcome-unknown (a script may have written
    /// before failing).
    async fn semaphore_script(&self, what: &str, script: &Script, keys: &[&str], args: Vec<Value>) -> Result<Value> {
        if self.inner.ack.is_some() {
            return Err(unsupported());
        }
        let first = keys.first().copied().unwrap_or_default();
        let mut tail: Vec<Value> = Vec::with_capacity(1 + keys.len() + args.len());
        tail.push(i64::try_from(keys.len()).unwrap_or(i64::MAX).into());
        tail.extend(keys.iter().map(|&k| Value::from(k)));
        tail.extend(args);
        let slot = ClusterHash::Custom(redis_keyslot(first.as_bytes()));
        let client = self.inner.commands.next();
        let mut with_sha = vec![Value::from(script.sha.as_str())];
        with_sha.extend(tail.iter().cloned());
        match send(
            client,
            &CustomCommand::new_static("EVALSHA", slot.clone(), false),
            with_sha,
        )
        .await
        {
            Err(e) if is_no_script(&e) => {
                // Not run: the script cache is empty (new or flushed server).
                let mut with_source = vec![Value::from(script.source)];
                with_source.extend(tail);
                send(client, &CustomCommand::new_static("EVAL", slot, false), with_source).await
            }
            other => other,
        }
        .map_err(|e| map_error(what, first, Access::Script, e))
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
        let keys = SemaphoreKeys::new(name)?;
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
        let keys = SemaphoreKeys::new(name)?;
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
        let keys = SemaphoreKeys::new(name)?;
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
