//! [`ElectionBackend`] on Redis/Valkey: the shared scripts of
//! `lock_core::kinds::election_lua` (the leader's hash with its TTL, a term
//! counter without one; both in the name's slot). `leader` is one `HMGET`.
//! Refused under [`crate::ReplicaAck`] (grants are not followed by `WAIT`).
//! With release notifications on, a win and a resignation are published on
//! the leader key's release channel, so `observe` wakes at once (an expiry
//! is seen at its next poll).

use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_redis::redis::{self, Value};
use lock_core::kinds::election::validate_identity;
use lock_core::kinds::election_lua::{self, ElectionKeys};
use lock_core::options::{ttl_millis, validate_key, validate_ttl};
use lock_core::{
    AcquireOutcome, ElectionBackend, Error, FencingToken, LeaderInfo, Lease, LockToken, ReleaseOutcome, RenewOutcome,
    Result,
};

use crate::error::{Access, BACKEND, unexpected_reply};
use crate::replies::bytes_of;
use crate::scripts::LuaScript;
use crate::{Call, RedisLuaBackend, keys, notify};

struct ElectionScripts {
    lead: LuaScript,
    resign: LuaScript,
    renew: LuaScript,
}

fn scripts() -> &'static ElectionScripts {
    static SCRIPTS: OnceLock<ElectionScripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| ElectionScripts {
        lead: LuaScript::new(election_lua::LEAD),
        resign: LuaScript::new(election_lua::RESIGN),
        renew: LuaScript::new(election_lua::RENEW),
    })
}

impl RedisLuaBackend {
    fn election_keys(&self, name: &str) -> Result<ElectionKeys> {
        if self.inner.replica_ack.is_some() {
            return Err(Error::Unsupported {
                backend: BACKEND.to_owned(),
                what: "leader election with replica acknowledgement".to_owned(),
            });
        }
        validate_key(name)?;
        ElectionKeys::prefixed(keys::RESERVED_PREFIX, name)
    }

    /// Where wins and resignations of the leader key `lead` are announced,
    /// when notifications are on.
    fn leader_channel(&self, lead: &str) -> Option<String> {
        self.inner.notifier.as_ref().map(|_| notify::leader_channel(lead))
    }
}

fn owner_code(op: &str, name: &str, value: &Value) -> Result<i64> {
    match value {
        Value::Int(n @ 0..=2) => Ok(*n),
        other => Err(unexpected_reply(op, name, other)),
    }
}

#[async_trait]
impl ElectionBackend for RedisLuaBackend {
    async fn try_lead(&self, name: &str, token: &LockToken, identity: &[u8], ttl: Duration) -> Result<AcquireOutcome> {
        let keys = self.election_keys(name)?;
        validate_ttl(ttl)?;
        validate_identity(identity)?;
        let hex = token.hex_bytes();
        let mut ms = itoa::Buffer::new();
        let channel = self.leader_channel(&keys.lead);
        let ms = ms.format(ttl_millis(ttl)).as_bytes();
        let with_channel;
        let args: &[&[u8]] = match &channel {
            Some(c) => {
                with_channel = [&hex[..], identity, ms, c.as_bytes()];
                &with_channel
            }
            None => &[&hex, identity, ms],
        };
        let call = Call::Script {
            script: &scripts().lead,
            keys: &[&keys.lead, &keys.term],
            args,
        };
        let op = "campaign";
        let value = self.inner.exec(op, &keys.lead, Access::Write, call).await?;
        match &value {
            Value::Array(items) => match items.as_slice() {
                [Value::Int(1), Value::Int(term)] => Ok(AcquireOutcome::Acquired(
                    Lease::new().with_fencing_token(Some(FencingToken(term.unsigned_abs()))),
                )),
                [Value::Int(0), Value::Int(pttl)] => Ok(AcquireOutcome::Held {
                    retry_after: u64::try_from(*pttl).ok().map(Duration::from_millis),
                }),
                _ => Err(unexpected_reply(op, name, &value)),
            },
            _ => Err(unexpected_reply(op, name, &value)),
        }
    }

    async fn resign(&self, name: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        let keys = self.election_keys(name)?;
        let hex = token.hex_bytes();
        let channel = self.leader_channel(&keys.lead);
        let with_channel;
        let args: &[&[u8]] = match &channel {
            Some(c) => {
                with_channel = [&hex[..], c.as_bytes()];
                &with_channel
            }
            None => &[&hex],
        };
        let call = Call::Script {
            script: &scripts().resign,
            keys: &[&keys.lead],
            args,
        };
        let value = self.inner.exec("resign", &keys.lead, Access::Write, call).await?;
        Ok(match owner_code("resign", name, &value)? {
            1 => ReleaseOutcome::Released,
            2 => ReleaseOutcome::HeldByOther,
            _ => ReleaseOutcome::Missing,
        })
    }

    async fn renew_lead(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        let keys = self.election_keys(name)?;
        validate_ttl(ttl)?;
        let hex = token.hex_bytes();
        let mut ms = itoa::Buffer::new();
        let call = Call::Script {
            script: &scripts().renew,
            keys: &[&keys.lead],
            args: &[&hex, ms.format(ttl_millis(ttl)).as_bytes()],
        };
        let value = self
            .inner
            .exec("leadership renew", &keys.lead, Access::Write, call)
            .await?;
        Ok(match owner_code("leadership renew", name, &value)? {
            1 => RenewOutcome::Renewed,
            2 => RenewOutcome::HeldByOther,
            _ => RenewOutcome::Missing,
        })
    }

    async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>> {
        let keys = self.election_keys(name)?;
        let cmd = redis::cmd("HMGET").arg(&keys.lead).arg("id").arg("term").to_owned();
        let value = self
            .inner
            .exec("leader", &keys.lead, Access::Read, Call::Command(cmd))
            .await?;
        let Value::Array(items) = &value else {
            return Err(unexpected_reply("leader", name, &value));
        };
        match items.as_slice() {
            [Value::Nil, _] => Ok(None),
            [id, term] => {
                let identity = bytes_of(id).ok_or_else(|| unexpected_reply("leader", name, &value))?;
                let term = bytes_of(term)
                    .and_then(|t| String::from_utf8(t).ok())
                    .and_then(|t| t.parse::<u64>().ok())
                    .ok_or_else(|| unexpected_reply("leader", name, &value))?;
                Ok(Some(LeaderInfo::new(identity, term)))
            }
            _ => Err(unexpected_reply("leader", name, &value)),
        }
    }

    /// Subscribed to the leader key's channel, then (so that no change
    /// after it goes unheard) the leader is read again: a leader other than
    /// `seen` returns at once.
    async fn wait_for_leader_change(&self, name: &str, seen: Option<&LeaderInfo>, max_wait: Duration) {
        let (Some(notifier), Ok(keys)) = (&self.inner.notifier, self.election_keys(name)) else {
            tokio::time::sleep(max_wait).await;
            return;
        };
        let Ok(own) = LockToken::generate() else {
            tokio::time::sleep(max_wait).await;
            return;
        };
        let id = notify::waiter_id(notifier.process(), &own.hex_bytes());
        let unchanged = async { self.leader(name).await.map_or(true, |now| now.as_ref() == seen) };
        notifier
            .wait_on(notify::leader_channel(&keys.lead), id, max_wait, Some(unchanged))
            .await;
    }
}
