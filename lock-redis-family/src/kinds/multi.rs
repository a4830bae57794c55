//! The multi-key lock's Lua scripts, shared by every backend whose server
//! runs Lua (Redis/Valkey, Tair). Keys hold the token as a plain string, as
//! the mutex's keys do, so both kinds exclude each other. Every `GET` runs
//! before the first write: a key of another type fails the script before it
//! changed anything.

/// KEYS the n sorted keys, then their n fence keys (the mutex's fence
/// counters, same slot, no TTL); ARGV token, ttl ms. `{1, fence}` took them
/// all; `{0, pttl}` a key is held by another token (nothing written).
///
/// The one fencing token of the grant is above every earlier token of each
/// of its keys (a plain lock's or another set's: the counters are the
/// mutex's, and the rule is its rule, so it holds even if a counter was
/// lost), and every counter is set to it: a resource keyed by any of the
/// keys can refuse a stale holder's write by comparing tokens.
pub const ACQUIRE_ALL: &str = r"
local n = #KEYS / 2
for i = 1, n do
  local cur = redis.call('GET', KEYS[i])
  if cur and cur ~= ARGV[1] then return {0, redis.call('PTTL', KEYS[i])} end
end
local t = redis.call('TIME')
local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
for i = n + 1, 2 * n do
  local last = tonumber(redis.call('GET', KEYS[i]) or '0') or 0
  if fence <= last then fence = last + 1 end
end
local f = string.format('%.0f', fence)
for i = 1, n do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  redis.call('SET', KEYS[n + i], f)
end
return {1, fence}
";

/// KEYS the keys; ARGV token. Deletes each key the token holds; `1` all were
/// ours, `2` some key is another token's, `0` otherwise (some missing).
pub const RELEASE_ALL: &str = r"
local mine, other = 0, 0
for _, k in ipairs(KEYS) do
  local cur = redis.call('GET', k)
  if cur == ARGV[1] then
    redis.call('DEL', k)
    mine = mine + 1
  elseif cur then
    other = other + 1
  end
end
if mine == #KEYS then return 1 end
if other > 0 then return 2 end
return 0
";

/// KEYS the keys; ARGV token, ttl ms. `1` renewed all; `2` some key is
/// another token's, `0` some key is missing (nothing renewed in either case).
pub const RENEW_ALL: &str = r"
for _, k in ipairs(KEYS) do
  local cur = redis.call('GET', k)
  if not cur then return 0 end
  if cur ~= ARGV[1] then return 2 end
end
for _, k in ipairs(KEYS) do
  redis.call('PEXPIRE', k, ARGV[2])
end
return 1
";
