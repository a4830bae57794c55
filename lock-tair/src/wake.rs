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
use fred::interfaces::ClientLike;
use fred::types::Value;
use lock_core::ReleaseOutcome;
use lock_core::raw::WaitOptions;
use lock_core::raw::ttl_millis;
use lock_core::{LockToken, Result};
use lock_redis_family::board::Subscriber;
use lock_redis_family::wake as wake_lua;

use crate::conn::{self, Access, COMMANDS, NAME, OptionsClient, map_error, unexpected_reply};
use crate::notify::{Notifier, WaiterId};
use crate::replies::{self, TriState};
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
/// Prefix of the wake sets' start times (waiter → when its acquire started
/// waiting, server ms).
const SINCE_PREFIX: &str = "verrou:tair:wake-since:";

/// KEYS[1] a lock's waiter marker, KEYS[2] its wake set, KEYS[3] its fair
/// queue, KEYS[4] the queue's deadlines (see `fair`), KEYS[5] the lock,
/// KEYS[6] the wake set's start times; ARGV[1] the starvation bound, ms
/// ([`wake_lua::STARVING_MS`]), ARGV[2] how long a reservation lives, ms
/// ([`wake_lua::RESERVATION_MS`]), ARGV[3] the releaser's own last
/// registration (it waited for the key) or `''`, taken out first. Sent only after a `CAD` that released the
/// lock and, pipelined behind it, an `EXISTS` that found the marker:
/// deletes the marker and, when it was still there, hands the key off
/// (`hand_off` in [`wake_lua::FUNCTIONS`]): the live barging waiter that
/// started waiting first, once it has waited the bound, gets the key
/// reserved for it if the key is still free (`SET NX`, for ARGV[2] ms)
/// and is woken by publishing its id on its
/// process's channel (`verrou:wake:` and the id's first 32 characters; a
/// refused `PUBLISH`, e.g. an ACL without channel rights, only costs the
/// waiter its timer, so it is a `pcall`); a waiter that has not waited
/// that long is not woken; without a reservation the head of the fair
/// queue (which stays in it until granted) is woken the same way; then the
/// marker is set again while waiters remain. So an uncontended release is
/// `CAD` and `EXISTS` in one round trip, and no Lua.
const WAKE_AFTER_RELEASE: &str = concatcp!(
    wake_lua::FUNCTIONS,
    "
if redis.call('DEL', KEYS[1]) == 1 then
  hand_off(KEYS[5], KEYS[1], KEYS[2], KEYS[6], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3])
end
return 1
"
);

/// KEYS[1] lock; ARGV[1] token, ARGV[2] ttl ms, ARGV[3] the reservation
/// prefix of this backend's process ([`wake_lua::reservation_of`]). The
/// acquire of a waiter that a release woke: takes the key when it is free
/// or reserved for this process's waiters (1), else 0 (held).
const CLAIM: &str = "
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[3]) ~= ARGV[3] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
";

/// Release notifications of one backend: its pub/sub connection and the
/// scripts.
pub(crate) struct Notifications {
    pub(crate) notifier: Arc<Notifier>,
    wake_after_release: Script,
    mark_waiting: Script,
    claim: Script,
    /// How long this backend's waiters have waited per key.
    pub(crate) waits: wake_lua::Waits,
    /// The value prefix of keys reserved for this process's waiters.
    reservation: Vec<u8>,
    /// Set when the server refused the scripts (an ACL without `EVALSHA`, a
    /// renamed command): releases stop reading the marker, waiters use their
    /// timers.
    refused: AtomicBool,
}

