//! Acquire: the fenced acquire script (one round trip, fence from
//! `max(counter + 1, server µs)`), the holder's PTTL as a retry hint, and how
//! long an unanswered acquire may still matter.

use std::time::Duration;

use const_format::concatcp;
use fred::types::{ClusterHash, CustomCommand, Value};
use fred::util::redis_keyslot;
use lock_core::{Error, Result};
use lock_redis_family::fence::GRANT_FENCE;

use crate::conn::{self, Access, COMMANDS, map_error, send, unexpected_reply};
use crate::replica_ack::Writer;
use crate::replies::{self, FencedReply};
use crate::{TairBackend, keys};

/// Fenced acquire: refuse a held key (answering its PTTL as a retry hint),
/// else set the lock and hand out the next fence ([`GRANT_FENCE`], the
/// rule of every Redis-family grant). `ARGV[3]` (with release
/// notifications): the reservation prefix of this backend's process
/// ([`lock_redis_family::wake::reservation_of`]); a key reserved for one of
/// its waiters is taken as a free one. Every read (and the only commands
/// that can fail, `GET` on a counter of the wrong type) comes before the
/// first write.
pub(crate) const FENCED_ACQUIRE: &str = concatcp!(
    r"
if redis.call('EXISTS', KEYS[1]) == 1 then
  local ours = false
  if ARGV[3] and redis.call('TYPE', KEYS[1]).ok == 'string' then
    ours = string.sub(redis.call('GET', KEYS[1]), 1, #ARGV[3]) == ARGV[3]
  end
  if not ours then return {0, redis.call('PTTL', KEYS[1])} end
end
local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local fence_key = KEYS[2]
",
    GRANT_FENCE
);

impl TairBackend {
    /// The holder's remaining TTL, when asked for with `retry_after_hint`.
    pub(crate) async fn retry_after(&self, key: &str) -> Option<Duration> {
        if !self.inner.retry_after_hint {
            return None;
        }
        let reply = send(self.inner.commands.next(), &COMMANDS.pttl, vec![key.into()])
            .await
            .ok()?;
        replies::pttl(&reply).map(Duration::from_millis)
    }

    pub(crate) async fn fenced_acquire(
        &self,
        writer: &Writer<'_>,
        key: &str,
        token: &str,
        px: i64,
        prefix: &str,
    ) -> Result<FencedReply> {
        let fence_key = keys::fence_key(prefix, key);
        if self.inner.clustered && redis_keyslot(fence_key.as_bytes()) != redis_keyslot(key.as_bytes()) {
            return Err(Error::invalid(format!(
                "fencing on a cluster: key {key:?} contains '}}' but no hash tag, so its fence counter cannot share \
                 its slot; give the key a hash tag such as {{name}}"
            )));
        }
        let mut tail: Vec<Value> = vec![
            2i64.into(),
            key.into(),
            fence_key.as_str().into(),
            token.into(),
            px.into(),
        ];
        if let Some(wake) = &self.inner.wake {
            tail.push(wake.reservation_arg());
        }
        let mut args: Vec<Value> = vec![self.inner.script_sha.as_str().into()];
        args.extend(tail.iter().cloned());
        let slot = ClusterHash::Custom(redis_keyslot(key.as_bytes()));
        let evalsha = CustomCommand::new_static("EVALSHA", slot.clone(), false);
        let reply = match send(writer.client, &evalsha, args).await {
            Err(e) if conn::is_no_script(&e) => {
                // Not run: the script cache is empty (new or flushed server).
                let mut args: Vec<Value> = vec![FENCED_ACQUIRE.into()];
                args.extend(tail);
                send(writer.client, &CustomCommand::new_static("EVAL", slot, false), args).await
            }
            other => other,
        }
        .map_err(|e| map_error("EVAL (fenced acquire)", key, Access::Script, e))?;
        replies::fenced_acquire(&reply)
            .ok_or_else(|| unexpected_reply("EVAL (fenced acquire)", key, Access::Script, &reply))
    }

    /// How long an unanswered acquire with `ttl` may still matter: it may
    /// stay queued until fred gives up on its connection, then hold the key
    /// for `ttl`.
    pub(crate) fn unsettled_for(&self, ttl: Duration) -> Duration {
        let wait = self.inner.ack.as_ref().map_or(Duration::ZERO, |(_, a)| a.timeout);
        ttl.saturating_add(self.inner.response_timeout.saturating_mul(2))
            .saturating_add(wait)
    }
}
