//! [`MultiLockBackend`] on Redis/Valkey: the shared scripts of
//! `lock_redis_family::kinds::multi`, one per operation, over the mutex's own
//! keys. On a cluster all keys must share one slot (one script touches them
//! all); otherwise the call fails with `InvalidArgument` before anything is
//! sent. With [`crate::ReplicaAck`], a grant WAITs like a mutex acquire (a
//! shortfall under `OnShortfall::ReleaseAndFail` gives the keys back and
//! fails the acquire) and a renewal WAITs too and counts only once
//! confirmed. With release
//! notifications on, the release announces each freed key that a mutex
//! waiter marked, as the mutex's release does
//! ([`crate::scripts::RELEASE_ALL_NOTIFY`]).

use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_redis::redis::Value;
use lock_core::options::{ttl_millis, validate_key, validate_ttl};
use lock_core::{
    AcquireOutcome, Error, FencingToken, Lease, LockToken, MultiLockBackend, ReleaseOutcome, RenewOutcome, Replication,
    Result,
};
use lock_redis_family::kinds::multi as multi_lua;

use crate::error::{Access, BACKEND, unexpected_reply};
use crate::keys::WakeKeys;
use crate::scripts::LuaScript;
use crate::{Call, OnShortfall, RedisLuaBackend, keys};

struct MultiScripts {
    acquire: LuaScript,
    release: LuaScript,
    release_notify: LuaScript,
    renew: LuaScript,
}

fn scripts() -> &'static MultiScripts {
    static SCRIPTS: OnceLock<MultiScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| MultiScripts {
        acquire: LuaScript::new(multi_lua::ACQUIRE_ALL),
        release: LuaScript::new(multi_lua::RELEASE_ALL),
        release_notify: LuaScript::new(crate::scripts::RELEASE_ALL_NOTIFY),
        renew: LuaScript::new(multi_lua::RENEW_ALL),
    })
}

impl RedisLuaBackend {
    fn check_multi(&self, set: &[&str]) -> Result<()> {
        let Some(first) = set.first() else {
            return Err(Error::invalid("a multi-key lock needs at least one key"));
        };
        set.iter()
            .try_for_each(|k| validate_key(k).and_then(|()| keys::check_user_key(k)))?;
        if self.inner.cluster && set.iter().any(|k| keys::slot(k) != keys::slot(first)) {
            return Err(Error::invalid(format!(
                "multi-key lock over {set:?}: on a cluster every key must be in one hash slot; give them a common \
                 hash tag, e.g. {{account}}:1 and {{account}}:2"
            )));
        }
        Ok(())
    }
}

#[async_trait]
impl MultiLockBackend for RedisLuaBackend {
    async fn try_acquire_all(&self, set: &[&str], token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.check_multi(set)?;
        validate_ttl(ttl)?;
        let hex = token.hex_bytes();
        let mut ms = itoa::Buffer::new();
        // The mutex's fence counters (written whatever the `fencing`
        // setting: a multi-key grant always carries its token).
        let fences: Vec<String> = set.iter().map(|k| RedisLuaBackend::fence_key(k)).collect();
        let keys: Vec<&str> = set.iter().copied().chain(fences.iter().map(String::as_str)).collect();
        let call = Call::Script {
            script: &scripts().acquire,
            keys: &keys,
            args: &[&hex, ms.format(ttl_millis(ttl)).as_bytes()],
        };
        let op = "multi-key acquire";
        // Under replica acknowledgement a grant WAITs like a mutex acquire.
        let (value, replication) = match &self.inner.replica_ack {
            Some(ack) => {
                let granted = |v: &Value| matches!(v, Value::Array(items) if items.first() == Some(&Value::Int(1)));
                self.inner.exec_acked(op, set[0], call, ack, granted, None).await?
            }
            None => (self.inner.exec(op, set[0], Access::Write, call).await?, None),
        };
        match &value {
            Value::Array(items) => match items.as_slice() {
                [Value::Int(1), Value::Int(fence)] => {
                    let fencing_token = u64::try_from(*fence).ok().map(FencingToken);
                    self.multi_granted(set, token, fencing_token, replication).await
                }
                [Value::Int(0), Value::Int(pttl)] => Ok(AcquireOutcome::Held {
                    retry_after: u64::try_from(*pttl).ok().map(Duration::from_millis),
                }),
                _ => Err(unexpected_reply(op, set[0], &value)),
            },
            _ => Err(unexpected_reply(op, set[0], &value)),
        }
    }

    async fn release_all(&self, set: &[&str], token: &LockToken) -> Result<ReleaseOutcome> {
        self.check_multi(set)?;
        let hex = token.hex_bytes();
        // Notifications are standalone only: the markers need no slot.
        let helpers: Vec<WakeKeys>;
        let keys_and_helpers: Vec<&str>;
        let (script, keys) = if self.inner.notifier.is_some() {
            helpers = set.iter().map(|k| WakeKeys::new(k)).collect();
            keys_and_helpers = set
                .iter()
                .copied()
                .chain(helpers.iter().flat_map(WakeKeys::names))
                .collect();
            (&scripts().release_notify, keys_and_helpers.as_slice())
        } else {
            (&scripts().release, set)
        };
        let call = Call::Script {
            script,
            keys,
            args: &[&hex],
        };
        let op = "multi-key release";
        match self.inner.exec(op, set[0], Access::Write, call).await? {
            Value::Int(1) => Ok(ReleaseOutcome::Released),
            Value::Int(2) => Ok(ReleaseOutcome::HeldByOther),
            Value::Int(0) => Ok(ReleaseOutcome::Missing),
            other => Err(unexpected_reply(op, set[0], &other)),
        }
    }

    async fn renew_all(&self, set: &[&str], token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.check_multi(set)?;
        validate_ttl(ttl)?;
        let hex = token.hex_bytes();
        let mut ms = itoa::Buffer::new();
        let call = Call::Script {
            script: &scripts().renew,
            keys: set,
            args: &[&hex, ms.format(ttl_millis(ttl)).as_bytes()],
        };
        let op = "multi-key renew";
        // Under replica acknowledgement a renewal counts once confirmed.
        let (value, replication) = self
            .inner
            .exec_renewal(op, set[0], call, |v| *v == Value::Int(1))
            .await?;
        let outcome = match value {
            Value::Int(1) => RenewOutcome::Renewed,
            Value::Int(2) => RenewOutcome::HeldByOther,
            Value::Int(0) => RenewOutcome::Missing,
            other => return Err(unexpected_reply(op, set[0], &other)),
        };
        self.inner.counted_renewal(set[0], outcome, replication)
    }
}

impl RedisLuaBackend {
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
            Some(ack),
            Some(Replication::Unconfirmed {
                acknowledged,
                requested,
            }),
        ) = (&self.inner.replica_ack, replication)
            && ack.on_shortfall == OnShortfall::ReleaseAndFail
        {
            // Boxed: a shortfall is rare, and every acquire's future would carry a release's.
            let released = Box::pin(self.release_all(set, token)).await;
            let message = format!(
                "took the keys {set:?} but only {acknowledged} of {requested} replicas acknowledged within {:?}; {}",
                ack.timeout,
                match &released {
                    Ok(_) => "gave them back".to_owned(),
                    Err(e) => format!("giving them back failed ({e})"),
                }
            );
            return Err(match released {
                Ok(_) => Error::backend(BACKEND, message),
                Err(_) => Error::outcome_unknown(BACKEND, message),
            });
        }
        Ok(AcquireOutcome::Acquired(
            Lease::new()
                .with_fencing_token(fencing_token)
                .with_replication(replication.unwrap_or_default()),
        ))
    }
}
