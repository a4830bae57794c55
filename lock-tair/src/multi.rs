//! [`MultiLockBackend`] on Tair: the shared scripts of
//! `lock_redis_family::kinds::multi` over the mutex's own keys (plain strings,
//! which `CAD`/`CAS` also accept). On a cluster all keys must share one slot
//! (else `InvalidArgument` before anything is sent). Under
//! [`crate::ReplicaAck`] a grant and a renewal run on a dedicated write
//! connection and WAIT there, as the mutex's do: a grant too few replicas
//! acknowledged is given back and fails under `OnShortfall::ReleaseAndFail`,
//! a renewal counts only once confirmed.

use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use fred::types::Value;
use fred::util::redis_keyslot;
use lock_core::options::{validate_key, validate_ttl};
use lock_core::{
    AcquireOutcome, Error, FencingToken, Lease, LockToken, MultiLockBackend, OnShortfall, ReleaseOutcome, RenewOutcome,
    Replication, Result,
};
use lock_redis_family::kinds::multi as multi_lua;

use crate::DEFAULT_FENCE_PREFIX;
use crate::conn::{Access, NAME, map_error, unexpected_reply};
use crate::keys::fence_key;
use crate::replica_ack::renewal_shortfall;
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
        let granted = |v: &Value| matches!(v, Value::Array(items) if items.first() == Some(&Value::Integer(1)));
        let (reply, replication) = self
            .run_acked(
                what,
                &scripts().acquire,
                &keys,
                vec![token_arg(token), px(ttl).into()],
                granted,
            )
            .await?;
        match &reply {
            Value::Array(items) => match items.as_slice() {
                [Value::Integer(1), Value::Integer(fence)] => {
                    let fencing_token = u64::try_from(*fence).ok().map(FencingToken);
                    self.multi_granted(set, token, fencing_token, replication).await
                }
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
        let (reply, replication) = self
            .run_acked(
                what,
                &scripts().renew,
                set,
                vec![token_arg(token), px(ttl).into()],
                |v| *v == Value::Integer(1),
            )
            .await?;
        match reply {
            Value::Integer(1) => match (replication, &self.inner.ack) {
                (Some(Replication::Unconfirmed { acknowledged, .. }), Some((_, ack))) => {
                    renewal_shortfall(ack, acknowledged, set[0]).map(|()| RenewOutcome::Renewed)
                }
                _ => Ok(RenewOutcome::Renewed),
            },
            Value::Integer(2) => Ok(RenewOutcome::HeldByOther),
            Value::Integer(0) => Ok(RenewOutcome::Missing),
            other => Err(unexpected_reply(what, set[0], Access::Script, &other)),
        }
    }
}

impl TairBackend {
    /// Runs a multi-key write script; under replica acknowledgement on a
    /// dedicated write connection, followed there by `WAIT` when `wrote`
    /// says it wrote.
    async fn run_acked(
        &self,
        what: &str,
        script: &Script,
        keys: &[&str],
        args: Vec<Value>,
        wrote: impl Fn(&Value) -> bool + Send,
    ) -> Result<(Value, Option<Replication>)> {
        if self.inner.ack.is_none() {
            return Ok((self.run_script(what, script, keys, args).await?, None));
        }
        let mut writer = self.writer();
        let first = keys.first().copied().unwrap_or_default();
        let reply = self
            .run_script_on(writer.client, script, keys, args, false)
            .await
            .map_err(|e| map_error(what, first, Access::Script, e))?;
        let Some(ack) = writer.ack.filter(|_| wrote(&reply)) else {
            return Ok((reply, None));
        };
        let acknowledged = self.wait_for_replicas(&mut writer, first, ack).await;
        let replication = if acknowledged >= ack.replicas {
            Replication::Confirmed { replicas: acknowledged }
        } else {
            Replication::Unconfirmed {
                acknowledged,
                requested: ack.replicas,
            }
        };
        Ok((reply, Some(replication)))
    }

    /// A granted multi-key acquire: the lease, unless too few replicas
    /// acknowledged it and the options say to give the keys back and fail
    /// (as for the mutex).
    async fn multi_granted(
        &self,
        set: &[&str],
        token: &LockToken,
        fencing_token: Option<FencingToken>,
        replication: Option<Replication>,
    ) -> Result<AcquireOutcome> {
        if let (
            Some((_, ack)),
            Some(Replication::Unconfirmed {
                acknowledged,
                requested,
            }),
        ) = (&self.inner.ack, replication)
            && ack.on_shortfall == OnShortfall::ReleaseAndFail
        {
            let message = format!(
                "only {acknowledged} of {requested} replicas acknowledged the multi-key acquire of {set:?} within {:?}",
                ack.timeout
            );
            return match Box::pin(self.release_all(set, token)).await {
                Ok(_) => Err(Error::backend(NAME, format!("{message}; gave the keys back"))),
                Err(e) => {
                    Err(Error::outcome_unknown(NAME, format!("{message}; giving them back failed")).with_source(e))
                }
            };
        }
        Ok(AcquireOutcome::Acquired(
            Lease::new()
                .with_fencing_token(fencing_token)
                .with_replication(replication.unwrap_or_default()),
        ))
    }
}
