//! Acquire: the plain `SET NX PX GET` when the server has it, else the
//! acquire script; and what a grant becomes under replica acknowledgement.

use std::time::Duration;

use deadpool_redis::redis::{Cmd, Value};
use lock_core::raw::ttl_millis;
use lock_core::{AcquireOutcome, Lease};
use lock_core::{Error, FencingToken, LockToken, Replication, Result};
use std::sync::atomic::Ordering;

use crate::error::{Access, BACKEND, unexpected_reply};
use crate::keys::{self, Helper};
use crate::replies::{array, int_at, redis_error, refuses_set_nx_get, status, u64_at};
use crate::scripts::LuaScript;
use crate::{Call, Inner, OnShortfall};

impl Inner {
    /// `SET key token NX PX ttl GET`: `None` when the script must decide
    /// (our own token found, or the server refuses the command).
    pub(crate) async fn acquire_native(
        &self,
        key: &str,
        token: &LockToken,
        ttl: Duration,
    ) -> Result<Option<AcquireOutcome>> {
        let hex = token.hex_bytes();
        let mut ms = itoa::Buffer::new();
        let ms = ms.format(ttl_millis(ttl)).as_bytes();
        let mut cmd = Cmd::with_capacity(7, 3 + key.len() + hex.len() + 2 + 2 + ms.len() + 3);
        cmd.arg("SET").arg(key).arg(&hex).arg("NX").arg("PX").arg(ms).arg("GET");
        let call = Call::Command(cmd);
        let sent = match &self.replica_ack {
            Some(ack) => {
                self.exec_acked("acquire", key, call, ack, |v| *v == Value::Nil, Some((token, ttl)))
                    .await
            }
            None => self
                .exec_tracked("acquire", key, Access::Write, call, Some((token, ttl)))
                .await
                .map(|v| (v, None)),
        };
        let (value, replication) = match sent {
            Ok(sent) => sent,
            Err(Error::Backend { source: Some(e), .. }) if redis_error(&e).is_some_and(refuses_set_nx_get) => {
                tracing::warn!("the server refuses SET NX GET (older than Redis 7.0?); acquiring with the script");
                self.native_acquire.store(false, Ordering::Relaxed);
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        match value {
            Value::Nil => self.granted(key, token, None, replication).await.map(Some),
            // Ours (a re-sent acquire), or reserved for this process's waiters.
            Value::BulkString(held) if held == hex || self.reserved_for_us(&held) => Ok(None),
            Value::BulkString(_) => Ok(Some(AcquireOutcome::Held { retry_after: None })),
            other => Err(unexpected_reply("acquire", key, &other)),
        }
    }

    /// The acquire script (servers before 7.0, fencing, our own token found).
    pub(crate) async fn acquire_script(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        let fence_key = self.fencing.then(|| keys::helper(key, Helper::Fence));
        if let Some(fence) = &fence_key
            && self.cluster
            && !keys::same_slot(key, fence)
        {
            return Err(Error::invalid(format!(
                "key {key:?} contains '}}' but no hash tag, so its fence key cannot share its cluster slot; \
                 give it a hash tag, e.g. {{tag}}:rest"
            )));
        }
        let hex = token.hex_bytes();
        let mut ms = itoa::Buffer::new();
        let ms = ms.format(ttl_millis(ttl)).as_bytes();
        let args: &[&[u8]] = match &self.reservation {
            Some(r) => &[&hex, ms, r],
            None => &[&hex, ms],
        };
        let (script, keys): (&LuaScript, &[&str]) = match &fence_key {
            Some(f) => (&self.scripts.acquire_fenced, &[key, f.as_str()]),
            None => (&self.scripts.acquire, &[key]),
        };
        let call = Call::Script { script, keys, args };
        let acquired = |v: &Value| status(v) == Some(1);
        let (value, replication) = match &self.replica_ack {
            Some(ack) => {
                self.exec_acked("acquire", key, call, ack, acquired, Some((token, ttl)))
                    .await?
            }
            None => (
                self.exec_tracked("acquire", key, Access::Write, call, Some((token, ttl)))
                    .await?,
                None,
            ),
        };
        let items = array(&value).ok_or_else(|| unexpected_reply("acquire", key, &value))?;
        match int_at(items, 0) {
            Some(1) => {
                let fencing_token = if self.fencing {
                    Some(FencingToken(
                        u64_at(items, 1).ok_or_else(|| unexpected_reply("acquire", key, &value))?,
                    ))
                } else {
                    None
                };
                self.granted(key, token, fencing_token, replication).await
            }
            Some(0) => {
                let retry_after = int_at(items, 1)
                    .and_then(|ms| u64::try_from(ms).ok())
                    .map(Duration::from_millis);
                Ok(AcquireOutcome::Held { retry_after })
            }
            _ => Err(unexpected_reply("acquire", key, &value)),
        }
    }

    /// A granted acquire: the lease, unless too few replicas acknowledged it
    /// and the options say to release and fail.
    pub(crate) async fn granted(
        &self,
        key: &str,
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
        ) = (&self.replica_ack, replication)
            && ack.on_shortfall == OnShortfall::ReleaseAndFail
        {
            // Boxed: a shortfall is rare, and every acquire's future would carry a release's.
            let released = Box::pin(self.release(key, token)).await;
            let message = format!(
                "acquired {key:?} but only {acknowledged} of {requested} replicas acknowledged within {:?}; {}",
                ack.timeout,
                match &released {
                    Ok(_) => "released it".to_owned(),
                    Err(e) => format!("releasing it failed ({e})"),
                }
            );
            // If our release failed, the manager releases the token.
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
