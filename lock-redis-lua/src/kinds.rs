//! The lock kinds on Redis/Valkey: `RwLockBackend`, `SemaphoreBackend`,
//! `MultiLockBackend` and `ElectionBackend` are the shared scripts of
//! `lock_redis_family::kinds` (written by
//! [`lock_redis_family::kind_backends!`]), one script call per operation
//! over [`ScriptedKinds`], with `WAIT` after a grant or a renewal under
//! [`crate::ReplicaAck`] (a grant's shortfall handled as the mutex's, a
//! renewal counted only once confirmed).
//!
//! - Read-write locks: readers' server-time deadlines in a sorted set, the
//!   writer and a waiting writer's intent as strings with TTLs; all keys in
//!   the name's slot.
//! - Semaphores: a sorted set of holder → server-time deadline, a hash of
//!   permits and size, a fence counter; all in the name's slot.
//! - Multi-key locks: the mutex's own keys; on a cluster all in one slot
//!   (else `InvalidArgument` before anything is sent). With release
//!   notifications on, the release announces each freed key that a mutex
//!   waiter marked, as the mutex's release does.
//! - Elections: the leader's hash with its TTL, a term counter without one;
//!   `leader` is one `HMGET`. With release notifications on, a win and a
//!   resignation are published on the leader key's release channel, so
//!   `observe` wakes at once (an expiry is seen at its next poll).

use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_redis::redis::{self, Value};
use lock_core::{Error, LeaderInfo, LockToken, ReplicaAck, Replication, Result};
use lock_redis_family::board::Subscriber;
use lock_redis_family::kinds::election::keys_on;
use lock_redis_family::kinds::scripted::{KindCall, KindScript, ScriptedKinds};

use crate::error::{Access, BACKEND, unexpected_reply};
use crate::keys::WakeKeys;
use crate::replies::bytes_of;
use crate::scripts::LuaScript;
use crate::{Call, RedisLuaBackend, keys, notify};

lock_redis_family::kind_backends!(RedisLuaBackend);

/// [`KindScript::ALL`], prepared once.
fn scripts() -> &'static [LuaScript] {
    static SCRIPTS: OnceLock<Vec<LuaScript>> = OnceLock::new();
    SCRIPTS.get_or_init(|| KindScript::ALL.iter().map(|s| LuaScript::new(s.source())).collect())
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
impl ScriptedKinds for RedisLuaBackend {
    type Reply = Value;

    fn kinds_backend(&self) -> &'static str {
        BACKEND
    }

    fn kinds_key_prefix(&self) -> &'static str {
        keys::RESERVED_PREFIX
    }

    fn kinds_replica_ack(&self) -> Option<&ReplicaAck> {
        self.inner.replica_ack.as_ref()
    }

    /// With release notifications on, a win and a resignation are published
    /// on the leader key's release channel, so `observe` wakes at once.
    fn leader_channel(&self, lead: &str) -> Option<String> {
        self.inner.notifier.as_ref().map(|_| notify::leader_channel(lead))
    }

    async fn run_kind_script(&self, call: KindCall<'_>) -> Result<(Value, Option<Replication>)> {
        let script = &scripts()[call.script.index()];
        let key = call.keys.first().copied().unwrap_or_default();
        let run = Call::Script {
            script,
            keys: call.keys,
            args: call.args,
        };
        let i = &self.inner;
        // A grant whose reply does not come is remembered with its
        // connection, and its clean-up release goes out after it there, as
        // for the mutex (see `in_flight.rs`).
        let grant = call.ttl.filter(|_| call.script.is_grant()).map(|ttl| (call.token, ttl));
        if call.script.is_release()
            && let Some(conn) = i.in_flight.take(call.token)
        {
            // Boxed: rare, and it would double the size of every release's future.
            return Box::pin(i.release_after_acquire(key, conn, run))
                .await
                .map(|v| (v, None));
        }
        match &i.replica_ack {
            // A grant WAITs like a mutex acquire.
            Some(ack) if call.script.is_grant() => {
                let granted = |v: &Value| ints(v).is_some_and(|r| r.first() == Some(&1));
                i.exec_acked(call.op, key, run, ack, granted, grant).await
            }
            Some(_) if call.script.is_renewal() => i.exec_renewal(call.op, key, run, |v| *v == Value::Int(1)).await,
            _ => i
                .exec_tracked(call.op, key, Access::Write, run, grant)
                .await
                .map(|v| (v, None)),
        }
    }

    fn reply_int(reply: &Value) -> Option<i64> {
        match reply {
            Value::Int(n) => Some(*n),
            _ => None,
        }
    }

    fn reply_ints(reply: &Value) -> Option<Vec<i64>> {
        ints(reply)
    }

    fn unexpected_reply(&self, op: &str, name: &str, reply: &Value) -> Error {
        unexpected_reply(op, name, reply)
    }

    fn check_user_key(&self, key: &str) -> Result<()> {
        keys::check_user_key(key)
    }

    fn same_slot(&self, a: &str, b: &str) -> bool {
        !self.inner.cluster || keys::same_slot(a, b)
    }

    fn fence_key(&self, key: &str) -> String {
        RedisLuaBackend::fence_key(key)
    }

    /// With release notifications on (standalone only: the markers need no
    /// slot), the release wakes each freed key's waiters.
    fn multi_release_waiters(&self, set: &[&str]) -> Option<Vec<String>> {
        self.inner.notifier.as_ref().map(|_| {
            set.iter()
                .flat_map(|k| WakeKeys::new(k).names().map(str::to_owned))
                .collect()
        })
    }

    async fn read_leader(&self, name: &str) -> Result<Option<LeaderInfo>> {
        let keys = keys_on(self, name)?;
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
    async fn wait_for_leader(&self, name: &str, seen: Option<&LeaderInfo>, max_wait: Duration) {
        let (Some(notifier), Ok(keys)) = (&self.inner.notifier, keys_on(self, name)) else {
            tokio::time::sleep(max_wait).await;
            return;
        };
        let Ok(own) = LockToken::generate() else {
            tokio::time::sleep(max_wait).await;
            return;
        };
        let id = notify::waiter_id(notifier.process(), &own.hex_bytes());
        let unchanged = async { self.read_leader(name).await.map_or(true, |now| now.as_ref() == seen) };
        notifier
            .wait_on(notify::leader_channel(&keys.lead), id, max_wait, Some(unchanged))
            .await;
    }
}
