//! The lock kinds on Tair: TairString has no per-member expiry, so
//! `RwLockBackend`, `SemaphoreBackend`, `MultiLockBackend` and
//! `ElectionBackend` run the same Lua scripts as the redis-lua backend
//! (`lock_redis_family::kinds`, the traits written by
//! [`lock_redis_family::kind_backends!`]), one `EVALSHA` per operation
//! (`EVAL` after `NOSCRIPT`) over [`ScriptedKinds`]; `leader` is one
//! `HMGET`. Multi-key locks use the mutex's own keys (plain strings, which
//! `CAD`/`CAS` also accept); on a cluster all in one slot (else
//! `InvalidArgument` before anything is sent).
//!
//! Under [`crate::ReplicaAck`] a grant or a renewal (semaphore, read-write,
//! multi-key, election) runs on a dedicated write connection and is
//! followed by `WAIT` there, as the mutex's acquire and renewal are: a
//! grant too few replicas acknowledged is handled by
//! [`crate::OnShortfall`], a renewal counts only once confirmed.
//!
//! A grant whose reply did not come (its caller gave up while it was queued
//! behind another grant's `WAIT`, say) is remembered with its connection
//! (the `unsettled` module, as the mutex's acquire), and the kind's release
//! of that token goes out there, after it, so that on a healthy connection
//! the clean-up does not overtake the grant. It goes out as `EVAL` with the
//! script's source (as the redis-lua backend's does): an `EVALSHA` answered
//! `NOSCRIPT` after the release's own timeout fired (queued behind the same
//! `WAIT`) would never be re-sent, and the grant would run with no release
//! behind it.
//!
//! Across a reconnect that order is not kept: a grant whose caller gave up
//! before fred's own timeout fired is not marked timed out, and fred may
//! still send it once reconnected (if it was not yet written when the
//! connection dropped), or the server may read it late from the old
//! socket, after the clean-up ran on another connection. The scripts cover
//! that: a release that finds nothing of its token's records the token in
//! the kind's `gone` record (in the name's slot, under the reserved
//! prefix), and a grant of a recorded token is refused for
//! `GONE_WINDOW_MS` (60 s), for every kind as for the semaphore, so the late
//! grant takes nothing. What remains: a clean-up that never reached the
//! server (it failed with "not sent" while the connection was
//! reconnecting) records nothing, and a grant that then runs leaves a holder
//! nobody owns until its TTL runs out.

use std::sync::OnceLock;

use async_trait::async_trait;
use fred::types::{ClusterHash, CustomCommand, Value};
use fred::util::redis_keyslot;
use lock_core::ReleaseOutcome;
use lock_core::{Error, LeaderInfo, ReplicaAck, Replication, Result};
use lock_redis_family::kinds::election::keys_on;
use lock_redis_family::kinds::scripted::{KindCall, KindScript, ScriptedKinds};

use crate::conn::{Access, NAME, map_error, send, unexpected_reply};
use crate::keys::fence_key;
use crate::script::Script;
use crate::unsettled::Pending;
use crate::{DEFAULT_FENCE_PREFIX, TairBackend};

lock_redis_family::kind_backends!(TairBackend);

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

    async fn run_kind_script(&self, call: KindCall<'_>) -> Result<(Value, Option<Replication>)> {
        let args: Vec<Value> = call.args.iter().map(|a| Value::Bytes(a.to_vec().into())).collect();
        let script = &scripts()[call.script.index()];
        // The replies that wrote a grant or a renewal, which WAIT confirms.
        let wrote: Option<fn(&Value) -> bool> = if call.script.is_grant() {
            Some(|v| Self::reply_ints(v).is_some_and(|r| r.first() == Some(&1)))
        } else if call.script.is_renewal() {
            Some(|v| *v == Value::Integer(1))
        } else {
            None
        };
        let first = call.keys.first().copied().unwrap_or_default();
        if call.script.is_release() {
            // The clean-up of a grant that may still be queued goes after
            // it, on its connection (see the `unsettled` module). There as
            // `EVAL` with the source, not `EVALSHA`: queued behind a `WAIT`,
            // the release's own timeout may fire before it runs, and an
            // `EVALSHA` answered `NOSCRIPT` then has nobody left to send the
            // source: the grant would run with no release behind it.
            let after_grant = self.inner.unsettled.take(call.token);
            let client = after_grant.as_ref().unwrap_or_else(|| self.inner.commands.next());
            let reply = self
                .run_script_on(client, script, call.keys, args, after_grant.is_some())
                .await
                .map_err(|e| map_error(&what(call.op), first, Access::Script, e))?;
            return Ok((reply, None));
        }
        let Some(wrote) = wrote else {
            let reply = self.run_script(&what(call.op), script, call.keys, args).await?;
            return Ok((reply, None));
        };
        // On a write connection (under acknowledgement a dedicated one,
        // WAIT after the write on it); until the server answers, a clean-up
        // release must follow the grant there.
        let mut writer = self.writer();
        let pending = match call.ttl.filter(|_| call.script.is_grant()) {
            Some(ttl) => Some(Pending::new(
                &self.inner.unsettled,
                *call.token,
                writer.client,
                self.unsettled_for(ttl),
            )),
            None => None,
        };
        let reply = self
            .run_script_on(writer.client, script, call.keys, args, false)
            .await
            .map_err(|e| map_error(&what(call.op), first, Access::Script, e))?;
        if let Some(pending) = pending {
            pending.settle();
        }
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

    fn same_slot(&self, a: &str, b: &str) -> bool {
        !self.inner.clustered || redis_keyslot(a.as_bytes()) == redis_keyslot(b.as_bytes())
    }

    /// Under the default prefix when the mutex's fencing is off: a
    /// multi-key grant always carries its token.
    fn fence_key(&self, key: &str) -> String {
        fence_key(self.inner.fence_prefix.as_deref().unwrap_or(DEFAULT_FENCE_PREFIX), key)
    }

    fn check_user_key(&self, key: &str) -> Result<()> {
        self.check_key(key)
    }

    fn multi_shortfall(
        &self,
        set: &[&str],
        acknowledged: u32,
        requested: u32,
        ack: &ReplicaAck,
        released: Result<ReleaseOutcome>,
    ) -> Error {
        let message = format!(
            "only {acknowledged} of {requested} replicas acknowledged the multi-key acquire of {set:?} within {:?}",
            ack.timeout
        );
        match released {
            Ok(_) => Error::backend(NAME, format!("{message}; gave the keys back")),
            Err(e) => Error::outcome_unknown(NAME, format!("{message}; giving them back failed")).with_source(e),
        }
    }

    async fn read_leader(&self, name: &str) -> Result<Option<LeaderInfo>> {
        let keys = keys_on(self, name)?;
        let what = "HMGET (leader)";
        let hmget = CustomCommand::new_static("HMGET", ClusterHash::FirstKey, false);
        let args = vec![Value::from(keys.lead.as_str()), "id".into(), "term".into()];
        let reply = send(self.inner.commands.next(), &hmget, args)
            .await
            .map_err(|e| map_error(what, name, Access::Read, e))?;
        let bad = || unexpected_reply(what, name, Access::Read, &reply);
        let Value::Array(items) = &reply else {
            return Err(bad());
        };
        match items.as_slice() {
            [Value::Null, _] => Ok(None),
            [id, term] => {
                let identity = id.as_bytes().map(<[u8]>::to_vec).ok_or_else(bad)?;
                let term = term.as_u64().ok_or_else(bad)?;
                Ok(Some(LeaderInfo::new(identity, term)))
            }
            _ => Err(bad()),
        }
    }
}
