//! The Lua scripts, sent as EVALSHA and re-sent as EVAL (which also caches
//! them again) when the server answers NOSCRIPT.
//!
//! Every write script is safe to run twice (a cluster client re-sends a
//! request whose connection dropped): a repeated acquire finds its own token,
//! a repeated versioned write finds its own write id. A repeat that reports
//! success still writes (a `PEXPIRE`, the same write id again), so that a
//! `WAIT` after it on a new connection has a write to wait for.
//!
//! Every write script does all its reads (which may fail: WRONGTYPE) before
//! its first write, and nothing after a write can fail (the release's
//! `PUBLISH`, which an ACL may refuse, is a `pcall`): so an error raised by
//! a script means nothing was applied. Errors raised inside a script that
//! are not one of those reads are still reported as outcome-unknown (see
//! `error::command_error`).
//!
//! Numbers: versions and fencing tokens are server time in microseconds
//! (about 2^51 today), exact in Lua's doubles below 2^53, stored with
//! `%.0f` because `tostring` would switch to exponent notation.

use const_format::concatcp;
use deadpool_redis::redis::{self, Cmd};
use lock_redis_family::fence::GRANT_FENCE;
use lock_redis_family::wake as wake_lua;

/// A script and its SHA1, computed once.
pub(crate) struct LuaScript {
    source: &'static str,
    sha: String,
}

impl LuaScript {
    pub(crate) fn new(source: &'static str) -> Self {
        LuaScript {
            source,
            sha: redis::Script::new(source).get_hash().to_owned(),
        }
    }

    /// `EVALSHA sha numkeys keys... args...`, or `EVAL source ...` after
    /// NOSCRIPT. Sized up front: one allocation per buffer.
    pub(crate) fn cmd(&self, eval: bool, keys: &[&str], args: &[&[u8]]) -> Cmd {
        let (command, body) = if eval {
            ("EVAL", self.source)
        } else {
            ("EVALSHA", self.sha.as_str())
        };
        let data = command.len()
            + body.len()
            + 2
            + keys.iter().map(|k| k.len()).sum::<usize>()
            + args.iter().map(|a| a.len()).sum::<usize>();
        let mut cmd = Cmd::with_capacity(3 + keys.len() + args.len(), data);
        cmd.arg(command).arg(body).arg(keys.len());
        for key in keys {
            cmd.arg(*key);
        }
        for arg in args {
            cmd.arg(*arg);
        }
        cmd
    }
}

/// All scripts of the backend.
pub(crate) struct Scripts {
    pub(crate) acquire: LuaScript,
    pub(crate) acquire_fenced: LuaScript,
    pub(crate) release: LuaScript,
    pub(crate) release_notify: LuaScript,
    pub(crate) release_resendable: LuaScript,
    pub(crate) mark_waiting: LuaScript,
    pub(crate) acquire_fair: LuaScript,
    pub(crate) leave_queue: LuaScript,
    pub(crate) probe: LuaScript,
    pub(crate) inspect: LuaScript,
    pub(crate) renew: LuaScript,
    pub(crate) renew_many: LuaScript,
    pub(crate) create: LuaScript,
    pub(crate) compare_and_set: LuaScript,
    pub(crate) delete: LuaScript,
    pub(crate) delete_resendable: LuaScript,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            acquire: LuaScript::new(ACQUIRE),
            acquire_fenced: LuaScript::new(ACQUIRE_FENCED),
            release: LuaScript::new(RELEASE),
            release_notify: LuaScript::new(RELEASE_NOTIFY),
            release_resendable: LuaScript::new(RELEASE_RESENDABLE),
            mark_waiting: LuaScript::new(wake_lua::MARK_WAITING),
            acquire_fair: LuaScript::new(wake_lua::ACQUIRE_FAIR),
            leave_queue: LuaScript::new(wake_lua::LEAVE_QUEUE),
            probe: LuaScript::new(PROBE),
            inspect: LuaScript::new(lock_redis_family::inspect::INSPECT_LOCK),
            renew: LuaScript::new(RENEW),
            renew_many: LuaScript::new(RENEW_MANY),
            create: LuaScript::new(CREATE),
            compare_and_set: LuaScript::new(COMPARE_AND_SET),
            delete: LuaScript::new(DELETE),
            delete_resendable: LuaScript::new(DELETE_RESENDABLE),
        }
    }
}

