//! The fencing-token rule of the Redis-family grants, as Lua text that the
//! scripts splice in: the mutex's fenced acquire (each backend's own
//! script) and the fair queue's ([`crate::wake::ACQUIRE_FAIR`]).

/// Lua ending a grant: the next fencing token, `max(last + 1, server time
/// in µs)`, stored in the key named by the script's local `fence_key` and
/// answered as `{1, fence}`. `last` (a number: 0 when there was none) is
/// the last token handed out, read from `fence_key` before the script's
/// first write. A counter alone would restart at 1 when its key is lost
/// (eviction, a restart without data, a failover that lost it); the server
/// clock keeps the tokens above the lost ones, provided the clock of the
/// server that takes over is not behind the lost token (clock skew across
/// machines in a failover). Stored with `%.0f`:
/// `tostring` would switch to exponent notation (tokens are about 2^51,
/// exact in Lua's doubles below 2^53).
pub const GRANT_FENCE: &str = r"
local t = redis.call('TIME')
local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
if fence <= last then fence = last + 1 end
redis.call('SET', fence_key, string.format('%.0f', fence))
return {1, fence}
";
