//! The multi-key lock's Lua scripts, shared by every backend whose server
//! runs Lua (Redis/Valkey, Tair). Keys hold the token as a plain string, as
//! the mutex's keys do, so both kinds exclude each other. Every `GET` runs
//! before the first write: a key of another type fails the script before it
//! changed anything.
//!
//! The functions run them through [`ScriptedKinds`]: on a cluster all keys
//! must share one slot (one script touches them all), else the call fails
//! with `InvalidArgument` before anything is sent. Under replica
//! acknowledgement a grant WAITs like a mutex acquire (a shortfall under
//! `OnShortfall::ReleaseAndFail` gives the keys back and fails the acquire)
//! and a renewal WAITs too and counts only once confirmed.

use std::time::Duration;

use const_format::concatcp;
use lock_core::backend::{AcquireOutcome, Lease, ReleaseOutcome, RenewOutcome};
use lock_core::error::{Error, Result};
use lock_core::raw::{ttl_millis, validate_key, validate_ttl};
use lock_core::token::{FencingToken, LockToken};

use super::scripted::{KindCall, KindScript, ScriptedKinds, acked_grant_with, released, renewed, run};

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

/// KEYS the `n` keys of a multi-key lock, then for each its waiter marker,
/// wake set, fair queue and queue deadlines (as the mutex's release with
/// notifications); `ARGV[1]` token. As [`RELEASE_ALL`] (every `GET` before the
/// first write), and each freed key wakes its waiters as a mutex release
/// does.
pub const RELEASE_ALL_NOTIFY: &str = concatcp!(
    crate::wake::FUNCTIONS,
    r"
local n = #KEYS / 5
local cur, mine, other = {}, 0, 0
for i = 1, n do
  cur[i] = redis.call('GET', KEYS[i])
  if cur[i] == ARGV[1] then
    mine = mine + 1
  elseif cur[i] then
    other = other + 1
  end
end
for i = 1, n do
  if cur[i] == ARGV[1] then
    local h = n + 4 * (i - 1)
    release_and_wake(KEYS[i], KEYS[h + 1], KEYS[h + 2], KEYS[h + 3], KEYS[h + 4])
  end
end
if mine == n then return 1 end
if other > 0 then return 2 end
return 0
"
);

/// Checks a multi-key lock's `set`: at least one key, each valid and not
/// reserved by the backend, and all in one slot on a cluster, with the fence
/// counters the grant writes ([`ScriptedKinds::fence_key`]: a key with `}`
/// and no hash tag has a counter in another slot).
fn check_set<K: ScriptedKinds + ?Sized>(kinds: &K, set: &[&str]) -> Result<()> {
    let Some(first) = set.first() else {
        return Err(Error::invalid("a multi-key lock needs at least one key"));
    };
    set.iter()
        .try_for_each(|k| validate_key(k).and_then(|()| kinds.check_user_key(k)))?;
    if set.iter().any(|k| !kinds.same_slot(first, k)) {
        return Err(Error::invalid(format!(
            "multi-key lock over {set:?}: on a cluster every key must be in one hash slot; give them a common \
             hash tag, e.g. {{account}}:1 and {{account}}:2"
        )));
    }
    if let Some(key) = set.iter().find(|k| !kinds.same_slot(first, &kinds.fence_key(k))) {
        return Err(Error::invalid(format!(
            "multi-key lock over {set:?}: on a cluster the key {key:?} (a '}}' without a hash tag) cannot share \
             a hash slot with its fence counter; give the keys a hash tag, e.g. {{account}}:1"
        )));
    }
    Ok(())
}