/// KEYS[1] lock; ARGV[1] token, ARGV[2] ttl ms, ARGV[3] (with release
/// notifications) the reservation prefix of this backend's process
/// ([`wake_lua::reservation_of`]): a key reserved for one of its waiters
/// is taken as a free one.
/// `{1}` acquired; `{0, pttl}` held by another token (or reserved for
/// another process's waiter). Used on servers before 7.0 (no `SET NX GET`)
/// and after a plain `SET NX GET` found our own token (a re-sent acquire:
/// the TTL is refreshed from now) or our process's reservation.
const ACQUIRE: &str = r"
local cur = redis.call('GET', KEYS[1])
if not cur or (ARGV[3] and string.sub(cur, 1, #ARGV[3]) == ARGV[3]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1}
end
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1}
end
return {0, redis.call('PTTL', KEYS[1])}
";

/// KEYS[1] lock, KEYS[2] fence (same slot, no TTL); ARGV as [`ACQUIRE`]
/// (a key reserved for this process's waiters is taken as a free one).
/// Both keys are read before anything is written. `{1, fence}` acquired
/// (the fence: [`GRANT_FENCE`]'s rule, increasing per grant even if the
/// fence key was lost); `{1, last}` already ours (the TTL refreshed);
/// `{0, pttl}` held.
const ACQUIRE_FENCED: &str = concatcp!(
    r"
local cur = redis.call('GET', KEYS[1])
local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, last}
end
if cur and not (ARGV[3] and string.sub(cur, 1, #ARGV[3]) == ARGV[3]) then
  return {0, redis.call('PTTL', KEYS[1])}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local fence_key = KEYS[2]
",
    GRANT_FENCE
);

/// KEYS[1] lock; ARGV[1] token.
/// 1 released, 0 missing, 2 held by another token.
const RELEASE: &str = r"
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
if cur ~= ARGV[1] then return 2 end
redis.call('DEL', KEYS[1])
return 1
";

/// KEYS[1] lock, KEYS[2] its release tombstone; ARGV[1] token, ARGV[2] a
/// unique id of this release call, ARGV[3] the tombstone's TTL, ms.
/// As [`RELEASE`] (cluster): a release leaves its id in the tombstone for a
/// while, so that the cluster client's re-send of the same call (its
/// connection dropped before the reply) answers 1 again instead of 0 or 2.
/// Another call, even with the same token, has another id: it is answered
/// from the lock key alone, and the owner check is the same.
const RELEASE_RESENDABLE: &str = r"
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  return 1
end
if redis.call('GET', KEYS[2]) == ARGV[2] then return 1 end
if not cur then return 0 end
return 2
";

/// KEYS[1] lock, KEYS[2] its waiter marker, KEYS[3] its wake set (waiter
/// id → deadline, [`wake_lua::MARK_WAITING`]), KEYS[4] its fair queue (waiter →
/// ticket), KEYS[5] the fair queue's deadlines (waiter → deadline, server
/// ms), KEYS[6] the wake set's registration times (waiter id → server ms);
/// ARGV[1] token, ARGV[2] the starvation bound, ms ([`wake_lua::STARVING_MS`]),
/// ARGV[3] how long a reservation lives, ms ([`wake_lua::RESERVATION_MS`]),
/// ARGV[4] the releaser's own last registration (it waited for the key; a
/// grant by its timer leaves it in the wake set) or `''`, taken out first.
/// As [`RELEASE`], and when the marker says some wait, hands
/// the key off (`hand_off` in [`wake_lua::FUNCTIONS`]): the live barging
/// waiter that started waiting first, once it has waited the bound, gets the key reserved for it
/// ([`wake_lua::RESERVED_PREFIX`] and its id, for
/// ARGV[3] ms; taken out of the wake set) and is woken;
/// a waiter that has not waited that long is not woken (the releaser may
/// barge back); without a reservation the head of the fair queue (which
/// stays in it until granted) is woken. A wake publishes the id on its
/// process's channel (`verrou:wake:` and the id's first 32 characters, see
/// `notify`; a refused `PUBLISH`, e.g. an ACL without channel rights, only
/// costs the waiter its timer). The key and the marker go in one `DEL` (2
/// deleted: someone waits; the marker is set again while waiters remain),
/// so an uncontended release costs what [`RELEASE`] costs. The shared
/// functions are defined only once someone waits: defining them costs
/// every run of the script, the uncontended ones too.
const RELEASE_NOTIFY: &str = concatcp!(
    r"
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
if cur ~= ARGV[1] then return 2 end
if redis.call('DEL', KEYS[1], KEYS[2]) == 2 then
",
    wake_lua::FUNCTIONS,
    r"
  hand_off(KEYS[1], KEYS[2], KEYS[3], KEYS[6], KEYS[4], KEYS[5], ARGV[2], ARGV[3], ARGV[4])
end
return 1
"
);

/// No keys, no effect: tells at build whether EVALSHA/EVAL are available
/// (they may be renamed away), before acquires bypass scripts.
const PROBE: &str = "return 1";

/// KEYS[1] lock; ARGV[1] token, ARGV[2] ttl ms.
/// 1 renewed, 0 missing, 2 held by another token, or by a value of another
/// type (WRONGTYPE, caught: the lock is lost either way, so say so at once).
const RENEW: &str = r"
local ok, cur = pcall(redis.call, 'GET', KEYS[1])
if not ok then return 2 end
if not cur then return 0 end
if cur ~= ARGV[1] then return 2 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
";

/// KEYS lock keys (one cluster slot); ARGV[1] ttl ms, ARGV[i + 1] the
/// token of KEYS[i]. One code per key, as [`RENEW`] answers: 1 renewed,
/// 0 missing, 2 held by another token or by a value of another type
/// (WRONGTYPE, caught so that the other keys are still renewed).
const RENEW_MANY: &str = r"
local out = {}
for i, key in ipairs(KEYS) do
  local ok, cur = pcall(redis.call, 'GET', key)
  if not ok then
    out[i] = 2
  elseif not cur then
    out[i] = 0
  elseif cur ~= ARGV[i + 1] then
    out[i] = 2
  else
    redis.call('PEXPIRE', key, ARGV[1])
    out[i] = 1
  end
end
return out
";

/// KEYS[1] hash {v value, n version, w write id}; ARGV[1] value,
/// ARGV[2] ttl ms or '' (none), ARGV[3] write id.
/// `{1, version}` created; `{0}` exists; `{-1}` not a versioned value.
const CREATE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then
  local cur = redis.call('HMGET', KEYS[1], 'n', 'w')
  if not cur[1] then return {-1} end
  if cur[2] == ARGV[3] then
    redis.call('HSET', KEYS[1], 'w', ARGV[3])
    return {1, tonumber(cur[1])}
  end
  return {0}
end
local t = redis.call('TIME')
local version = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'n', string.format('%.0f', version), 'w', ARGV[3])
if ARGV[2] ~= '' then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return {1, version}
";

/// KEYS[1] hash; ARGV[1] expected version, ARGV[2] value, ARGV[3] expiry
/// ('' keep, '-1' persist, else ttl ms), ARGV[4] write id.
/// `{1, version}` written; `{0, value, version}` conflict; `{2}` missing;
/// `{-1}` not a versioned value.
const COMPARE_AND_SET: &str = r"
local cur = redis.call('HMGET', KEYS[1], 'v', 'n', 'w')
if not cur[2] then
  if redis.call('EXISTS', KEYS[1]) == 1 then return {-1} end
  return {2}
end
if cur[2] ~= ARGV[1] then
  if cur[3] == ARGV[4] then
    redis.call('HSET', KEYS[1], 'w', ARGV[4])
    return {1, tonumber(cur[2])}
  end
  return {0, cur[1], tonumber(cur[2])}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local version = tonumber(cur[2]) + 1
if now > version then version = now end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'n', string.format('%.0f', version), 'w', ARGV[4])
if ARGV[3] == '-1' then
  redis.call('PERSIST', KEYS[1])
