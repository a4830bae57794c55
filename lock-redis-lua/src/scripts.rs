//! The Lua scripts, sent as EVALSHA and re-sent as EVAL (which also caches
//! them again) when the server answers NOSCRIPT.
//!
//! Every write script is safe to run twice (a cluster client re-sends a
//! request whose connection dropped): a repeated acquire finds its own token,
//! a repeated versioned write finds its own write id.
//!
//! Numbers: versions and fencing tokens are server time in microseconds
//! (about 2^51 today), exact in Lua's doubles below 2^53, stored with
//! `%.0f` because `tostring` would switch to exponent notation.

use deadpool_redis::redis::{self, Cmd};

/// A script and its SHA1, computed once.
pub(crate) struct LuaScript {
    source: &'static str,
    sha: String,
}

impl LuaScript {
    fn new(source: &'static str) -> Self {
        LuaScript {
            source,
            sha: redis::Script::new(source).get_hash().to_owned(),
        }
    }

    /// `EVALSHA sha numkeys keys... args...`.
    pub(crate) fn evalsha(&self, keys: &[&str], args: &[&[u8]]) -> Cmd {
        Self::build("EVALSHA", &self.sha, keys, args)
    }

    /// `EVAL source numkeys keys... args...` (after NOSCRIPT).
    pub(crate) fn eval(&self, keys: &[&str], args: &[&[u8]]) -> Cmd {
        Self::build("EVAL", self.source, keys, args)
    }

    fn build(command: &str, body: &str, keys: &[&str], args: &[&[u8]]) -> Cmd {
        let mut cmd = redis::cmd(command);
        cmd.arg(body).arg(keys.len());
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
    pub(crate) renew: LuaScript,
    pub(crate) create: LuaScript,
    pub(crate) compare_and_set: LuaScript,
    pub(crate) delete: LuaScript,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            acquire: LuaScript::new(ACQUIRE),
            acquire_fenced: LuaScript::new(ACQUIRE_FENCED),
            release: LuaScript::new(RELEASE),
            renew: LuaScript::new(RENEW),
            create: LuaScript::new(CREATE),
            compare_and_set: LuaScript::new(COMPARE_AND_SET),
            delete: LuaScript::new(DELETE),
        }
    }
}

/// KEYS[1] lock; ARGV[1] token, ARGV[2] ttl ms.
/// `{1}` acquired; `{0, pttl}` held by another token.
const ACQUIRE: &str = r"
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1}
end
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1}
end
return {0, redis.call('PTTL', KEYS[1])}
";

/// KEYS[1] lock, KEYS[2] fence (same slot, no TTL); ARGV as [`ACQUIRE`].
/// `{1, fence}` acquired; `{0, pttl}` held. The fence is
/// `max(last + 1, server time in µs)`: it increases per grant, and keeps
/// increasing even if the fence key was lost (eviction, failover).
const ACQUIRE_FENCED: &str = r"
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  local t = redis.call('TIME')
  local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if fence <= last then fence = last + 1 end
  redis.call('SET', KEYS[2], string.format('%.0f', fence))
  return {1, fence}
end
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0') or 0}
end
return {0, redis.call('PTTL', KEYS[1])}
";

/// KEYS[1] lock; ARGV[1] token, ARGV[2] (optional) channel to PUBLISH on.
/// 1 released, 0 missing, 2 held by another token.
const RELEASE: &str = r"
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
if cur ~= ARGV[1] then return 2 end
redis.call('DEL', KEYS[1])
if ARGV[2] then redis.call('PUBLISH', ARGV[2], '1') end
return 1
";

/// KEYS[1] lock; ARGV[1] token, ARGV[2] ttl ms.
/// 1 renewed, 0 missing, 2 held by another token.
const RENEW: &str = r"
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
if cur ~= ARGV[1] then return 2 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
";

/// KEYS[1] hash {v value, n version, w write id}; ARGV[1] value,
/// ARGV[2] ttl ms or '' (none), ARGV[3] write id.
/// `{1, version}` created; `{0}` exists; `{-1}` not a versioned value.
const CREATE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then
  local cur = redis.call('HMGET', KEYS[1], 'n', 'w')
  if not cur[1] then return {-1} end
  if cur[2] == ARGV[3] then return {1, tonumber(cur[1])} end
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
  if cur[3] == ARGV[4] then return {1, tonumber(cur[2])} end
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
