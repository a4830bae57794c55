//! [`MultiLockBackend`] on Tair: the shared scripts of
//! `lock_redis_family::kinds::multi` over the mutex's own keys (plain strings,
//! which `CAD`/`CAS` also accept). On a cluster all keys must share one slot
//! (else `InvalidArgument` before anything is sent). Refused under
//! [`crate::ReplicaAck`] (grants are not followed by `WAIT` here).

use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use fred::types::Value;
use fred::util::redis_keyslot;
use lock_core::options::{validate_key, validate_ttl};
use lock_core::{
    AcquireOutcome, Error, FencingToken, Lease, LockToken, MultiLockBackend, ReleaseOutcome, RenewOutcome, Result,
};
use lock_redis_family::kinds::multi as multi_lua;

use crate::DEFAULT_FENCE_PREFIX;
use crate::conn::{Access, NAME, unexpected_reply};
use crate::keys::fence_key;
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
        acquire: Script::new(multi_lua::ACQUIRE_ALL),
        release: Script::new(multi_lua::RELEASE_ALL),
        renew: Script::new(multi_lua::RENEW_ALL),
    })
}

impl TairBackend {
    fn check_multi(&self, set: &[&str]) -> Result<()> {
        if self.inner.ack.is_some() {
            return Err(Error::Unsupported {
                backend: NAME.into(),
                what: "multi-key locks with replica acknowledgement".to_owned(),
            });
        }
        let Some(first) = set.first() else {
            return Err(Error::invalid("a multi-key lock needs at least one key"));
        };
        set.iter().try_for_each(|k| validate_key(k))?;
        let slot = redis_keyslot(first.as_bytes());
        if self.inner.clustered && set.iter().any(|k| redis_keyslot(k.as_bytes()) != slot) {
            return Err(Error::invalid(format!(
                "multi-key lock over {set:?}: on a cluster every key must be in one hash slot; give them a common \
                 hash tag, e.g. {{account}}:1 and {{account}}:2"
            )));
        }
        Ok(())
    }
}

#[async_trait]
impl MultiLockBackend for TairBackend {
    async fn try_acquire_all(&self, set: &[&str], token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.check_multi(set)?;
        validate_ttl(ttl)?;
        let what = "EVAL (multi-key acquire)";
        // The mutex's fence counters (under the default prefix when the
        // mutex's fencing is off: a multi-key grant always carries its token).
        let prefix = self.inner.fence_prefix.as_deref().unwrap_or(DEFAULT_FENCE_PREFIX);
        let fences: Vec<String> = set.iter().map(|k| fence_key(prefix, k)).collect();
        let keys: Vec<&str> = set.iter().copied().chain(fences.iter().map(String::as_str)).collect();
        let reply = self
            .run_script(what, &scripts().acquire, &keys, vec![token_arg(token), px(ttl).into()])
            .await?;
        match &reply {
            Value::Array(items) => match items.as_slice() {
                [Value::Integer(1), Value::Integer(fence)] => Ok(AcquireOutcome::Acquired(
                    Lease::new().with_fencing_token(u64::try_from(*fence).ok().map(FencingToken)),
                )),
                [Value::Integer(0), Value::Integer(pttl)] => Ok(AcquireOutcome::Held {
                    retry_after: u64::try_from(*pttl).ok().map(Duration::from_millis),
                }),
                _ => Err(unexpected_reply(what, set[0], Access::Script, &reply)),
            },
            _ => Err(unexpected_reply(what, set[0], Access::Script, &reply)),
        }
    }

    async fn release_all(&self, set: &[&str], token: &LockToken) -> Result<ReleaseOutcome> {
        self.check_multi(set)?;
        let what = "EVAL (multi-key release)";
        match self
            .run_script(what, &scripts().release, set, vec![token_arg(token)])
            .await?
        {
            Value::Integer(1) => Ok(ReleaseOutcome::Released),
            Value::Integer(2) => Ok(ReleaseOutcome::HeldByOther),
            Value::Integer(0) => Ok(ReleaseOutcome::Missing),
            other => Err(unexpected_reply(what, set[0], Access::Script, &other)),
        }
    }

    async fn renew_all(&self, set: &[&str], token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.check_multi(set)?;
        validate_ttl(ttl)?;
        let what = "EVAL (multi-key renew)";
        match self
            .run_script(what, &scripts().renew, set, vec![token_arg(token), px(ttl).into()])
            .await?
        {
            Value::Integer(1) => Ok(RenewOutcome::Renewed),
            Value::Integer(2) => Ok(RenewOutcome::HeldByOther),
            Value::Integer(0) => Ok(RenewOutcome::Missing),
            other => Err(unexpected_reply(what, set[0], Access::Script, &other)),
        }
    }
}
