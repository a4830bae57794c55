//! The lock kinds' scripts (`lock_redis_family::kinds::scripted`) on Tair:
//! TairString has no per-member expiry, so the kinds run the same Lua
//! scripts as the redis-lua backend, one `EVALSHA` per operation (`EVAL`
//! after `NOSCRIPT`). Grants are not followed by `WAIT` here: under
//! [`crate::ReplicaAck`] every kind but the mutex is refused.

use std::sync::OnceLock;

use async_trait::async_trait;
use fred::types::Value;
use lock_core::{Error, ReplicaAck, Replication, Result};
use lock_redis_family::kinds::scripted::{KindCall, KindScript, ScriptedKinds};

use crate::TairBackend;
use crate::conn::{Access, NAME, unexpected_reply};
use crate::script::Script;

/// [`KindScript::ALL`], prepared once.
fn scripts() -> &'static [Script] {
    static SCRIPTS: OnceLock<Vec<Script>> = OnceLock::new();
    SCRIPTS.get_or_init(|| KindScript::ALL.iter().map(|s| Script::new(s.source())).collect())
}

/// How an operation is named in errors: the command, then the operation.
fn what(op: &str) -> String {
    format!("EVAL ({op})")
}

#[async_trait]
impl ScriptedKinds for TairBackend {
    type Reply = Value;

    fn kinds_backend(&self) -> &'static str {
        NAME
    }

    fn kinds_key_prefix(&self) -> &'static str {
        crate::keys::KIND_PREFIX
    }

    fn kinds_replica_ack(&self) -> Option<&ReplicaAck> {
        self.inner.ack.as_ref().map(|(_, ack)| ack)
    }

    fn semaphore_waits_for_replicas(&self) -> bool {
        false
    }

    async fn run_kind_script(&self, call: KindCall<'_>) -> Result<(Value, Option<Replication>)> {
        let args = call.args.iter().map(|a| Value::Bytes(a.to_vec().into())).collect();
        let script = &scripts()[call.script.index()];
        let reply = self.run_script(&what(call.op), script, call.keys, args).await?;
        Ok((reply, None))
    }

    fn reply_int(reply: &Value) -> Option<i64> {
        match reply {
            Value::Integer(n) => Some(*n),
            _ => None,
        }
    }

    fn reply_ints(reply: &Value) -> Option<Vec<i64>> {
        match reply {
            Value::Array(items) => items.iter().map(Self::reply_int).collect(),
            _ => None,
        }
    }

    fn unexpected_reply(&self, op: &str, name: &str, reply: &Value) -> Error {
        unexpected_reply(&what(op), name, Access::Script, reply)
    }
}
