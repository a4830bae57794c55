//! Reading a lock key without taking it, as Lua text both backends run.

/// `KEYS[1]` the lock, `KEYS[2]` (optional, with fencing) its fence counter;
/// `ARGV[1]` the prefix of a reservation's value
/// ([`crate::wake::RESERVED_PREFIX`]: a key reserved for a woken waiter
/// has no holder). Reads only. `{0}` free; `{1, pttl, fence}` held, where
/// `fence` is the counter (the holder's token: a grant is the counter's
/// last write), 0 without one. A key of another type (a versioned value)
/// counts as held, as an acquire sees it, with no fence.
pub const INSPECT_LOCK: &str = r"
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then return {0} end
if kind ~= 'string' then return {1, redis.call('PTTL', KEYS[1]), 0} end
local cur = redis.call('GET', KEYS[1])
if string.sub(cur, 1, #ARGV[1]) == ARGV[1] then return {0} end
local fence = 0
if KEYS[2] then fence = tonumber(redis.call('GET', KEYS[2]) or '0') or 0 end
return {1, redis.call('PTTL', KEYS[1]), fence}
";
