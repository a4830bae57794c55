//! The read-write lock's Lua scripts and keys, shared by the Lua and Tair
//! backends. Keys of `name`, all in its slot: `readers` (sorted set, token →
//! deadline in server ms), `writer` (string: token, with a TTL), `intent`
//! (string: a waiting writer's token, with its TTL; see the policy in
//! [`super::rw`]), `upgrader` (string: which reader holds the upgradeable
//! read, with its TTL; it counts only while that token is a reader), `fence` (the last writer's fencing token, no TTL) and
//! `gone` (tokens whose release found nothing, refused by later grants for
//! [`super::semaphore::GONE_WINDOW_MS`], as the semaphore's: a clean-up
//! release that reached the server before its own grant, across a
//! reconnect, makes that late grant fail instead of leaving a reader or a
//! writer nobody owns for its TTL).

#[cfg(doc)]
use super::semaphore::SemaphoreKeys;
use std::time::Duration;

use super::scripted::{KindCall, KindScript, ScriptedKinds, acked_grant, refuse_under_ack, released, renewed, run};
use super::semaphore::{GONE_FUNCTIONS, kind_key};
use lock_core::Result;
use lock_core::RwMode;
use lock_core::raw::{conversion_not_held, ttl_millis, validate_key, validate_ttl};
use lock_core::{AcquireOutcome, Lease, ReleaseOutcome, RenewOutcome};
use lock_core::{FencingToken, LockToken};

/// The keys of one read-write lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RwKeys {
    /// Sorted set of reader deadlines.
    pub readers: String,
    /// The writer's token.
    pub writer: String,
    /// A waiting writer's token.
    pub intent: String,
    /// The last writer's fencing token (no TTL).
    pub fence: String,
    /// Tokens released before their grant arrived.
    pub gone: String,
    /// The upgradeable reader's token.
    pub upgrader: String,
}

impl RwKeys {
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
        Ok(RwKeys {
            readers: kind_key(prefix, name, "rw:readers")?,
            writer: kind_key(prefix, name, "rw:writer")?,
            intent: kind_key(prefix, name, "rw:intent")?,
            fence: kind_key(prefix, name, "rw:fence")?,
            gone: kind_key(prefix, name, "rw:gone")?,
            upgrader: kind_key(prefix, name, "rw:upgrader")?,
        })
    }
}

macro_rules! rw_prologue {
    () => {
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local function expire_readers()
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if last[2] then redis.call('PEXPIREAT', KEYS[1], last[2]) end
end
"
    };
}

/// KEYS readers, writer, intent, fence, gone, upgrader; ARGV token, ttl
/// ms, mode (`r` read, `u` upgradeable read, `w` waiting writer, `W` writer
/// without intent, `U` upgrade the token's upgradeable read, `D` downgrade
/// its write). `{1}` a reader granted, `{1, fence}` a writer granted (it
/// clears the intent; its fencing token is above every earlier writer's,
/// even if the fence key was lost, as the mutex's); `{0, retry_ms}` refused
/// (a refused waiting writer or upgrade leaves its intent unless another
/// writer's is live; a token already released, in `gone`, is refused with
/// nothing written); `{-1}` an upgrade or downgrade of a token holding
/// neither the upgradeable read nor the write (nothing written).
pub const ACQUIRE: &str = const_format::concatcp!(
    rw_prologue!(),
    GONE_FUNCTIONS,
    r"
if is_gone(KEYS[5], ARGV[1], now) then return {0, 1} end
local ttl = tonumber(ARGV[2])
local mode = ARGV[3]
local writer = redis.call('GET', KEYS[2])
local function upgrader()
  local u = redis.call('GET', KEYS[6])
  if u and redis.call('ZSCORE', KEYS[1], u) then return u end
  return nil
end
local function hold_read(upgradeable)
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  expire_readers()
  if upgradeable then redis.call('SET', KEYS[6], ARGV[1], 'PX', ttl) end
  return {1}
end
local function hold_write()
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ttl)
  redis.call('DEL', KEYS[3])
  local last = tonumber(redis.call('GET', KEYS[4]) or '0') or 0
  local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if fence <= last then fence = last + 1 end
  redis.call('SET', KEYS[4], string.format('%.0f', fence))
  return {1, fence}
end
local function leave_intent()
  local intent = redis.call('GET', KEYS[3])
  if not intent or intent == ARGV[1] then redis.call('SET', KEYS[3], ARGV[1], 'PX', ttl) end
end
if mode == 'D' then
  if writer == ARGV[1] then
    redis.call('DEL', KEYS[2])
  elseif upgrader() ~= ARGV[1] then
    return {-1}
  end
  return hold_read(true)
