//! Renewals: one lock with the native `CAS` (again with the waiter's mark
//! when the value is not the bare token), and many locks in one script call
//! per chunk of keys (`CAS` per key), so that thousands of auto-renewed
//! locks cost a few commands per renewal round.

use const_format::concatcp;
use fred::types::{ClusterHash, CustomCommand, Value};
use fred::util::redis_keyslot;
use lock_core::RenewOutcome;
use lock_core::{LockToken, Result};
use lock_redis_family::wake::WAITER_MARK;

use crate::conn::{self, Access, COMMANDS, OptionsClient, map_error, send, unexpected_reply};
use crate::replica_ack::renewal_shortfall;
use crate::replies::{self, TriState};
use crate::wake::marked_arg;
use crate::{TairBackend, token_arg};

/// Renew many locks: the single renew's `CAS key token token PX ttl` per key
/// (ARGV[1] ttl ms, ARGV[i + 1] the token of KEYS[i]), and on a mismatch the
/// same with the token marked by a waiter ([`WAITER_MARK`]); one code per
/// key: `CAS`'s 1 / 0 / -1, or -2 for a key of another type (`WRONGTYPE`,
/// caught so that it fails that key alone). Any other error fails the call.
pub(crate) const RENEW_MANY: &str = concatcp!(
    "\
local out = {}
for i, key in ipairs(KEYS) do
  local ok, res = pcall(redis.call, 'CAS', key, ARGV[i + 1], ARGV[i + 1], 'PX', ARGV[1])
  if ok and res == 0 then
    local marked = ARGV[i + 1] .. '",
    WAITER_MARK,
    "'
    ok, res = pcall(redis.call, 'CAS', key, marked, marked, 'PX', ARGV[1])
  end
  if ok then
    out[i] = res
  else
    local msg = type(res) == 'table' and res.err or tostring(res)
    if string.find(msg, 'WRONGTYPE', 1, true) then
      out[i] = -2
    else
      return redis.error_reply(msg)
    end
  end
end
return out
"
);

/// Most keys in one renew-many script call: bounds how long one script
/// holds the server (other clients wait behind it) and the command's size.
pub(crate) const RENEW_MANY_CHUNK: usize = 128;

impl TairBackend {
    /// Renews `key` for `px` ms: `CAS key token token PX ttl` (always with
    /// `PX`: `CAS` without a TTL option, or with `KEEPTTL`, would make the
    /// lock permanent); on one server, when that misses, the same with the
    /// token marked by a waiter (the mark kept). With replica acks on a
    /// WAIT connection: the renewal counts only once replicas have it.
    pub(crate) async fn renew_one(&self, key: &str, token: &LockToken, px: i64) -> Result<RenewOutcome> {
        let mut writer = self.writer();
        let cas = |value: Value| {
            let args: Vec<Value> = vec![
                key.into(),
                value.clone(),
                value,
                Value::from_static_str("PX"),
                px.into(),
            ];
            send(writer.client, &COMMANDS.cas, args)
        };
        let mut reply = cas(token_arg(token)).await;
        if !self.inner.clustered && matches!(reply, Ok(Value::Integer(0))) {
            reply = cas(marked_arg(token)).await;
        }
        let reply = match reply {
            Ok(reply) => reply,
            Err(e) if conn::is_wrong_type(&e) => {
                tracing::warn!(
                    key,
                    "renew: the lock key holds a non-string value (WRONGTYPE); not ours, left untouched"
                );
                return Ok(RenewOutcome::HeldByOther);
            }
            Err(e) => return Err(map_error("CAS", key, Access::Write, e)),
        };
        match replies::tri_state(&reply) {
            Some(TriState::Done) => {
                if let Some(ack) = writer.ack {
                    let acknowledged = self.wait_for_replicas(&mut writer, key, ack).await;
                    renewal_shortfall(ack, acknowledged, key)?;
                }
                Ok(RenewOutcome::Renewed)
            }
            Some(TriState::Mismatch) => Ok(RenewOutcome::HeldByOther),
            Some(TriState::Missing) => Ok(RenewOutcome::Missing),
            None => Err(unexpected_reply("CAS", key, Access::Write, &reply)),
        }
    }

    /// One renew-many script call for the `items` at the indices `chunk`
    /// (one hash slot): one result per index, in order. A failed call fails
    /// each item as a single renew would have failed.
    pub(crate) async fn renew_chunk(
        &self,
        client: &OptionsClient,
        items: &[(&str, &LockToken)],
        chunk: &[usize],
        px: i64,
    ) -> Vec<Result<RenewOutcome>> {
        let keys: Vec<&str> = chunk.iter().map(|&i| items[i].0).collect();
        let Some(&first) = keys.first() else {
            return Vec::new();
        };
        // EVALSHA sha numkeys keys… ttl tokens…: the script body follows
        // only on NOSCRIPT.
        let mut tail: Vec<Value> = Vec::with_capacity(2 + 2 * keys.len());
        tail.push(i64::try_from(keys.len()).unwrap_or(i64::MAX).into());
        tail.extend(keys.iter().map(|&key| Value::from(key)));
        tail.push(px.into());
        tail.extend(chunk.iter().map(|&i| token_arg(items[i].1)));
        let slot = ClusterHash::Custom(redis_keyslot(first.as_bytes()));
        let mut args: Vec<Value> = Vec::with_capacity(1 + tail.len());
        args.push(self.inner.renew_many_sha.as_str().into());
        args.extend(tail.iter().cloned());
        let evalsha = CustomCommand::new_static("EVALSHA", slot.clone(), false);
        let reply = match send(client, &evalsha, args).await {
            Err(e) if conn::is_no_script(&e) => {
                // Not run: the script cache is empty (new or flushed server).
                let mut args: Vec<Value> = Vec::with_capacity(1 + tail.len());
                args.push(RENEW_MANY.into());
                args.extend(tail);
                send(client, &CustomCommand::new_static("EVAL", slot, false), args).await
            }
            other => other,
        };
        let what = "EVAL (renew many)";
        match reply {
            Ok(Value::Array(codes)) if codes.len() == keys.len() => codes
                .iter()
                .zip(&keys)
                .map(|(code, key)| match code {
                    Value::Integer(-2) => {
                        tracing::warn!(
                            key,
                            "renew: the lock key holds a non-string value (WRONGTYPE); not ours, left untouched"
                        );
                        Ok(RenewOutcome::HeldByOther)
                    }
                    code => match replies::tri_state(code) {
                        Some(TriState::Done) => Ok(RenewOutcome::Renewed),
                        Some(TriState::Mismatch) => Ok(RenewOutcome::HeldByOther),
                        Some(TriState::Missing) => Ok(RenewOutcome::Missing),
                        None => Err(unexpected_reply(what, key, Access::Write, code)),
                    },
                })
                .collect(),
            Ok(other) => keys
                .iter()
                .map(|key| Err(unexpected_reply(what, key, Access::Write, &other)))
                .collect(),
            // The script may have renewed some keys before it failed.
            Err(e) => keys
                .iter()
                .map(|key| Err(map_error(what, key, Access::Script, e.clone())))
                .collect(),
        }
    }
}
