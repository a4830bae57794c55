//! Release notifications, the server side: the release script that wakes
//! one registered waiter, and the waiter's registration. Helper keys (single
//! server only, so no hash tags): `verrou:tair:waiting:<key>` (a marker: some
//! waiter is registered) and `verrou:tair:wake:<key>` (waiter id → the end of
//! its wait, server ms). The protocol is the redis-lua backend's default
//! mode (`verrou:wake:<process id>` channels, the same waiter ids), so the
//! two backends' waiters behave alike. Unlike there, a waiter also marks the
//! lock key's value ([`wake_lua::WAITER_MARK`]): the holder's release is the
//! native `CAD` of its token, which misses a marked value, and only then
//! runs the release script. Waiters pay for the wake-up, not holders.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use const_format::concatcp;
use fred::types::Value;
use lock_core::ReleaseOutcome;
use lock_core::raw::WaitOptions;
use lock_core::raw::ttl_millis;
use lock_core::{LockToken, Result};
use lock_redis_family::board::Subscriber;
use lock_redis_family::wake as wake_lua;

use crate::conn::{self, Access, COMMANDS, NAME, OptionsClient, map_error, send, unexpected_reply};
use crate::contended::Contended;
use crate::notify::{Notifier, WaiterId};
use crate::replies::{self, TriState};
use crate::script::Script;
use crate::{TairBackend, token_arg};

/// [`wake_lua::STARVING_MS`] as a script argument.
const STARVING_MS: &str = concatcp!(wake_lua::STARVING_MS);
/// [`wake_lua::RESERVATION_MS`] as a script argument.
const RESERVATION_MS: &str = concatcp!(wake_lua::RESERVATION_MS);

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
/// registration (it waited for the key) or `''`, taken out first, ARGV[4]
/// the token, ARGV[5] [`wake_lua::WAITER_MARK`]. The release of a key a
/// waiter marked (its `CAD` answered "mismatch"), or of a key its releaser
/// waited for: releases the key when it holds the token, with or without
/// the mark (1; 0 another's, -1 missing, -2 not a string), then deletes the
/// marker and, when it was there, hands the key off (`hand_off` in
/// [`wake_lua::FUNCTIONS`]): the live barging waiter that started waiting
/// first, once it has waited the bound, gets the key reserved for it if the
/// key is still free (`SET NX`, for ARGV[2] ms) and is woken by publishing
/// its id on its process's channel (`verrou:wake:` and the id's first 32
/// characters; a refused `PUBLISH`, e.g. an ACL without channel rights,
/// only costs the waiter its timer, so it is a `pcall`); a waiter that has
/// not waited that long is not woken; without a reservation the head of
/// the fair queue (which stays in it until granted) is woken the same way;
/// then the marker is set again while waiters remain, and the answer is 2
/// (released, waiters left: see `contended`). The functions are defined
/// only in the branch that uses them.
const RELEASE_AND_WAKE: &str = concatcp!(
    "
local kind = redis.call('TYPE', KEYS[5]).ok
if kind == 'none' then return -1 end
if kind ~= 'string' then return -2 end
local cur = redis.call('GET', KEYS[5])
if cur ~= ARGV[4] and cur ~= ARGV[4] .. ARGV[5] then return 0 end
redis.call('DEL', KEYS[5])
if redis.call('DEL', KEYS[1]) == 1 then
",
    wake_lua::FUNCTIONS,
    "
  hand_off(KEYS[5], KEYS[1], KEYS[2], KEYS[6], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3])
  if redis.call('EXISTS', KEYS[1]) == 1 then return 2 end
end
return 1
"
);

/// [`RELEASE_AND_WAKE`], prepared once (a backend without notifications
/// runs it too, for a key another backend's waiter marked).
fn release_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(RELEASE_AND_WAKE))
}