impl Notifications {
    pub(crate) fn new(notifier: Arc<Notifier>) -> Self {
        Notifications {
            reservation: wake_lua::reservation_of(notifier.process()),
            notifier,
            wake_after_release: Script::new(WAKE_AFTER_RELEASE),
            mark_waiting: Script::new(wake_lua::MARK_WAITING),
            claim: Script::new(CLAIM),
            waits: wake_lua::Waits::default(),
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
                "the server refuses the release-notification scripts: releases wake nobody and waiters use \
                 their timers"
            );
        }
        refused
    }

    /// The reservation prefix as a script argument.
    pub(crate) fn reservation_arg(&self) -> Value {
        Value::from(String::from_utf8_lossy(&self.reservation).into_owned())
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

/// `key`'s wake set's start times.
fn since_key(key: &str) -> String {
    format!("{SINCE_PREFIX}{key}")
}

impl TairBackend {
    /// Release `key` with `CAD` on `client` and, pipelined behind it in the
    /// same round trip, `EXISTS` of its waiter marker; when the release
    /// found a marker, [`WAKE_AFTER_RELEASE`] wakes a waiter (one more round
    /// trip, only under contention).
    ///
    /// No wake-up is lost: a waiter registers with `MARK_WAITING`, which
    /// leaves the marker only while the lock key exists, atomically. If it
    /// runs before the `CAD`, the `EXISTS` behind the `CAD` sees the marker;
    /// if after, the key is gone (or has a new holder, whose own release will
    /// see the marker), so the waiter does not sleep on this release. A
    /// failed wake only costs the waiter its timer.
    pub(crate) async fn release_and_wake(
        &self,
        wake: &Notifications,
        client: &OptionsClient,
        key: &str,
        token: &LockToken,
    ) -> Result<ReleaseOutcome> {
        let [marker, set, queue, deadlines] = helper_keys(key);
        if !client.is_connected() {
            conn::connected(client)
                .await
                .map_err(|e| map_error("CAD", key, Access::Write, e))?;
        }
        let pipeline = client.pipeline().with_options(client.options());
        let queued: std::result::Result<(), fred::error::Error> = async {
            let () = pipeline
                .custom(COMMANDS.cad.clone(), vec![key.into(), token_arg(token)])
                .await?;
            pipeline
                .custom(COMMANDS.exists.clone(), vec![Value::from(&marker[..])])
                .await
        }
        .await;
        queued.map_err(|e| map_error("CAD", key, Access::Write, e))?;
        let mut replies = pipeline.try_all::<Value>().await.into_iter();
        let outcome = release_outcome(key, replies.next())?;
        let marked = matches!(replies.next(), Some(Ok(ref v)) if v.as_i64() == Some(1));
        let stale = wake.waits.take_stale(key);
        if outcome == ReleaseOutcome::Released && marked {
            let since = since_key(key);
            let keys = [&marker[..], &set, &queue, &deadlines, key, &since];
            let woke = self
                .run_script_on(
                    self.inner.commands.next(),
                    &wake.wake_after_release,
                    &keys,
                    vec![
                        Value::from(wake_lua::STARVING_MS.to_string()),
                        Value::from(wake_lua::RESERVATION_MS.to_string()),
                        stale.map_or_else(|| Value::from(""), |id| Value::from(&id[..])),
                    ],
                    false,
                )
                .await;
            if let Err(e) = woke {
                wake.refuses_scripts(&e);
                tracing::debug!(backend = NAME, key, error = %e, "no wake-up sent; the waiter uses its timer");
            }
        }
        Ok(outcome)
    }

    /// Waits until `key` may be free, or `max_wait` passes: subscribed, the
    /// waiter joins the key's wake set (with how long its acquire has
    /// waited) and a release that reserves the key for it wakes it (once it
    /// has waited `STARVING_MS`); after `RECHECK_MS` without a wake-up it
    /// looks once whether the key is free (a release that found nobody
    /// starving woke nobody).
    pub(crate) async fn wait_woken(&self, wake: &Notifications, key: &str, options: &WaitOptions) {
        let max_wait = options.max_wait;
        if !wake.usable() {
            tokio::time::sleep(max_wait).await;
            return;
        }
        // A named waiter (one waiter across Redlock's nodes) keeps its id
        // and its age on every node.
        let id = options
            .waiter
            .map_or_else(|| wake.notifier.waiter_id(), |w| wake.notifier.named_waiter_id(&w.id));
        let waited = wake.waits.start_named(key, id, options.waiter.map(|w| w.waited));
        let (answered, replied) = tokio::sync::oneshot::channel();
        let mark = wake_lua::noting_reply(self.mark_waiting(wake, key, &id, max_wait, waited), answered);
        let wait = wake.notifier.wait(id, max_wait, Some(mark));
        let woken = wake_lua::wait_or_recheck(max_wait, wait, replied, self.free_or_ours(wake, key)).await;
        wake.waits.end(key, woken);
    }

    /// Whether `key` is free or reserved for this process's waiters. A
    /// failure says no: the waiter keeps waiting.
    async fn free_or_ours(&self, wake: &Notifications, key: &str) -> bool {
        let get = fred::types::CustomCommand::new_static("GET", fred::types::ClusterHash::FirstKey, false);
        match conn::send(self.inner.commands.next(), &get, vec![key.into()]).await {
            Ok(Value::Null) => true,
            Ok(Value::String(v)) => v.as_bytes().starts_with(&wake.reservation),
            Ok(Value::Bytes(v)) => v.starts_with(&wake.reservation),
            _ => false,
        }
    }

    /// The acquire of a waiter that a release woke: takes `key` if it is
    /// free or reserved for this process's waiters. `Some(true)` taken,
    /// `Some(false)` held, `None` the script failed (the caller falls back
    /// to `SET NX`).
    pub(crate) async fn claim(
        &self,
        wake: &Notifications,
        client: &OptionsClient,
        key: &str,
        token: &LockToken,
        px: i64,
    ) -> std::result::Result<bool, fred::error::Error> {
        let args = vec![token_arg(token), px.into(), wake.reservation_arg()];
        let reply = self.run_script_on(client, &wake.claim, &[key], args, false).await?;
        Ok(reply.as_i64() == Some(1))
    }

    /// Puts waiter `id` in `key`'s wake set for `max_wait` (and leaves the
    /// marker) so that a release wakes it, with how long its acquire has
    /// `waited` before, ms; false when the lock is already free or reserved
    /// for this process (no point waiting). A failure only costs the waiter
    /// its timer.
    async fn mark_waiting(
        &self,
        wake: &Notifications,
        key: &str,
        id: &WaiterId,
        max_wait: Duration,
        waited: u64,
    ) -> bool {
        let [marker, set, _, _] = helper_keys(key);
        let since = since_key(key);
        let wait_ms = ttl_millis(max_wait);
        let args: Vec<Value> = vec![
            wait_ms.saturating_add(wake_lua::WAITING_MARGIN_MS).to_string().into(),
            Value::from(&id[..]),
            wait_ms.to_string().into(),
            waited.to_string().into(),
        ];
        let client = self.inner.commands.next();
        match self
            .run_script_on(client, &wake.mark_waiting, &[key, &marker, &set, &since], args, false)
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

/// `CAD`'s reply as a release outcome (`None`: the pipeline answered
/// nothing for it).
pub(crate) fn release_outcome(
    key: &str,
    reply: Option<std::result::Result<Value, fred::error::Error>>,
) -> Result<ReleaseOutcome> {
    let reply = match reply {
        Some(Ok(reply)) => reply,
        Some(Err(e)) if conn::is_wrong_type(&e) => {
            tracing::warn!(
                key,
                "release: the lock key holds a non-string value (WRONGTYPE); not ours, left untouched"
            );
            return Ok(ReleaseOutcome::HeldByOther);
        }
        Some(Err(e)) => return Err(map_error("CAD", key, Access::Write, e)),
        None => return Err(unexpected_reply("CAD", key, Access::Write, &Value::Null)),
    };
    match replies::tri_state(&reply) {
        Some(TriState::Done) => Ok(ReleaseOutcome::Released),
        Some(TriState::Mismatch) => Ok(ReleaseOutcome::HeldByOther),
        Some(TriState::Missing) => Ok(ReleaseOutcome::Missing),
        None => Err(unexpected_reply("CAD", key, Access::Write, &reply)),
    }
}