end
if writer == ARGV[1] and (mode == 'U' or mode == 'w' or mode == 'W') then
  redis.call('PEXPIRE', KEYS[2], ttl)
  return {1, tonumber(redis.call('GET', KEYS[4]) or '0') or 0}
end
if mode == 'U' then
  if upgrader() ~= ARGV[1] then return {-1} end
  local first = redis.call('ZRANGE', KEYS[1], 0, 1, 'WITHSCORES')
  local other = first[2]
  if first[1] == ARGV[1] then other = first[4] end
  if other then
    leave_intent()
    return {0, math.max(1, tonumber(other) - now)}
  end
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('DEL', KEYS[6])
  return hold_write()
end
if mode == 'r' or mode == 'u' then
  local u = upgrader()
  if redis.call('ZSCORE', KEYS[1], ARGV[1]) and (mode == 'r' or u == ARGV[1]) then
    return hold_read(mode == 'u')
  end
  if writer then return {0, math.max(1, redis.call('PTTL', KEYS[2]))} end
  local intent = redis.call('GET', KEYS[3])
  if intent and intent ~= ARGV[1] then return {0, math.max(1, redis.call('PTTL', KEYS[3]))} end
  if mode == 'u' and u then
    return {0, math.max(1, tonumber(redis.call('ZSCORE', KEYS[1], u)) - now)}
  end
  return hold_read(mode == 'u')
end
if writer or redis.call('ZCARD', KEYS[1]) > 0 then
  if mode == 'w' then leave_intent() end
  local wait = 1
  if writer then
    wait = redis.call('PTTL', KEYS[2])
  else
    local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    wait = tonumber(first[2]) - now
  end
  return {0, math.max(1, wait)}
end
return hold_write()
"
);

/// KEYS readers, writer, intent, gone, upgrader; ARGV token. `1` released,
/// `0` missing (expired or never granted: the token is then refused by
/// grants for [`super::semaphore::GONE_WINDOW_MS`]). Also drops the token's
/// intent and its upgradeable mark.
pub const RELEASE: &str = const_format::concatcp!(
    rw_prologue!(),
    GONE_FUNCTIONS,
    r"
if redis.call('GET', KEYS[3]) == ARGV[1] then redis.call('DEL', KEYS[3]) end
if redis.call('GET', KEYS[5]) == ARGV[1] then redis.call('DEL', KEYS[5]) end
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
  return 1
end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then return 1 end
record_gone(KEYS[4], ARGV[1], now)
return 0
"
);

/// KEYS readers, writer, upgrader; ARGV token, ttl ms. `1` renewed, `0`
/// missing (an expired reader was pruned above: never revived).
pub const RENEW: &str = concat!(
    rw_prologue!(),
    r"
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
  expire_readers()
  if redis.call('GET', KEYS[3]) == ARGV[1] then redis.call('PEXPIRE', KEYS[3], ARGV[2]) end
  return 1
end
return 0
"
);

/// The keys of `name` on `kinds`. Under replica acknowledgement, grants and
/// renewals `WAIT` where the backend follows kind scripts with it
/// ([`ScriptedKinds::semaphore_waits_for_replicas`]), and are refused
/// elsewhere.
fn keys_on<K: ScriptedKinds + ?Sized>(kinds: &K, name: &str) -> Result<RwKeys> {
    if !kinds.semaphore_waits_for_replicas() {
        refuse_under_ack(kinds, "read-write locks with replica acknowledgement")?;
    }
    validate_key(name)?;
    kinds.check_user_key(name)?;
    RwKeys::prefixed(kinds.kinds_key_prefix(), name)
}

/// [`lock_core::raw::RwLockBackend::try_acquire_rw`] with [`ACQUIRE`].
///
/// # Errors
/// As the trait method.
///
/// # Cancel safety
/// As the trait method.
pub async fn try_acquire<K: ScriptedKinds + ?Sized>(
    kinds: &K,
    name: &str,
    mode: RwMode,
    waiting: bool,
    token: &LockToken,
    ttl: Duration,
) -> Result<AcquireOutcome> {
    let mode: &[u8] = match (mode, waiting) {
        (RwMode::Read, _) => b"r",
        (RwMode::Upgradeable, _) => b"u",
        (RwMode::Write, true) => b"w",
        (RwMode::Write, false) => b"W",
    };
    acquire(kinds, name, mode, token, ttl).await
}

/// [`lock_core::raw::RwLockBackend::upgrade_rw`] with [`ACQUIRE`].
///
/// # Errors
/// As the trait method.
///
/// # Cancel safety
/// As the trait method.
pub async fn upgrade<K: ScriptedKinds + ?Sized>(
    kinds: &K,
    name: &str,
    token: &LockToken,
    ttl: Duration,
) -> Result<AcquireOutcome> {
    acquire(kinds, name, b"U", token, ttl).await
}