elseif ARGV[3] ~= '' then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return {1, version}
";

/// KEYS[1] hash; ARGV[1] expected version.
/// `{1}` deleted; `{0, version}` conflict; `{2}` missing; `{-1}` not ours.
const DELETE: &str = r"
local n = redis.call('HGET', KEYS[1], 'n')
if not n then
  if redis.call('EXISTS', KEYS[1]) == 1 then return {-1} end
  return {2}
end
if n ~= ARGV[1] then return {0, tonumber(n)} end
redis.call('DEL', KEYS[1])
return {1}
";

/// KEYS[1] hash, KEYS[2] its delete tombstone; ARGV[1] expected version,
/// ARGV[2] a unique id of this delete call, ARGV[3] the tombstone's TTL, ms.
/// As [`DELETE`] (cluster), and a re-send of the same call (see
/// [`RELEASE_RESENDABLE`]) answers `{1}` again.
const DELETE_RESENDABLE: &str = r"
local n = redis.call('HGET', KEYS[1], 'n')
if n and n == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  return {1}
end
if redis.call('GET', KEYS[2]) == ARGV[2] then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return {1}
end
if not n then
  if redis.call('EXISTS', KEYS[1]) == 1 then return {-1} end
  return {2}
end
return {0, tonumber(n)}
";

