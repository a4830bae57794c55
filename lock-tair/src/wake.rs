//! Release notifications, the server side: the release script that wakes
//! one registered waiter, and the waiter's registration. Helper keys (single
//! server only, so no hash tags): `verrou:tair:waiting:<key>` (a marker: some
//! waiter is registered) and `verrou:tair:wake:<key>` (waiter id → the end of
//! its wait, server ms). The protocol is the redis-lua backend's default
//! mode (`verrou:wake:<process id>` channels, the same waiter ids), so the
//! two backends' waiters behave alike.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fred::types::Value;
use lock_core::options::ttl_millis;
use lock_core::{LockToken, ReleaseOutcome, Result};

use crate::conn::{Access, NAME, OptionsClient, map_error, unexpected_reply};
use crate::notify::{Notifier, WaiterId};
use crate::script::Script;
use crate::{TairBackend, token_arg};

/// Prefix of the waiter markers; the lock key follows.
const MARKER_PREFIX: &str = "verrou:tair:waiting:";
/// Prefix of the wake sets; the lock key follows.
const WAKE_PREFIX: &str = "verrou:tair:wake:";
/// Prefix of the fair queues (waiter → ticket); the lock key follows.
const QUEUE_PREFIX: &str = "verrou:tair:queue:";
/// Prefix of the fair queues' deadlines (waiter → server ms).
const QUEUED_PREFIX: &str = "verrou:tair:queued:";

/// How much longer than its wait a waiter's marker lives: the round trips
/// between the waiter and the server.
const WAITING_MARGIN_MS: u64 = 100;

/// KEYS[1] lock, KEYS[2] its waiter marker, KEYS[3] its wake set, KEYS[4]
/// its fair queue, KEYS[5] the queue's deadlines (see `fair`); ARGV[1]
/// token. `CAD`'s codes: 1 released, 0 held by another, -1 missing, and -2
/// for a key of another type (`WRONGTYPE`, caught). The key and the marker
/// go in one `DEL`: 2 deleted means a waiter registered, and only then does
/// the script touch the wake set: it takes out the live waiter whose wait
/// ends last (it would sleep longest) and publishes its id on its process's
/// channel (`verrou:wake:` and the id's first 32 characters; a refused
/// `PUBLISH`, e.g. an ACL without channel rights, only costs the waiter its
/// timer, so it is a `pcall`), wakes the head of the fair queue (which stays
/// in it until granted) the same way, then sets the marker again while
/// waiters remain. So an uncontended release runs `GET` and one `DEL`.
const RELEASE_NOTIFY: &str = "\
local ok, cur = pcall(redis.call, 'GET', KEYS[1])
if not ok then
  local msg = type(cur) == 'table' and cur.err or tostring(cur)
  if string.find(msg, 'WRONGTYPE', 1, true) then return -2 end
  return redis.error_reply(msg)
end
if not cur then return -1 end
if cur ~= ARGV[1] then return 0 end
if redis.call('DEL', KEYS[1], KEYS[2]) == 2 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  local w = redis.call('ZRANGE', KEYS[3], -1, -1)[1]
  if w then
    redis.call('ZREM', KEYS[3], w)
    redis.pcall('PUBLISH', 'verrou:wake:' .. string.sub(w, 1, 32), w)
  end
  local dead = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now)
  for _, d in ipairs(dead) do
    redis.call('ZREM', KEYS[4], d)
    redis.call('ZREM', KEYS[5], d)
  end
  local h = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
  if h then redis.pcall('PUBLISH', 'verrou:wake:' .. string.sub(h, 1, 32), h) end
  local last = 0
  for _, z in ipairs({KEYS[3], KEYS[5]}) do
    local top = redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')[2]
    if top and tonumber(top) > last then last = tonumber(top) end
  end
  if last > now then
    redis.call('SET', KEYS[2], '1', 'PX', last - now + 100)
  end
end
return 1
";

/// KEYS[1] lock, KEYS[2] its waiter marker, KEYS[3] its wake set; ARGV[1]
/// how long the marker lives, ms, ARGV[2] the waiter's id, ARGV[3] how long
/// it waits, ms. Sent by a waiter once subscribed: 0 when the lock is
/// already free (do not wait), else 1 after joining the wake set until its
/// wait ends (its entry expires with its timer, so a release never wakes a
/// wait that is over) and leaving the marker.
const MARK_WAITING: &str = "\
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[3]), ARGV[2])
if redis.call('PTTL', KEYS[3]) < tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[3], ARGV[1]) end
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
end
return 1
";

/// Release notifications of one backend: its pub/sub connection and the
/// scripts.
pub(crate) struct Notifications {
    pub(crate) notifier: Arc<Notifier>,
    release: Script,
    mark_waiting: Script,
    /// Set when the server refused the scripts (an ACL without `EVALSHA`, a
    /// renamed command): release is `CAD` again, waiters use their timers.
    refused: AtomicBool,
}

