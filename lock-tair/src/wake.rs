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

use const_format::concatcp;
use fred::types::Value;
use lock_core::options::ttl_millis;
use lock_core::{LockToken, ReleaseOutcome, Result, wake_lua};

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
const RELEASE_NOTIFY: &str = concatcp!(
    "\
local ok, cur = pcall(redis.call, 'GET', KEYS[1])
if not ok then
  local msg = type(cur) == 'table' and cur.err or tostring(cur)
  if string.find(msg, 'WRONGTYPE', 1, true) then return -2 end
  return redis.error_reply(msg)
end
if not cur then return -1 end
if cur ~= ARGV[1] then return 0 end
if redis.call('DEL', KEYS[1], KEYS[2]) == 2 then
",
    wake_lua::FUNCTIONS,
    "
  wake_after_release(KEYS[2], KEYS[3], KEYS[4], KEYS[5])
end
return 1
"
);

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
            mark_waiting: Script::new(wake_lua::MARK_WAITING),
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
            wait_ms.saturating_add(wake_lua::WAITING_MARGIN_MS).to_string().into(),
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