#[cfg(test)]
mod tests {
    use super::*;
    use lock_redis_family::kinds::multi as multi_lua;

    #[test]
    fn the_release_script_publishes_on_the_notifier_channel() {
        assert!(RELEASE_NOTIFY.contains(&format!(
            "'{}' .. string.sub(w, 1, 32)",
            lock_redis_family::board::CHANNEL_PREFIX
        )));
    }

    #[test]
    fn commands_are_sized_up_front() {
        let script = LuaScript::new(RELEASE);
        let cmd = script.cmd(false, &["k"], &[b"token"]);
        let packed = cmd.get_packed_command();
        assert!(packed.starts_with(b"*5\r\n$7\r\nEVALSHA\r\n$40\r\n"));
        assert!(packed.ends_with(b"$1\r\n1\r\n$1\r\nk\r\n$5\r\ntoken\r\n"));
    }

    #[test]
    fn the_multi_release_wakes_as_the_mutex_release_does() {
        assert!(multi_lua::RELEASE_ALL_NOTIFY.contains("release_and_wake(KEYS[i], KEYS[h + 1]"));
        // The mutex release inlines release_and_wake, so that its
        // uncontended run defines no functions: the same DEL, the same wake.
        assert!(
            multi_lua::RELEASE_ALL_NOTIFY
                .contains("if redis.call('DEL', key, marker) == 2 then wake_after_release(marker, wakes, q, e)")
        );
        assert!(RELEASE_NOTIFY.contains("if redis.call('DEL', KEYS[1], KEYS[2]) == 2 then"));
        assert!(
            RELEASE_NOTIFY
                .contains("hand_off(KEYS[1], KEYS[2], KEYS[3], KEYS[6], KEYS[4], KEYS[5], ARGV[2], ARGV[3], ARGV[4])")
        );
    }
}
