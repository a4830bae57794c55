//! Lua shared by backends whose servers run Redis scripts (redis-lua, and
//! Tair's Redis-compatible servers): release notifications that wake one
//! waiter, and the fair (FIFO) queue. Each backend names the helper keys
//! (they are the scripts' KEYS) and composes its own release script around
//! [`FUNCTIONS`]; the protocol (waiter ids, `verrou:wake:` channels) is one.
//!
//! For backend authors; applications never need this module.

use std::time::Duration;

use const_format::concatcp;
use lock_core::token::FencingToken;

/// How much longer than its wait a waiter's marker lives, ms: the round
/// trips between the waiter and the server. [`FUNCTIONS`] uses the same.
pub const WAITING_MARGIN_MS: u64 = 100;

/// The functions the scripts below share: the server clock in ms
/// (`now_ms`), the head of a fair queue once the waiters whose entry
/// expired are gone from it (`fair_head(q, e, now)`: KEYS `q` ticket by
/// waiter, `e` deadline by waiter), `wake(id)` (publishes the id on its
/// process's channel, `verrou:wake:` and the id's first 32 characters; a
/// refused `PUBLISH`, e.g. an ACL without channel rights, only costs the
/// waiter its timer), `wake_after_release(marker, wakes, q, e)` (after a
/// release that found the marker: wakes the live barging waiter whose wait
/// ends last and the fair queue's head, then sets the marker again while
/// waiters remain), `release_and_wake(key, marker, wakes, q, e)` (deletes
/// the key and its marker in one `DEL`; wakes only when the marker was
/// there), and `extend(key, ms)`.
///
/// Defining them costs every run of a script: a script whose common path
/// needs none (an uncontended release) defines them inside the branch
/// that does.
pub const FUNCTIONS: &str = concatcp!(
    r"
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function fair_head(q, e, now)
  local dead = redis.call('ZRANGEBYSCORE', e, '-inf', now)
  for _, w in ipairs(dead) do
    redis.call('ZREM', q, w)
    redis.call('ZREM', e, w)
  end
  return redis.call('ZRANGE', q, 0, 0)[1]
end
local function wake(w)
  redis.pcall('PUBLISH', '",
    crate::board::CHANNEL_PREFIX,
    r"' .. string.sub(w, 1, 32), w)
end
local function wake_after_release(marker, wakes, q, e)
  local now = now_ms()
  redis.call('ZREMRANGEBYSCORE', wakes, '-inf', now)
  local w = redis.call('ZRANGE', wakes, -1, -1)[1]
  if w then
    redis.call('ZREM', wakes, w)
    wake(w)
  end
  local h = fair_head(q, e, now)
  if h then wake(h) end
  local last = 0
  for _, z in ipairs({wakes, e}) do
    local top = redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')[2]
    if top and tonumber(top) > last then last = tonumber(top) end
  end
  -- Waiters left: the marker again, until the last wait ends (+ the
  -- margin, WAITING_MARGIN_MS).
  if last > now then redis.call('SET', marker, '1', 'PX', last - now + ",
    WAITING_MARGIN_MS,
    r") end
end
local function release_and_wake(key, marker, wakes, q, e)
  if redis.call('DEL', key, marker) == 2 then wake_after_release(marker, wakes, q, e) end
end
local function extend(key, ms)
  if redis.call('PTTL', key) < tonumber(ms) then redis.call('PEXPIRE', key, ms) end
end
"
);

/// `KEYS[1]` lock, `KEYS[2]` its waiter marker, `KEYS[3]` its wake set; `ARGV[1]`
/// how long the marker lives, ms, `ARGV[2]` the waiter's id, `ARGV[3]` how long
/// it waits, ms. Sent by a (barging) waiter once subscribed: 0 when the
/// lock is already free (do not wait), else 1 after joining the wake set
/// until its wait ends (its entry expires with its timer, so a release
/// never wakes a wait that is over).
pub const MARK_WAITING: &str = concatcp!(
    FUNCTIONS,
    r"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('ZADD', KEYS[3], now_ms() + tonumber(ARGV[3]), ARGV[2])
extend(KEYS[3], ARGV[1])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
end
return 1
"
);

/// `KEYS[1]` lock, `KEYS[2]` waiter marker, `KEYS[3]` fair queue, `KEYS[4]` its
/// deadlines, `KEYS[5]` (optional) fence; `ARGV[1]` token, `ARGV[2]` ttl ms,
/// `ARGV[3]` waiter id, `ARGV[4]` claim ms. Takes the lock when it is free and
/// the waiter heads the queue of live waiters (or it is empty): `{1}`, or
/// `{1, fence}` with `KEYS[5]` ([`crate::fence::GRANT_FENCE`]); else queues the
/// waiter once (ticket after the last), keeps its entry `claim` ms, and
/// answers `{0, pttl}` to the head (when to look again if nobody releases)
/// or `{0, -1}` to the others. The marker makes releases wake the head.
pub const ACQUIRE_FAIR: &str = concatcp!(
    FUNCTIONS,
    r"
local cur = redis.call('GET', KEYS[1])
local last = false
if KEYS[5] then last = redis.call('GET', KEYS[5]) end
last = tonumber(last or '0') or 0
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, last}
end
local now = now_ms()
local head = fair_head(KEYS[3], KEYS[4], now)
if not cur and (not head or head == ARGV[3]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('ZREM', KEYS[3], ARGV[3])
  redis.call('ZREM', KEYS[4], ARGV[3])
  if not KEYS[5] then return {1} end
  local fence_key = KEYS[5]
",
    crate::fence::GRANT_FENCE,
    r"
end
if not redis.call('ZSCORE', KEYS[3], ARGV[3]) then
  local tail = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  local ticket = 1
  if tail[2] then ticket = tonumber(tail[2]) + 1 end
  redis.call('ZADD', KEYS[3], ticket, ARGV[3])
  if not head then head = ARGV[3] end
end
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[4]), ARGV[3])
extend(KEYS[3], ARGV[4])
extend(KEYS[4], ARGV[4])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[4]) then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[4])
end
if head == ARGV[3] then return {0, redis.call('PTTL', KEYS[1])} end
return {0, -1}
"
);