impl Notifications {
    pub(crate) fn new(notifier: Arc<Notifier>) -> Self {
        Notifications {
            notifier,
            release: Script::new(RELEASE_NOTIFY),
            mark_waiting: Script::new(MARK_WAITING),
            refused: AtomicBool::new(false),
        }
    }

    /// False once the server refused the scripts.
    pub(crate) fn usable(&self) -> bool {
        !self.refused.load(Ordering::Relaxed)
    }

    /// Notes a server reply that refuses the scripts: true when `e` is one.
    fn refuses_scripts(&self, e: &fred::error::Error) -> bool {
        let d = e.details();
        let refused =
            d.starts_with("NOPERM") || d.starts_with("ERR unknown command") || d.starts_with("ERR Unknown command");
        if refused && !self.refused.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                backend = NAME,
                error = %e,
                "the server refuses the release-notification scripts: release is CAD again and waiters use their \
                 timers"
            );
        }
        refused
    }
}

/// `key`'s waiter marker, wake set, fair queue and the queue's deadlines.
pub(crate) fn helper_keys(key: &str) -> [String; 4] {
    [
        format!("{MARKER_PREFIX}{key}"),
        format!("{WAKE_PREFIX}{key}"),
        format!("{QUEUE_PREFIX}{key}"),
        format!("{QUEUED_PREFIX}{key}"),
    ]
}

impl TairBackend {
    /// Release `key` with [`RELEASE_NOTIFY`] on `client`: as `CAD`, and
    /// wakes a registered waiter. `None` when the server refuses the script
    /// (nothing ran): the caller sends `CAD`. `clean_up`: the release of an
    /// acquire whose reply never came, queued behind it: sent as `EVAL`, so
    /// it runs even if this call times out (an `EVALSHA` answered `NOSCRIPT`
    /// after a local timeout would never be re-sent, leaving the key held).
    pub(crate) async fn release_and_wake(
        &self,
        wake: &Notifications,
        client: &OptionsClient,
        key: &str,
        token: &LockToken,
        clean_up: bool,
    ) -> Result<Option<ReleaseOutcome>> {
        let [marker, set, queue, deadlines] = helper_keys(key);
        let reply = match self
            .run_script_on(
                client,
                &wake.release,
                &[key, &marker, &set, &queue, &deadlines],
                vec![token_arg(token)],
                clean_up,
            )
            .await
        {
            Ok(reply) => reply,
            Err(e) if wake.refuses_scripts(&e) => return Ok(None),
            Err(e) => return Err(map_error("release script", key, Access::Script, e)),
        };
        match reply.as_i64() {
            Some(1) => Ok(Some(ReleaseOutcome::Released)),
            Some(0) => Ok(Some(ReleaseOutcome::HeldByOther)),
            Some(-1) => Ok(Some(ReleaseOutcome::Missing)),
            Some(-2) => {
                tracing::warn!(
                    key,
                    "release: the lock key holds a non-string value (WRONGTYPE); not ours, left untouched"
                );
                Ok(Some(ReleaseOutcome::HeldByOther))
            }
            _ => Err(unexpected_reply("release script", key, Access::Script, &reply)),
        }
    }

    /// Waits until `key` may be free, or `max_wait` passes: subscribed, the
    /// waiter joins the key's wake set and a release wakes it.
    pub(crate) async fn wait_woken(&self, wake: &Notifications, key: &str, max_wait: Duration) {
        if !wake.usable() {
            tokio::time::sleep(max_wait).await;
            return;
        }
        let id = wake.notifier.waiter_id();
        wake.notifier
            .wait(id, max_wait, Some(self.mark_waiting(wake, key, &id, max_wait)))
            .await;
    }

    /// Puts waiter `id` in `key`'s wake set for `max_wait` (and leaves the
    /// marker) so that a release wakes it; false when the lock is already
    /// free (no point waiting). A failure only costs the waiter its timer.
    async fn mark_waiting(&self, wake: &Notifications, key: &str, id: &WaiterId, max_wait: Duration) -> bool {
        let [marker, set, _, _] = helper_keys(key);
        let wait_ms = ttl_millis(max_wait);
        let args: Vec<Value> = vec![
            wait_ms.saturating_add(WAITING_MARGIN_MS).to_string().into(),
            Value::from(&id[..]),
            wait_ms.to_string().into(),
        ];
        let client = self.inner.commands.next();
        match self
            .run_script_on(client, &wake.mark_waiting, &[key, &marker, &set], args, false)
            .await
        {
            Ok(reply) => reply.as_i64() != Some(0),
            Err(e) => {
                wake.refuses_scripts(&e);
                tracing::debug!(backend = NAME, error = %e, "no waiter marker; waiting on the timer");
                true
            }
        }
    }
}
