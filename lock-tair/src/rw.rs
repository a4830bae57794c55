//! [`RwLockBackend`] on Tair: the shared scripts of
//! `lock_core::kinds::rw_lua`, one per operation. Refused under
//! [`crate::ReplicaAck`] (grants are not followed by `WAIT` here).

use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use fred::types::Value;
use lock_core::kinds::rw_lua::{self, RwKeys};
use lock_core::options::{validate_key, validate_ttl};
use lock_core::{AcquireOutcome, Error, Lease, LockToken, ReleaseOutcome, RenewOutcome, Result, RwLockBackend, RwMode};

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
        acquire: Script::new(rw_lua::ACQUIRE),
        release: Script::new(rw_lua::RELEASE),
        renew: Script::new(rw_lua::RENEW),
    })
}

impl TairBackend {
    fn rw_keys(&self, name: &str) -> Result<RwKeys> {
        if self.inner.ack.is_some() {
            return Err(Error::Unsupported {
                backend: NAME.into(),
                what: "read-write locks with replica acknowledgement".to_owned(),
            });
        }
        validate_key(name)?;
        RwKeys::prefixed(crate::keys::KIND_PREFIX, name)
    }
}

#[async_trait]
impl RwLockBackend for TairBackend {
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
        let mode = match (mode, waiting) {
            (RwMode::Read, _) => "r",
            (RwMode::Write, true) => "w",
            (RwMode::Write, false) => "W",
        };
        let what = "EVAL (read-write acquire)";
        let reply = self
            .run_script(
                what,
                &scripts().acquire,
                &[&keys.readers, &keys.writer, &keys.intent],
                vec![token_arg(token), px(ttl).into(), mode.into()],
            )
            .await?;
        match &reply {
            Value::Array(items) => match items.as_slice() {
                [Value::Integer(1)] => Ok(AcquireOutcome::Acquired(Lease::new())),
                [Value::Integer(0), Value::Integer(wait)] => Ok(AcquireOutcome::Held {
                    retry_after: u64::try_from(*wait).ok().map(Duration::from_millis),
                }),
                _ => Err(unexpected_reply(what, name, Access::Script, &reply)),
            },
            _ => Err(unexpected_reply(what, name, Access::Script, &reply)),
        }
    }

    async fn release_rw(&self, name: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        let keys = self.rw_keys(name)?;
        let what = "EVAL (read-write release)";
        match self
            .run_script(
                what,
                &scripts().release,
                &[&keys.readers, &keys.writer, &keys.intent],
                vec![token_arg(token)],
            )
            .await?
        {
            Value::Integer(1) => Ok(ReleaseOutcome::Released),
            Value::Integer(0) => Ok(ReleaseOutcome::Missing),
            other => Err(unexpected_reply(what, name, Access::Script, &other)),
        }
    }

    async fn renew_rw(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        let keys = self.rw_keys(name)?;
        validate_ttl(ttl)?;
        let what = "EVAL (read-write renew)";
        match self
            .run_script(
                what,
                &scripts().renew,
                &[&keys.readers, &keys.writer],
                vec![token_arg(token), px(ttl).into()],
            )
            .await?
        {
            Value::Integer(1) => Ok(RenewOutcome::Renewed),
            Value::Integer(0) => Ok(RenewOutcome::Missing),
            other => Err(unexpected_reply(what, name, Access::Script, &other)),
        }
    }
}
