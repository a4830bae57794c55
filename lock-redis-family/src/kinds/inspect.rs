//! Reading a kind's state without taking anything: the semaphore's permits
//! in use, the read-write lock's readers and writer. Read-only scripts:
//! unlike every other kind script they drop no expired holder (the next
//! write does), they count the live ones only.

use super::rw::RwKeys;
use super::scripted::{KindCall, KindScript, ScriptedKinds, run};
use super::semaphore::SemaphoreKeys;
use lock_core::FencingToken;
use lock_core::LockToken;
use lock_core::PermitsInfo;
use lock_core::Result;
use lock_core::RwInfo;
use lock_core::raw::validate_key;

/// KEYS holders, info (the semaphore's, see [`SemaphoreKeys`]). Reads only:
/// `{permits in use, live holders, stored size (0: none)}`, counting the
/// holders whose deadline is after the server's `TIME`.
pub const SEMAPHORE_INSPECT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
local used = 0
for _, h in ipairs(live) do
  used = used + (tonumber(redis.call('HGET', KEYS[2], h) or '0') or 0)
end
local size = 0
if #live > 0 then size = tonumber(redis.call('HGET', KEYS[2], '_size') or '0') or 0 end
return {used, #live, size}
";

/// KEYS readers, writer, intent, fence (the read-write lock's, see
/// [`RwKeys`]). Reads only: `{live readers, writer (0 or 1), the writer's
/// fencing token (0: none), a live intent (0 or 1)}`.
pub const RW_INSPECT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local readers = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
local writer = redis.call('EXISTS', KEYS[2])
local fence = 0
if writer == 1 then fence = tonumber(redis.call('GET', KEYS[4]) or '0') or 0 end
return {readers, writer, fence, redis.call('EXISTS', KEYS[3])}
";

/// [`lock_core::raw::RwLockBackend::inspect_rw`] over `kinds`.
///
/// # Errors
/// [`lock_core::Error::InvalidArgument`] for a bad or reserved name; the
/// backend's error.
pub async fn rw<K: ScriptedKinds + ?Sized>(kinds: &K, name: &str) -> Result<RwInfo> {
    validate_key(name)?;
    kinds.check_user_key(name)?;
    let keys = RwKeys::prefixed(kinds.kinds_key_prefix(), name)?;
    let token = LockToken::generate()?;
    let call = KindCall {
        op: "read-write inspect",
        name,
        script: KindScript::RwInspect,
        keys: &[&keys.readers, &keys.writer, &keys.intent, &keys.fence],
        args: &[],
        token: &token,
        ttl: None,
    };
    let reply = run(kinds, call).await?;
    let ints = K::reply_ints(&reply).unwrap_or_default();
    match ints.as_slice() {
        [readers, writer, fence, intent] => {
            let waiting = *intent == 1;
            if *writer == 1 {
                let token = u64::try_from(*fence).ok().filter(|f| *f > 0).map(FencingToken);
                return Ok(RwInfo::writer(token).with_writer_waiting(waiting));
            }
            let readers =
                u32::try_from(*readers).map_err(|_| kinds.unexpected_reply("read-write inspect", name, &reply))?;
            Ok(RwInfo::readers(readers).with_writer_waiting(waiting))
        }
        _ => Err(kinds.unexpected_reply("read-write inspect", name, &reply)),
    }
}

/// [`lock_core::raw::SemaphoreBackend::inspect_permits`] over `kinds`.
///
/// # Errors
/// [`lock_core::Error::InvalidArgument`] for a bad or reserved name; the
/// backend's error.
pub async fn semaphore<K: ScriptedKinds + ?Sized>(kinds: &K, name: &str) -> Result<PermitsInfo> {
    validate_key(name)?;
    kinds.check_user_key(name)?;
    let keys = SemaphoreKeys::prefixed(kinds.kinds_key_prefix(), name)?;
    // No grant, release or renewal: the token is only a placeholder.
    let token = LockToken::generate()?;
    let call = KindCall {
        op: "semaphore inspect",
        name,
        script: KindScript::SemaphoreInspect,
        keys: &[&keys.holders, &keys.info],
        args: &[],
        token: &token,
        ttl: None,
    };
    let reply = run(kinds, call).await?;
    let ints = K::reply_ints(&reply).unwrap_or_default();
    let count = |i: usize| ints.get(i).and_then(|n| u32::try_from(*n).ok());
    match (count(0), count(1), count(2)) {
        (Some(in_use), Some(holders), Some(size)) => Ok(PermitsInfo::new(in_use, holders, (size > 0).then_some(size))),
        _ => Err(kinds.unexpected_reply("semaphore inspect", name, &reply)),
    }
}