/// [`lock_core::raw::RwLockBackend::downgrade_rw`] with [`ACQUIRE`].
///
/// # Errors
/// As the trait method.
///
/// # Cancel safety
/// As the trait method.
pub async fn downgrade<K: ScriptedKinds + ?Sized>(
    kinds: &K,
    name: &str,
    token: &LockToken,
    ttl: Duration,
) -> Result<AcquireOutcome> {
    acquire(kinds, name, b"D", token, ttl).await
}

/// [`ACQUIRE`] in `mode` (its one-letter argument).
async fn acquire<K: ScriptedKinds + ?Sized>(
    kinds: &K,
    name: &str,
    mode: &[u8],
    token: &LockToken,
    ttl: Duration,
) -> Result<AcquireOutcome> {
    let keys = keys_on(kinds, name)?;
    validate_ttl(ttl)?;
    let op = "read-write acquire";
    let (reply, replication) = kinds
        .run_kind_script(KindCall {
            op,
            name,
            script: KindScript::RwAcquire,
            token,
            ttl: Some(ttl),
            keys: &[
                &keys.readers,
                &keys.writer,
                &keys.intent,
                &keys.fence,
                &keys.gone,
                &keys.upgrader,
            ],
            args: &[&token.hex_bytes(), ttl_millis(ttl).to_string().as_bytes(), mode],
        })
        .await?;
    let outcome = match K::reply_ints(&reply).as_deref() {
        Some([1]) => Ok(AcquireOutcome::Acquired(Lease::new())),
        Some([1, fence]) => Ok(AcquireOutcome::Acquired(
            Lease::new().with_fencing_token(u64::try_from(*fence).ok().filter(|f| *f > 0).map(FencingToken)),
        )),
        Some([0, wait]) => Ok(AcquireOutcome::Held {
            retry_after: u64::try_from(*wait).ok().map(Duration::from_millis),
        }),
        Some([-1]) => Err(conversion_not_held(name)),
        _ => Err(kinds.unexpected_reply(op, name, &reply)),
    }?;
    acked_grant(kinds, name, "took the read-write lock", outcome, replication, || {
        release(kinds, name, token)
    })
    .await
}

/// [`lock_core::raw::RwLockBackend::release_rw`] with [`RELEASE`].
///
/// # Errors
/// As the trait method.
///
/// # Cancel safety
/// As the trait method.
pub async fn release<K: ScriptedKinds + ?Sized>(kinds: &K, name: &str, token: &LockToken) -> Result<ReleaseOutcome> {
    let keys = keys_on(kinds, name)?;
    let op = "read-write release";
    let reply = run(
        kinds,
        KindCall {
            op,
            name,
            script: KindScript::RwRelease,
            token,
            ttl: None,
            keys: &[&keys.readers, &keys.writer, &keys.intent, &keys.gone, &keys.upgrader],
            args: &[&token.hex_bytes()],
        },
    )
    .await?;
    released(kinds, op, name, &reply, 1)
}

/// [`lock_core::raw::RwLockBackend::renew_rw`] with [`RENEW`].
///
/// # Errors
/// As the trait method.
///
/// # Cancel safety
/// As the trait method.
pub async fn renew<K: ScriptedKinds + ?Sized>(
    kinds: &K,
    name: &str,
    token: &LockToken,
    ttl: Duration,
) -> Result<RenewOutcome> {
    let keys = keys_on(kinds, name)?;
    validate_ttl(ttl)?;
    let op = "read-write renew";
    let (reply, replication) = kinds
        .run_kind_script(KindCall {
            op,
            name,
            script: KindScript::RwRenew,
            token,
            ttl: Some(ttl),
            keys: &[&keys.readers, &keys.writer, &keys.upgrader],
            args: &[&token.hex_bytes(), ttl_millis(ttl).to_string().as_bytes()],
        })
        .await?;
    // Under replica acknowledgement a renewal counts once confirmed.
    let outcome = renewed(kinds, op, name, &reply, 1)?;
    kinds.counted_renewal(name, outcome, replication)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_the_name_slot_tag() {
        let k = RwKeys::new("cfg").expect("plain name");
        assert_eq!(k.readers, "rw:readers:{cfg}");
        assert_eq!(k.writer, "rw:writer:{cfg}");
        assert_eq!(k.intent, "rw:intent:{cfg}");
        assert_eq!(k.fence, "rw:fence:{cfg}");
        assert_eq!(k.gone, "rw:gone:{cfg}");
        assert_eq!(k.upgrader, "rw:upgrader:{cfg}");
    }
}