/// KEYS[1] lock; ARGV[1] token, ARGV[2] ttl ms, ARGV[3] the reservation
/// prefix of this backend's process ([`wake_lua::reservation_of`]). The
/// acquire of a waiter that a release woke: takes the key when it is free
/// or reserved for this process's waiters, marked or not (1), else 0
/// (held). The bare token is written: its holder waited for the key, so its
/// release runs [`RELEASE_AND_WAKE`] anyway (to take its registration out),
/// which wakes the next waiter.
const CLAIM: &str = "
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[3]) ~= ARGV[3] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
";

/// KEYS[1] lock; ARGV[1] the reservation prefix of this backend's process,
/// ARGV[2] [`wake_lua::WAITER_MARK`]. A registered waiter's one look
/// after `RECHECK_MS`: 1 when the key is free or reserved for this
/// process's waiters (the wait ends), else 0, the holder's value marked
/// (its TTL kept) unless it was: a holder that took the key after the
/// waiter registered (a newcomer, when the release found nobody starving)
/// releases through [`RELEASE_AND_WAKE`] too.
const RECHECK: &str = "
local cur = redis.call('GET', KEYS[1])
if not cur or string.sub(cur, 1, #ARGV[1]) == ARGV[1] then return 1 end
if string.sub(cur, -#ARGV[2]) ~= ARGV[2] then
  redis.call('SET', KEYS[1], cur .. ARGV[2], 'KEEPTTL')
end
return 0
";

/// Release notifications of one backend: its pub/sub connection and the
/// scripts.
pub(crate) struct Notifications {
    pub(crate) notifier: Arc<Notifier>,
    mark_waiting: Script,
    claim: Script,
    recheck: Script,
    /// How long this backend's waiters have waited per key.
    pub(crate) waits: wake_lua::Waits,
    /// Keys whose last release left waiters: the next acquire marks.
    pub(crate) contended: Contended,
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
            mark_waiting: Script::new(wake_lua::MARK_WAITING),
            claim: Script::new(CLAIM),
            recheck: Script::new(RECHECK),
            waits: wake_lua::Waits::default(),
            contended: Contended::default(),
            refused: AtomicBool::new(false),
        }
    }

    /// False once the server refused the scripts.
    pub(crate) fn usable(&self) -> bool {
        !self.refused.load(Ordering::Relaxed)
    }

    /// Notes a server reply that refuses the scripts: true when `e` is one.
    fn refuses_scripts(&self, e: &fred::error::Error) -> bool {
        let refused = refuses_scripts(e);
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

/// Whether `e` is the server refusing scripts (an ACL without `EVALSHA`, a
/// renamed command).
fn refuses_scripts(e: &fred::error::Error) -> bool {
    let d = e.details();
    d.starts_with("NOPERM") || d.starts_with("ERR unknown command") || d.starts_with("ERR Unknown command")
}

/// A token as stored with a waiter's mark ([`wake_lua::WAITER_MARK`]).
pub(crate) fn marked_arg(token: &LockToken) -> Value {
    let mut v = token.to_hex();
    v.push_str(wake_lua::WAITER_MARK);
    Value::from(v)
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
    /// Releases `key` on `client`: the native `CAD` alone when the key holds
    /// the bare token (nobody registered a wait on this holder); when it
    /// answers "mismatch" (on one server: a waiter may have marked the
    /// value), or when this backend waited for the key itself (its stale
    /// registration must leave the wake set), [`RELEASE_AND_WAKE`], which
    /// takes the token with or without the mark and wakes a waiter. On a
    /// cluster nobody marks: the `CAD`'s answer is final. `source_first`:
    /// the script goes as `EVAL` (see `run_script_on`).
    ///
    /// No wake-up is lost: a waiter registers with `MARK_WAITING`, which
    /// marks the value only while the lock key exists, atomically. If it
    /// runs before the `CAD`, the `CAD` misses and the script sees the
    /// marker; if after, the key is gone (or has a new holder, whose
    /// value it marks), so the waiter does not sleep on this release. A
    /// failed wake only costs the waiter its timer.
    pub(crate) async fn release_on(
        &self,
        client: &OptionsClient,
        key: &str,
        token: &LockToken,
        source_first: bool,
    ) -> Result<ReleaseOutcome> {
        let wake = self.inner.wake.as_ref();
        let stale = wake.and_then(|w| w.waits.take_stale(key));
        if stale.is_none() {
            let reply = send(client, &COMMANDS.cad, vec![key.into(), token_arg(token)]).await;
            if self.inner.clustered || !matches!(reply, Ok(Value::Integer(0))) {
                let outcome = release_outcome(key, Some(reply));
                if let (Some(w), Ok(ReleaseOutcome::Released)) = (wake, &outcome) {
                    w.contended.released(key, false);
                }
                return outcome;
            }
        }
        let [marker, set, queue, deadlines] = helper_keys(key);
        let since = since_key(key);
        let keys = [&marker[..], &set, &queue, &deadlines, key, &since];
        let args = vec![
            Value::from_static_str(STARVING_MS),
            Value::from_static_str(RESERVATION_MS),
            stale.map_or_else(|| Value::from_static_str(""), |id| Value::from(&id[..])),
            token_arg(token),
            Value::from_static_str(wake_lua::WAITER_MARK),
        ];
        let what = "EVAL (release)";
        match self
            .run_script_on(client, release_script(), &keys, args, source_first)
            .await
        {
            Ok(Value::Integer(-2)) => Ok(wrong_type(key)),
            Ok(Value::Integer(released @ (1 | 2))) => {
                if let Some(w) = wake {
                    w.contended.released(key, released == 2);
                }
                Ok(ReleaseOutcome::Released)
            }
            Ok(reply) => match replies::tri_state(&reply) {
                Some(TriState::Done) => Ok(ReleaseOutcome::Released),
                Some(TriState::Mismatch) => Ok(ReleaseOutcome::HeldByOther),
                Some(TriState::Missing) => Ok(ReleaseOutcome::Missing),
                None => Err(unexpected_reply(what, key, Access::Script, &reply)),
            },
            Err(e) if refuses_scripts(&e) => {
                // Waking is a hint; the release is not: the native `CAD`
                // of the marked token.
                match wake {
                    Some(w) => {
                        w.refuses_scripts(&e);
                        w.contended.released(key, false);
                    }
                    None => tracing::debug!(backend = NAME, key, error = %e, "release script refused"),
                }
                let cad = |value| send(client, &COMMANDS.cad, vec![key.into(), value]);
                match release_outcome(key, Some(cad(marked_arg(token)).await))? {
                    // Not marked either: the bare token, unless its `CAD`
                    // already missed.
                    ReleaseOutcome::HeldByOther if stale.is_some() => {
                        release_outcome(key, Some(cad(token_arg(token)).await))
                    }
                    outcome => Ok(outcome),
                }
            }
            Err(e) => Err(map_error(what, key, Access::Script, e)),
        }
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

    /// Whether `key` is free or reserved for this process's waiters; if
    /// not, its holder's value is marked ([`RECHECK`]). A failure says no:
    /// the waiter keeps waiting.
    async fn free_or_ours(&self, wake: &Notifications, key: &str) -> bool {
        let args = vec![wake.reservation_arg(), Value::from_static_str(wake_lua::WAITER_MARK)];
        let client = self.inner.commands.next();
        match self.run_script_on(client, &wake.recheck, &[key], args, false).await {
            Ok(reply) => reply.as_i64() == Some(1),
            Err(e) => {
                wake.refuses_scripts(&e);
                false
            }
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
            Value::from_static_str(wake_lua::WAITER_MARK),
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
        Some(Err(e)) if conn::is_wrong_type(&e) => return Ok(wrong_type(key)),
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

/// A release of a key of another type: not ours, left untouched.
fn wrong_type(key: &str) -> ReleaseOutcome {
    tracing::warn!(
        key,
        "release: the lock key holds a non-string value (WRONGTYPE); not ours, left untouched"
    );
    ReleaseOutcome::HeldByOther
}
