//! The multi-key lock's Lua scripts, shared by every backend whose server
//! runs Lua (Redis/Valkey, Tair). Keys hold the token as a plain string, as
//! the mutex's keys do, so both kinds exclude each other; a mutex waiter may
//! have appended [`crate::wake::WAITER_MARK`] to a key's value (on Tair),
//! and every script here takes the token with it as the token. Every `GET` runs
//! before the first write: a key of another type fails the script before it
//! changed anything.
//!
//! The functions run them through [`ScriptedKinds`]: on a cluster all keys
//! must share one slot (one script touches them all), else the call fails
//! with `InvalidArgument` before anything is sent. Under replica
//! acknowledgement a grant WAITs like a mutex acquire (a shortfall under
//! `OnShortfall::ReleaseAndFail` gives the keys back and fails the acquire)
//! and a renewal WAITs too and counts only once confirmed.
//!
//! A release that found none of the keys held by its token records the
//! token in the set's `gone` record ([`gone_key`]: one per set, named after
//! its smallest key, under the backend's reserved prefix and in the set's
//! slot), and a grant with a recorded token is refused for
//! [`super::semaphore::GONE_WINDOW_MS`], as the semaphore's acquire: a
//! clean-up release that reached the server before its own grant, across a
//! reconnect, makes that late grant fail instead of leaving keys nobody owns
//! for their TTL.

use std::time::Duration;

use const_format::concatcp;
use lock_core::raw::{ttl_millis, validate_key, validate_ttl};
use lock_core::{AcquireOutcome, Lease, ReleaseOutcome, RenewOutcome};
use lock_core::{Error, Result};
use lock_core::{FencingToken, LockToken};

use super::scripted::{KindCall, KindScript, ScriptedKinds, acked_grant_with, released, renewed, run};
use super::semaphore::GONE_FUNCTIONS;
use crate::keys::hash_tag;

/// The `gone` record of a multi-key lock over `set` (not empty): the
/// kinds' key rule ([`super::semaphore::SemaphoreKeys::prefixed`]) for the
/// set's smallest key under `prefix`, so that any order of the same set
/// names one record: `{a}:1` → `verrou:lua:multi:gone:t:{a}:1`, `x` →
/// `verrou:lua:multi:gone:{x}`. In the key's slot whenever its fence
/// counter is (a key with `}` and no hash tag, refused on a cluster, gets
/// one elsewhere), and never another set's record nor a lock key (the
/// prefix is reserved).
pub fn gone_key(prefix: &str, set: &[&str]) -> String {
    let key = set.iter().min().copied().unwrap_or_default();
    if hash_tag(key).is_some() {
        format!("{prefix}multi:gone:t:{key}")
    } else {
        format!("{prefix}multi:gone:{{{key}}}")
    }
}

