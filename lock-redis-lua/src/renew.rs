//! Renewals, one key or many (one script call per chunk), with replica
//! acknowledgement when configured.

use std::time::Duration;

use std::sync::atomic::Ordering;

use deadpool_redis::redis::{Cmd, Value};
use lock_core::RenewOutcome;
use lock_core::raw::RenewBatch;
use lock_core::raw::{ttl_millis, validate_ttl};
use lock_core::{Error, LockToken, Replication, Result};
use lock_redis_family::shortfall;

use crate::error::{Access, BACKEND, is_wrong_type, same_error, unexpected_reply};
use crate::keys;
use crate::replies::{array, redis_error, refuses_set_nx_get};
use crate::{Call, Inner, check_key};

impl Inner {
    pub(crate) async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        check_key(key)?;
        validate_ttl(ttl)?;
        if self.native_renew.load(Ordering::Relaxed)
            && let Some(outcome) = self.renew_native(key, token, ttl).await?
        {
            return Ok(outcome);
        }
        let hex = token.hex_bytes();
        let mut ms = itoa::Buffer::new();
        let call = Call::Script {
            script: &self.scripts.renew,
            keys: &[key],
            args: &[&hex, ms.format(ttl_millis(ttl)).as_bytes()],
        };
        let (value, replication) = self.exec_renewal("renew", key, call, |v| *v == Value::Int(1)).await?;
        let outcome = match value {
            Value::Int(1) => RenewOutcome::Renewed,
            Value::Int(0) => RenewOutcome::Missing,
            Value::Int(2) => RenewOutcome::HeldByOther,
            other => return Err(unexpected_reply("renew", key, &other)),
        };
        self.counted_renewal(key, outcome, replication)
    }

    /// `SET key token IFEQ token PX ttl GET` (Valkey 8.1): the server's own
    /// compare-and-set, no script. The old value says which outcome: our
    /// token, none, or another. `None` when the server refuses the command
    /// (a node of a cluster not upgraded yet): the script decides, from now on.
    async fn renew_native(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<Option<RenewOutcome>> {
        let hex = token.hex_bytes();
        let mut ms = itoa::Buffer::new();
        let ms = ms.format(ttl_millis(ttl));
        let mut cmd = Cmd::with_capacity(8, 3 + key.len() + 2 * hex.len() + 4 + 2 + ms.len() + 3);
        cmd.arg("SET")
            .arg(key)
            .arg(&hex)
            .arg("IFEQ")
            .arg(&hex)
            .arg("PX")
            .arg(ms)
            .arg("GET");
        let call = Call::Command(cmd);
        let renewed = |v: &Value| matches!(v, Value::BulkString(old) if *old == hex);
        let (value, replication) = match self.exec_renewal("renew", key, call, renewed).await {
            Ok(sent) => sent,
            // A value of another type: someone else's key, as the script says.
            Err(e) if is_wrong_type(&e) => return Ok(Some(RenewOutcome::HeldByOther)),
            Err(e) if refuses_set_ifeq(&e) => {
                tracing::warn!("the server refuses SET IFEQ; renewing with the script");
                self.native_renew.store(false, Ordering::Relaxed);
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let outcome = match &value {
            v if renewed(v) => RenewOutcome::Renewed,
            Value::Nil => RenewOutcome::Missing,
            Value::BulkString(_) => RenewOutcome::HeldByOther,
            other => return Err(unexpected_reply("renew", key, other)),
        };
        self.counted_renewal(key, outcome, replication).map(Some)
    }

    /// Runs a renewal's write, followed by `WAIT` when replica
    /// acknowledgement is on (`renewed`: whether the reply renewed anything).
    pub(crate) async fn exec_renewal(
        &self,
        op: &str,
        key: &str,
        call: Call<'_>,
        renewed: impl Fn(&Value) -> bool + Send,
    ) -> Result<(Value, Option<Replication>)> {
        match &self.replica_ack {
            Some(ack) => self.exec_acked(op, key, call, ack, renewed, None).await,
            None => self.exec(op, key, Access::Write, call).await.map(|v| (v, None)),
        }
    }

    /// `outcome`, unless it is a renewal too few replicas acknowledged
    /// (the rule of [`lock_redis_family::shortfall::counted_renewal`]).
    pub(crate) fn counted_renewal(
        &self,
        key: &str,
        outcome: RenewOutcome,
        replication: Option<Replication>,
    ) -> Result<RenewOutcome> {
        shortfall::counted_renewal(BACKEND, key, outcome, replication, self.replica_ack.as_ref())
    }

    /// Renews `items` with one renew-many script call per chunk of at most
    /// [`RENEW_MANY_CHUNK`] keys (per hash slot in a cluster, since one
    /// script's keys must share a slot), the calls sent concurrently.
    pub(crate) async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        let cluster = self.cluster;
        let batch = RenewBatch::new(items, ttl, RENEW_MANY_CHUNK, |key| cluster.then(|| keys::slot(key)));
        let mut ms = itoa::Buffer::new();
        let ms = ms.format(ttl_millis(ttl)).as_bytes();
        let calls = batch.chunks().iter().map(|chunk| self.renew_chunk(items, chunk, ms));
        let outcomes = futures::future::join_all(calls).await;
        batch.finish(items, outcomes, BACKEND)
    }

    /// One renew-many script call for the `items` at the indices `chunk`
    /// (one hash slot): one result per index, in order. A failed call fails
    /// each item as a single renew would have failed.
    pub(crate) async fn renew_chunk(
        &self,
        items: &[(&str, &LockToken)],
        chunk: &[usize],
        ttl_ms: &[u8],
    ) -> Vec<Result<RenewOutcome>> {
        if chunk.iter().any(|&i| keys::check_user_key(items[i].0).is_err()) {
            // Rare: answer the reserved keys, send the others.
            let (refused, sent): (Vec<usize>, Vec<usize>) =
                chunk.iter().partition(|&&i| keys::check_user_key(items[i].0).is_err());
            let mut answers: Vec<Option<Result<RenewOutcome>>> = Vec::with_capacity(chunk.len());
            answers.resize_with(chunk.len(), || None);
            let mut sent_outcomes = Box::pin(self.renew_chunk(items, &sent, ttl_ms)).await.into_iter();
            for (slot, &i) in answers.iter_mut().zip(chunk) {
                *slot = Some(if refused.contains(&i) {
                    keys::check_user_key(items[i].0).map(|()| RenewOutcome::Missing)
                } else {
                    sent_outcomes
                        .next()
                        .unwrap_or_else(|| Err(Error::outcome_unknown(BACKEND, "renew: no reply")))
                });
            }
            return answers.into_iter().flatten().collect();
        }
        if chunk.is_empty() {
            return Vec::new();
        }
        let keys: Vec<&str> = chunk.iter().map(|&i| items[i].0).collect();
        let tokens: Vec<[u8; 32]> = chunk.iter().map(|&i| items[i].1.hex_bytes()).collect();
        let mut args: Vec<&[u8]> = Vec::with_capacity(1 + tokens.len());
        args.push(ttl_ms);
        args.extend(tokens.iter().map(|t| &t[..]));
        let call = Call::Script {
            script: &self.scripts.renew_many,
            keys: &keys,
            args: &args,
        };
        let op = format!("renew of {} keys from", keys.len());
        let first = keys.first().copied().unwrap_or_default();
        // With replica acknowledgement: one WAIT per call, after it.
        let renewed_any = |v: &Value| array(v).is_some_and(|codes| codes.contains(&Value::Int(1)));
        match self.exec_renewal(&op, first, call, renewed_any).await {
            Ok((Value::Array(codes), replication)) if codes.len() == keys.len() => codes
                .iter()
                .zip(&keys)
                .map(|(code, key)| match code {
                    Value::Int(1) => self.counted_renewal(key, RenewOutcome::Renewed, replication),
                    Value::Int(0) => Ok(RenewOutcome::Missing),
                    Value::Int(2) => Ok(RenewOutcome::HeldByOther),
                    other => Err(unexpected_reply("renew", key, other)),
                })
                .collect(),
            Ok((other, _)) => keys
                .iter()
                .map(|key| Err(unexpected_reply("renew", key, &other)))
                .collect(),
            Err(e) => {
                let mut failed: Vec<Result<RenewOutcome>> = Vec::with_capacity(keys.len());
                failed.extend(keys.iter().skip(1).map(|_| Err(same_error(&e))));
                failed.insert(0, Err(e));
                failed
            }
        }
    }
}

/// The server does not know `SET ... IFEQ` (before Valkey 8.1).
fn refuses_set_ifeq(e: &Error) -> bool {
    matches!(e, Error::Backend { source: Some(source), .. } if redis_error(source).is_some_and(refuses_set_nx_get))
}

/// Most keys in one renew-many script call: bounds how long one script
/// holds the server (other clients wait behind it) and the command's size.
pub(crate) const RENEW_MANY_CHUNK: usize = 128;
