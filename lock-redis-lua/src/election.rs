//! [`ElectionBackend`] on Redis/Valkey: the shared scripts of
//! `lock_redis_family::kinds::election` (the leader's hash with its TTL, a term
//! counter without one; both in the name's slot), run by [`crate::kinds`].
//! `leader` is one `HMGET`.
//! With [`crate::ReplicaAck`], wins and renewals WAIT as the mutex's do
//! (a renewal counts only once confirmed).
//! With release notifications on, a win and a resignation are published on
//! the leader key's release channel, so `observe` wakes at once (an expiry
//! is seen at its next poll).

use std::time::Duration;

use async_trait::async_trait;
use deadpool_redis::redis::{self, Value};
use lock_core::{AcquireOutcome, ElectionBackend, LeaderInfo, LockToken, ReleaseOutcome, RenewOutcome, Result};
use lock_redis_family::kinds::election as election_lua;

use crate::error::{Access, unexpected_reply};
use crate::replies::bytes_of;
use crate::{Call, RedisLuaBackend, notify};

#[async_trait]
impl ElectionBackend for RedisLuaBackend {
    async fn try_lead(&self, name: &str, token: &LockToken, identity: &[u8], ttl: Duration) -> Result<AcquireOutcome> {
        election_lua::try_lead(self, name, token, identity, ttl).await
    }

    async fn resign(&self, name: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        election_lua::resign(self, name, token).await
    }

    async fn renew_lead(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        election_lua::renew(self, name, token, ttl).await
    }

    async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>> {
        let keys = election_lua::keys_on(self, name)?;
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
        let (Some(notifier), Ok(keys)) = (&self.inner.notifier, election_lua::keys_on(self, name)) else {
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