/// [`lock_core::kinds::multi::MultiLockBackend::try_acquire_all`] with
/// [`ACQUIRE_ALL`] over the keys and their fence counters
/// ([`ScriptedKinds::fence_key`]).
///
/// # Errors
/// As the trait method.
///
/// # Cancel safety
/// As the trait method.
pub async fn try_acquire_all<K: ScriptedKinds + ?Sized>(
    kinds: &K,
    set: &[&str],
    token: &LockToken,
    ttl: Duration,
) -> Result<AcquireOutcome> {
    check_set(kinds, set)?;
    validate_ttl(ttl)?;
    // The mutex's fence counters (written whatever the `fencing` setting:
    // a multi-key grant always carries its token).
    let fences: Vec<String> = set.iter().map(|k| kinds.fence_key(k)).collect();
    let keys: Vec<&str> = set.iter().copied().chain(fences.iter().map(String::as_str)).collect();
    let op = "multi-key acquire";
    let (reply, replication) = kinds
        .run_kind_script(KindCall {
            op,
            name: set[0],
            script: KindScript::MultiAcquire,
            token,
            ttl: Some(ttl),
            keys: &keys,
            args: &[&token.hex_bytes(), ttl_millis(ttl).to_string().as_bytes()],
        })
        .await?;
    let outcome = match K::reply_ints(&reply).as_deref() {
        Some([1, fence]) => {
            AcquireOutcome::Acquired(Lease::new().with_fencing_token(u64::try_from(*fence).ok().map(FencingToken)))
        }
        Some([0, pttl]) => {
            return Ok(AcquireOutcome::Held {
                retry_after: u64::try_from(*pttl).ok().map(Duration::from_millis),
            });
        }
        _ => return Err(kinds.unexpected_reply(op, set[0], &reply)),
    };
    // Boxed: a shortfall is rare, and every acquire's future would carry a release's.
    let give_back = || Box::pin(release_all(kinds, set, token));
    acked_grant_with(
        kinds,
        outcome,
        replication,
        give_back,
        |acknowledged, requested, ack, released| kinds.multi_shortfall(set, acknowledged, requested, ack, released),
    )
    .await
}

/// [`lock_core::kinds::multi::MultiLockBackend::release_all`] with
/// [`RELEASE_ALL`], or [`RELEASE_ALL_NOTIFY`] where
/// [`ScriptedKinds::multi_release_waiters`] names the waiters' keys.
///
/// # Errors
/// As the trait method.
///
/// # Cancel safety
/// As the trait method.
pub async fn release_all<K: ScriptedKinds + ?Sized>(
    kinds: &K,
    set: &[&str],
    token: &LockToken,
) -> Result<ReleaseOutcome> {
    check_set(kinds, set)?;
    let waiters = kinds.multi_release_waiters(set);
    let with_waiters: Vec<&str>;
    let (script, keys) = match &waiters {
        Some(waiters) => {
            with_waiters = set.iter().copied().chain(waiters.iter().map(String::as_str)).collect();
            (KindScript::MultiReleaseNotify, with_waiters.as_slice())
        }
        None => (KindScript::MultiRelease, set),
    };
    let op = "multi-key release";
    let reply = run(
        kinds,
        KindCall {
            op,
            name: set[0],
            script,
            token,
            ttl: None,
            keys,
            args: &[&token.hex_bytes()],
        },
    )
    .await?;
    released(kinds, op, set[0], &reply, 2)
}

/// [`lock_core::kinds::multi::MultiLockBackend::renew_all`] with
/// [`RENEW_ALL`].
///
/// # Errors
/// As the trait method.
///
/// # Cancel safety
/// As the trait method.
pub async fn renew_all<K: ScriptedKinds + ?Sized>(
    kinds: &K,
    set: &[&str],
    token: &LockToken,
    ttl: Duration,
) -> Result<RenewOutcome> {
    check_set(kinds, set)?;
    validate_ttl(ttl)?;
    let op = "multi-key renew";
    let (reply, replication) = kinds
        .run_kind_script(KindCall {
            op,
            name: set[0],
            script: KindScript::MultiRenew,
            token,
            ttl: Some(ttl),
            keys: set,
            args: &[&token.hex_bytes(), ttl_millis(ttl).to_string().as_bytes()],
        })
        .await?;
    // Under replica acknowledgement a renewal counts once confirmed.
    let outcome = renewed(kinds, op, set[0], &reply, 2)?;
    kinds.counted_renewal(set[0], outcome, replication)
}
