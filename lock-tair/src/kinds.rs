//! The lock kinds' scripts (`lock_redis_family::kinds::scripted`) on Tair:
//! TairString has no per-member expiry, so the kinds run the same Lua
//! scripts as the redis-lua backend, one `EVALSHA` per operation (`EVAL`
//! after `NOSCRIPT`). Under [`crate::ReplicaAck`] a grant or a renewal
//! (semaphore, read-write, election) runs on a dedicated write connection
//! and is followed by `WAIT` there, as the mutex's acquire and renewal are:
//! a grant too few replicas acknowledged is handled by
//! [`crate::OnShortfall`], a renewal counts only once confirmed.

use std::sync::OnceLock;

use async_trait::async_trait;
use fred::types::Value;
use lock_core::{Error, RenewOutcome, ReplicaAck, Replication, Result};
use lock_redis_family::kinds::scripted::{KindCall, KindScript, ScriptedKinds};

use crate::TairBackend;
use crate::conn::{Access, NAME, map_error, unexpected_reply};
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
        true
    }

    async fn run_kind_script(&self, call: KindCall<'_>) -> Result<(Value, Option<Replication>)> {
        let args: Vec<Value> = call.args.iter().map(|a| Value::Bytes(a.to_vec().into())).collect();
        let script = &scripts()[call.script.index()];
        // The replies that wrote a grant or a renewal, which WAIT confirms.
        let wrote: Option<fn(&Value) -> bool> = match call.script {
            KindScript::SemaphoreAcquire | KindScript::RwAcquire | KindScript::Lead => {
                Some(|v| Self::reply_ints(v).is_some_and(|r| r.first() == Some(&1)))
            }
            KindScript::SemaphoreRenew | KindScript::RwRenew | KindScript::RenewLead => {
                Some(|v| *v == Value::Integer(1))
            }
            _ => None,
        };
        let (Some(wrote), Some(_)) = (wrote, &self.inner.ack) else {
            let reply = self.run_script(&what(call.op), script, call.keys, args).await?;
            return Ok((reply, None));
        };
        // On a dedicated write connection, WAIT after the write on it.
        let mut writer = self.writer();
        let first = call.keys.first().copied().unwrap_or_default();
        let reply = self
            .run_script_on(writer.client, script, call.keys, args, false)
            .await
            .map_err(|e| map_error(&what(call.op), first, Access::Script, e))?;
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

    /// Under replica acknowledgement a renewal counts only once confirmed,
    /// as the mutex's: a shortfall is an outcome-unknown error.
    fn counted_renewal(
        &self,
        name: &str,
        outcome: RenewOutcome,
        replication: Option<Replication>,
    ) -> Result<RenewOutcome> {
        match (outcome, replication, &self.inner.ack) {
            (RenewOutcome::Renewed, Some(Replication::Unconfirmed { acknowledged, .. }), Some((_, ack))) => {
                crate::replica_ack::renewal_shortfall(ack, acknowledged, name).map(|()| outcome)
            }
            _ => Ok(outcome),
        }
    }
}
