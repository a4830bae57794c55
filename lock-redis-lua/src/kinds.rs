//! The lock kinds' scripts (`lock_redis_family::kinds::scripted`) on Redis/Valkey:
//! one script call per operation, with `WAIT` after a semaphore,
//! read-write or election grant or renewal under [`crate::ReplicaAck`]
//! (multi-key locks WAIT the same way, in `multi.rs`).

use std::sync::OnceLock;

use async_trait::async_trait;
use deadpool_redis::redis::Value;
use lock_core::{Error, RenewOutcome, ReplicaAck, Replication, Result};
use lock_redis_family::kinds::scripted::{KindCall, KindScript, ScriptedKinds};

use crate::error::{Access, BACKEND, unexpected_reply};
use crate::scripts::LuaScript;
use crate::{Call, RedisLuaBackend, keys, notify};

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

    fn semaphore_waits_for_replicas(&self) -> bool {
        true
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
        match (call.script, &i.replica_ack) {
            // A grant WAITs like a mutex acquire.
            (KindScript::SemaphoreAcquire | KindScript::RwAcquire | KindScript::Lead, Some(ack)) => {
                let granted = |v: &Value| ints(v).is_some_and(|r| r.first() == Some(&1));
                i.exec_acked(call.op, key, run, ack, granted, None).await
            }
            (KindScript::SemaphoreRenew | KindScript::RwRenew | KindScript::RenewLead, Some(_)) => {
                i.exec_renewal(call.op, key, run, |v| *v == Value::Int(1)).await
            }
            _ => i.exec(call.op, key, Access::Write, run).await.map(|v| (v, None)),
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

    /// With replica acknowledgement a renewal counts only once WAIT
    /// confirms it, as for the mutex.
    fn counted_renewal(
        &self,
        name: &str,
        outcome: RenewOutcome,
        replication: Option<Replication>,
    ) -> Result<RenewOutcome> {
        self.inner.counted_renewal(name, outcome, replication)
    }
}