/// What [`ACQUIRE_FAIR`] answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FairReply {
    /// `{1}` or `{1, fence}`: the lock is the waiter's, with its fencing
    /// token when the call named a fence key.
    Granted(Option<FencingToken>),
    /// `{0, pttl}`: not yet; look again after the holder's remaining TTL
    /// when there is one (`-1`, `-2`: none).
    Held(Option<Duration>),
}

impl FairReply {
    /// Reads [`ACQUIRE_FAIR`]'s reply from its first two elements as
    /// integers (`None` where missing or not one): `fenced`, the call named
    /// a fence key, so a grant must carry its token. `None`: a reply of
    /// another shape.
    #[must_use]
    pub fn read(code: Option<i64>, second: Option<i64>, fenced: bool) -> Option<FairReply> {
        match code? {
            1 if fenced => Some(FairReply::Granted(Some(FencingToken(u64::try_from(second?).ok()?)))),
            1 => Some(FairReply::Granted(None)),
            0 => Some(FairReply::Held(
                second.and_then(|ms| u64::try_from(ms).ok()).map(Duration::from_millis),
            )),
            _ => None,
        }
    }
}

/// KEYS as [`ACQUIRE_FAIR`] (no fence); `ARGV[1]` waiter id. Takes the
/// waiter out of the queue; if the lock is free, wakes the (new) head, so
/// a waiter that gives up never strands the queue. Always 1.
pub const LEAVE_QUEUE: &str = concatcp!(
    FUNCTIONS,
    r"
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  local h = fair_head(KEYS[3], KEYS[4], now_ms())
  if h then wake(h) end
end
return 1
"
);