/// KEYS the n sorted keys, then their n fence keys (the mutex's fence
/// counters, same slot, no TTL), then the set's `gone` record
/// ([`gone_key`]); ARGV token, ttl ms. `{1, fence}` took them all;
/// `{0, pttl}` a key is held by another token, or `{0, 1}` the token was
/// already released (in `gone`; nothing written in either case).
///
/// The one fencing token of the grant is above every earlier token of each
/// of its keys (a plain lock's or another set's: the counters are the
/// mutex's, and the rule is its rule, so it holds even if a counter was
/// lost), and every counter is set to it: a resource keyed by any of the
/// keys can refuse a stale holder's write by comparing tokens.
pub const ACQUIRE_ALL: &str = concatcp!(
    GONE_FUNCTIONS,
    r"
local n = (#KEYS - 1) / 2
local t = redis.call('TIME')
if is_gone(KEYS[#KEYS], ARGV[1], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) then
  return {0, 1}
end
local marked = ARGV[1] .. '",
    crate::wake::WAITER_MARK,
    r"'
for i = 1, n do
  local cur = redis.call('GET', KEYS[i])
  if cur and cur ~= ARGV[1] and cur ~= marked then return {0, redis.call('PTTL', KEYS[i])} end
end
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
"
);

/// Lua ending a multi-key release of `n` keys whose token held `mine` of
/// them (`other` held by other tokens), with the set's `gone` record last in
/// KEYS: a release that found none of them records the token there.
const RELEASE_ALL_END: &str = r"
if mine == 0 then
  local t = redis.call('TIME')
  record_gone(KEYS[#KEYS], ARGV[1], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
end
if mine == n then return 1 end
if other > 0 then return 2 end
return 0
";

/// KEYS the keys, then the set's `gone` record ([`gone_key`]); ARGV token.
/// Deletes each key the token holds; `1` all were ours, `2` some key is
/// another token's, `0` otherwise (some missing). A release that found none
/// of the keys held by the token records it in `gone`.
pub const RELEASE_ALL: &str = concatcp!(
    GONE_FUNCTIONS,
    r"
local n = #KEYS - 1
local mine, other = 0, 0
local marked = ARGV[1] .. '",
    crate::wake::WAITER_MARK,
    r"'
for i = 1, n do
  local cur = redis.call('GET', KEYS[i])
  if cur == ARGV[1] or cur == marked then
    redis.call('DEL', KEYS[i])
    mine = mine + 1
  elseif cur then
    other = other + 1
  end
end
",
    RELEASE_ALL_END
);

/// KEYS the keys; ARGV token, ttl ms. `1` renewed all; `2` some key is
/// another token's, `0` some key is missing (nothing renewed in either case).
pub const RENEW_ALL: &str = concatcp!(
    r"
local marked = ARGV[1] .. '",
    crate::wake::WAITER_MARK,
    r"'
for _, k in ipairs(KEYS) do
  local cur = redis.call('GET', k)
  if not cur then return 0 end
  if cur ~= ARGV[1] and cur ~= marked then return 2 end
end
for _, k in ipairs(KEYS) do
  redis.call('PEXPIRE', k, ARGV[2])
end
return 1
"
);

/// KEYS the `n` keys of a multi-key lock, then for each its waiter marker,
/// wake set, fair queue and queue deadlines (as the mutex's release with
/// notifications), then the set's `gone` record; `ARGV[1]` token. As
/// [`RELEASE_ALL`] (every `GET` before the first write), and each freed key
/// wakes its waiters as a mutex release does.
pub const RELEASE_ALL_NOTIFY: &str = concatcp!(
    crate::wake::FUNCTIONS,
    GONE_FUNCTIONS,
    r"
local n = (#KEYS - 1) / 5
local cur, mine, other = {}, 0, 0
local marked = ARGV[1] .. '",
    crate::wake::WAITER_MARK,
    r"'
for i = 1, n do
  cur[i] = redis.call('GET', KEYS[i])
  if cur[i] == ARGV[1] or cur[i] == marked then
    cur[i] = true
    mine = mine + 1
  elseif cur[i] then
    other = other + 1
  end
end
for i = 1, n do
  if cur[i] == true then
    local h = n + 4 * (i - 1)
    release_and_wake(KEYS[i], KEYS[h + 1], KEYS[h + 2], KEYS[h + 3], KEYS[h + 4])
  end
end
",
    RELEASE_ALL_END
);

/// Checks a multi-key lock's `set`: at least one key, each valid and not
/// reserved by the backend, and all in one slot on a cluster, with the fence
/// counters the grant writes ([`ScriptedKinds::fence_key`]: a key with `}`
/// and no hash tag has a counter in another slot) and its `gone` record,
/// which it returns ([`gone_key`]).
fn check_set<K: ScriptedKinds + ?Sized>(kinds: &K, set: &[&str]) -> Result<String> {
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
    let gone = gone_key(kinds.kinds_key_prefix(), set);
    if !kinds.same_slot(first, &gone) {
        return Err(Error::invalid(format!(
            "multi-key lock over {set:?}: on a cluster its keys need a hash tag, e.g. {{account}}:1"
        )));
    }
    Ok(gone)
}

/// [`lock_core::raw::MultiLockBackend::try_acquire_all`] with
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
    let gone = check_set(kinds, set)?;
    validate_ttl(ttl)?;
    // The mutex's fence counters (written whatever the `fencing` setting:
    // a multi-key grant always carries its token).
    let fences: Vec<String> = set.iter().map(|k| kinds.fence_key(k)).collect();
    let keys: Vec<&str> = set
        .iter()
        .copied()
        .chain(fences.iter().map(String::as_str))
        .chain([gone.as_str()])
        .collect();
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

/// [`lock_core::raw::MultiLockBackend::release_all`] with
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
    let gone = check_set(kinds, set)?;
    let waiters = kinds.multi_release_waiters(set);
    let (script, waiters) = match &waiters {
        Some(waiters) => (KindScript::MultiReleaseNotify, waiters.as_slice()),
        None => (KindScript::MultiRelease, &[][..]),
    };
    let keys: Vec<&str> = set
        .iter()
        .copied()
        .chain(waiters.iter().map(String::as_str))
        .chain([gone.as_str()])
        .collect();
    let op = "multi-key release";
    let reply = run(
        kinds,
        KindCall {
            op,
            name: set[0],
            script,
            token,
            ttl: None,
            keys: &keys,
            args: &[&token.hex_bytes()],
        },
    )
    .await?;
    released(kinds, op, set[0], &reply, 2)
}

/// [`lock_core::raw::MultiLockBackend::renew_all`] with
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::semaphore::kind_key;

    /// One record per set whatever the keys' order, in the kinds' key
    /// shape, and none shared by two sets of different smallest keys.
    #[test]
    fn a_set_has_one_gone_record_in_its_slot() {
        let prefix = "verrou:lua:";
        assert_eq!(
            gone_key(prefix, &["{a}:2", "{a}:1"]),
            gone_key(prefix, &["{a}:1", "{a}:2"])
        );
        assert_eq!(gone_key(prefix, &["{a}:2", "{a}:1"]), "verrou:lua:multi:gone:t:{a}:1");
        for key in ["x", "{x}", "{x}y", "t:{x}"] {
            assert_eq!(
                gone_key(prefix, &[key]),
                kind_key(prefix, key, "multi:gone").expect("valid")
            );
        }
        assert_ne!(gone_key(prefix, &["x"]), gone_key(prefix, &["{x}"]));
        assert_eq!(gone_key(prefix, &["a}b"]), "verrou:lua:multi:gone:{a}b}");
    }
}
