//! Leader election's Lua scripts, shared by the Lua and Tair backends. Keys
//! of `name`, in its slot: `lead` (hash `t` token, `id` identity, `term`,
//! with the lease's TTL) and `term` (the counter, no TTL, so terms never
//! repeat).

#[cfg(doc)]
use super::semaphore_lua::SemaphoreKeys;
use super::semaphore_lua::kind_key;
use crate::error::Result;

/// The two keys of one election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionKeys {
    /// The leader's hash.
    pub lead: String,
    /// The term counter.
    pub term: String,
}

impl ElectionKeys {
    /// The keys of `name`, with the same hash-tag rule as the semaphore's.
    ///
    /// # Errors
    /// As [`SemaphoreKeys::new`].
    pub fn new(name: &str) -> Result<Self> {
        Self::prefixed("", name)
    }

    /// The keys of `name` under `prefix`, with the semaphore's rule (see
    /// [`SemaphoreKeys::prefixed`]).
    ///
    /// # Errors
    /// As [`SemaphoreKeys::new`].
    pub fn prefixed(prefix: &str, name: &str) -> Result<Self> {
        Ok(ElectionKeys {
            lead: kind_key(prefix, name, "leader")?,
            term: kind_key(prefix, name, "leader:term")?,
        })
    }
}

/// KEYS lead, term; ARGV token, identity, ttl ms, and optionally a channel
/// on which a new leader is announced (`PUBLISH`, a `pcall`: a refusal only
/// costs observers their poll). `{1, term}` leads (new or refreshed);
/// `{0, pttl}` another leads.
pub const LEAD: &str = r"
local cur = redis.call('HGET', KEYS[1], 't')
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1, tonumber(redis.call('HGET', KEYS[1], 'term'))}
end
if cur then return {0, redis.call('PTTL', KEYS[1])} end
local term = redis.call('INCR', KEYS[2])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 't', ARGV[1], 'id', ARGV[2], 'term', term)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if ARGV[4] then redis.pcall('PUBLISH', ARGV[4], '1') end
return {1, term}
";

/// KEYS lead; ARGV token, and optionally a channel on which the
/// resignation is announced (as in [`LEAD`]). `1` resigned, `2` another
/// leads, `0` none.
pub const RESIGN: &str = r"
local cur = redis.call('HGET', KEYS[1], 't')
if not cur then return 0 end
if cur ~= ARGV[1] then return 2 end
redis.call('DEL', KEYS[1])
if ARGV[2] then redis.pcall('PUBLISH', ARGV[2], '1') end
return 1
";

/// KEYS lead; ARGV token, ttl ms. `1` renewed, `2` another leads, `0` none.
pub const RENEW: &str = r"
local cur = redis.call('HGET', KEYS[1], 't')
if not cur then return 0 end
if cur ~= ARGV[1] then return 2 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
";
