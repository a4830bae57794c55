//! The semaphore's Lua scripts and key layout, shared by every backend whose
//! server runs Lua (Redis/Valkey, Tair): one script per operation, one round
//! trip, server time only.
//!
//! Keys of semaphore `name`, all in `name`'s cluster slot (see
//! [`SemaphoreKeys::new`]):
//! - `holders`: sorted set, holder token (hex) → lease deadline, server ms;
//! - `info`: hash, holder token → its permits, holder token + `:f` → its
//!   grant's fencing token (a re-sent acquire answers with it), plus
//!   `_size` and `_used`;
//! - `fence`: the fencing counter (no TTL, so tokens never repeat);
//! - `gone`: sorted set, holder token → server ms until which an acquire for
//!   it is refused: written by a release that found nothing to release.
//!
//! Why `gone`: when an acquire's reply is lost, the manager sends a clean-up
//! release for the same token. If the client switched connections in
//! between, the release can reach the server *before* the acquire; without
//! `gone` the late acquire would then take permits nobody owns until its
//! lease ends. A token is never reused, so refusing it for
//! [`GONE_WINDOW_MS`] is harmless; the window bounds how late an acquire
//! may arrive (the client gave up on it after one operation timeout).
//!
//! Every script first drops holders whose deadline passed (returning their
//! permits), and `holders`/`info` expire together at the latest deadline, so
//! an abandoned semaphore leaves nothing behind but its fence counter. The
//! deadlines are `TIME`-based: scripts replicate by effects (Redis ≥ 5 by
//! default, only mode since 7.0), so replicas store the same numbers.

use std::time::Duration;

use super::scripted::{KindCall, KindScript, ScriptedKinds, acked_grant};
use crate::keys::hash_tag;
use lock_core::raw::PermitRequest;
use lock_core::raw::{ttl_millis, validate_key, validate_ttl};
use lock_core::{AcquireOutcome, Lease, ReleaseOutcome, RenewOutcome};
use lock_core::{Error, Result};
use lock_core::{FencingToken, LockToken};

/// The three keys of one semaphore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemaphoreKeys {
    /// Sorted set of holder deadlines.
    pub holders: String,
    /// Hash of holder permits, `_size` and `_used`.
    pub info: String,
    /// Fencing counter.
    pub fence: String,
    /// Tokens released before their acquire arrived.
    pub gone: String,
}

/// How long a token released while missing is refused by later acquires.
pub use lock_core::raw::GONE_WINDOW_MS;

/// Lua functions over a kind's `gone` record (a sorted set, token → server
/// ms until which a grant for it is refused), shared by every kind whose
/// clean-up release may reach the server before its grant (the semaphore,
/// the read-write lock, the election, the multi-key lock):
/// - `record_gone(key, token, now)`, from a release that found nothing of
///   `token`'s: drops the lapsed entries and refuses `token` for
///   [`GONE_WINDOW_MS`] (the key expires with its last entry);
/// - `is_gone(key, token, now)`, from a grant, before its first write: a
///   read, true while `token` is refused.
///
/// `now` is the script's server time in ms (`TIME`).
pub const GONE_FUNCTIONS: &str = const_format::concatcp!(
    r"
local function record_gone(key, token, now)
  local until_ms = now + ",
    GONE_WINDOW_MS,
    r"
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  redis.call('ZADD', key, until_ms, token)
  redis.call('PEXPIREAT', key, until_ms)
end
local function is_gone(key, token, now)
  local until_ms = redis.call('ZSCORE', key, token)
  return until_ms and tonumber(until_ms) > now
end
"
);

/// The key of `name`'s helper of kind `kind` (`sem`, `sem:info`, `rw:writer`,
/// …), in `name`'s cluster slot, after `prefix` (which has no braces; the
/// Lua backend's reserved `verrou:lua:`, Tair's `verrou:tair:`): a name with
/// a hash tag is kept whole after `t:` (`{a}x` → `verrou:lua:sem:t:{a}x`),
/// a name without one becomes the tag (`x` → `verrou:lua:sem:{x}`). The two
/// shapes differ right after the kind (`t:` or `{`), so no two names share a
/// helper key: `x` and `{x}` are in one slot but get different keys.
///
/// # Errors
/// [`Error::InvalidArgument`] for a name without a tag that contains `}`:
/// wrapping it would not give one slot.
pub(crate) fn kind_key(prefix: &str, name: &str, kind: &str) -> Result<String> {
    if hash_tag(name).is_some() {
        return Ok(format!("{prefix}{kind}:t:{name}"));
    }
    if name.contains('}') {
        return Err(Error::invalid(format!(
            "lock name {name:?} contains '}}' without a hash tag: its keys could not share a cluster slot"
        )));
    }
    Ok(format!("{prefix}{kind}:{{{name}}}"))
}

impl SemaphoreKeys {
    /// The keys of `name` with no prefix (`sem:{x}`; see [`SemaphoreKeys::prefixed`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a name without a tag that contains `}`:
    /// wrapping it would not give one slot.
    pub fn new(name: &str) -> Result<Self> {
        Self::prefixed("", name)
    }

    /// The keys of `name` under `prefix`: `x` → `verrou:lua:sem:{x}`, `{a}x`
    /// → `verrou:lua:sem:t:{a}x` with `verrou:lua:`. Always in `name`'s
    /// cluster slot, and never another name's keys.
    ///
    /// # Errors
    /// As [`SemaphoreKeys::new`].
    pub fn prefixed(prefix: &str, name: &str) -> Result<Self> {
        Ok(SemaphoreKeys {
            holders: kind_key(prefix, name, "sem")?,
            info: kind_key(prefix, name, "sem:info")?,
            fence: kind_key(prefix, name, "sem:fence")?,
            gone: kind_key(prefix, name, "sem:gone")?,
        })
    }
}

/// Shared prologue: `now` in server ms, then drop expired holders (a macro,
/// so that `concat!` builds each full script at compile time).
macro_rules! prune {
    () => {
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for _, h in ipairs(dead) do
  local n = tonumber(redis.call('HGET', KEYS[2], h) or '0') or 0
  redis.call('HDEL', KEYS[2], h, h .. ':f')
  redis.call('HINCRBY', KEYS[2], '_used', -n)
end
if #dead > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) end
local function drop_info()
  local r = redis.call('HMGET', KEYS[2], '_rsv', '_rsvk', '_rsvt')
  redis.call('DEL', KEYS[2])
  if r[1] and tonumber(r[3]) > now then
    redis.call('HSET', KEYS[2], '_rsv', r[1], '_rsvk', r[2], '_rsvt', r[3])
    redis.call('PEXPIREAT', KEYS[2], r[3])
  end
end
if redis.call('ZCARD', KEYS[1]) == 0 then drop_info() end
local function expire_with_last()
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if last[2] then
    local r = tonumber(redis.call('HGET', KEYS[2], '_rsvt') or '0') or 0
    redis.call('PEXPIREAT', KEYS[1], last[2])
    redis.call('PEXPIREAT', KEYS[2], math.max(tonumber(last[2]), r))
  end
end
"
    };
}

/// KEYS holders, info, fence, gone; ARGV holder, ttl ms, size, permits,
/// `w` (a waiter: a refusal leaves its reservation in `info`, fields `_rsv`
/// holder, `_rsvk` permits, `_rsvt` expiry ms) or `t` (`try_acquire`).
/// Another holder's live reservation counts as taken permits; a waiter
/// asking for more permits than the live reservation takes it over.
/// `{1, fence}` granted (or refreshed, for a re-sent request: the holder's
/// own grant's fence);
/// `{0, retry_ms}` not enough free (or the token was already released);
/// `{-1, stored_size}` size mismatch.
pub const ACQUIRE: &str = concat!(
    prune!(),
    r"
local ttl = tonumber(ARGV[2])
local size = tonumber(ARGV[3])
local k = tonumber(ARGV[4])
local stored = redis.call('HGET', KEYS[2], '_size')
if stored and tonumber(stored) ~= size then return {-1, tonumber(stored)} end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
if redis.call('ZSCORE', KEYS[4], ARGV[1]) then return {0, 1} end
if redis.call('HGET', KEYS[2], ARGV[1]) then
  redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[1])
  expire_with_last()
  local own = redis.call('HGET', KEYS[2], ARGV[1] .. ':f') or redis.call('GET', KEYS[3]) or '0'
  return {1, tonumber(own) or 0}
end
local used = tonumber(redis.call('HGET', KEYS[2], '_used') or '0') or 0
local rsv = redis.call('HMGET', KEYS[2], '_rsv', '_rsvk', '_rsvt')
local other = rsv[1] and rsv[1] ~= ARGV[1] and tonumber(rsv[3]) > now
local reserved = 0
if other then reserved = tonumber(rsv[2]) end
if used + k + reserved > size then
  if ARGV[5] == 'w' and (not other or k > reserved) then
    redis.call('HSET', KEYS[2], '_rsv', ARGV[1], '_rsvk', k, '_rsvt', now + ttl)
    if used > 0 then expire_with_last() else redis.call('PEXPIREAT', KEYS[2], now + ttl) end
  end
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local wait = 1
  if first[2] then wait = math.max(1, tonumber(first[2]) - now) end
  return {0, wait}
end
if rsv[1] == ARGV[1] then redis.call('HDEL', KEYS[2], '_rsv', '_rsvk', '_rsvt') end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], k, '_size', size)
redis.call('HINCRBY', KEYS[2], '_used', k)
expire_with_last()
local last = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
if fence <= last then fence = last + 1 end
redis.call('SET', KEYS[3], string.format('%.0f', fence))
redis.call('HSET', KEYS[2], ARGV[1] .. ':f', string.format('%.0f', fence))
return {1, fence}
"
);

/// KEYS holders, info, gone; ARGV holder. `1` released, `0` missing
/// (expired or never held: the token is then refused by acquires for
/// [`GONE_WINDOW_MS`], [`GONE_FUNCTIONS`]).
pub const RELEASE: &str = const_format::concatcp!(
    prune!(),
    GONE_FUNCTIONS,
    r"
if redis.call('HGET', KEYS[2], '_rsv') == ARGV[1] then redis.call('HDEL', KEYS[2], '_rsv', '_rsvk', '_rsvt') end
local n = redis.call('HGET', KEYS[2], ARGV[1])
if not n then
  record_gone(KEYS[3], ARGV[1], now)
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1], ARGV[1] .. ':f')
redis.call('HINCRBY', KEYS[2], '_used', -tonumber(n))
if redis.call('ZCARD', KEYS[1]) == 0 then drop_info() end
return 1
"
);

/// KEYS holders, info; ARGV holder, ttl ms. `1` renewed, `0` missing (an
/// expired lease was pruned above, so it is never revived).
pub const RENEW: &str = concat!(
    prune!(),
    r"
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
expire_with_last()
return 1
"
);

/// Decode the acquire script's reply (already read as integers).
///
/// # Errors
/// [`Error::InvalidArgument`] on a size mismatch; [`Error::Backend`]
/// (outcome unknown) on a reply of the wrong shape.
pub fn acquire_outcome(backend: &str, name: &str, requested_size: u32, reply: &[i64]) -> Result<AcquireOutcome> {
    match reply {
        // Every grant carries its fencing token, whatever the mutex's
        // `fencing` setting: the counter is kept either way.
        [1, fence] => {
            let token = (*fence > 0).then(|| FencingToken(fence.unsigned_abs()));
            Ok(AcquireOutcome::Acquired(Lease::new().with_fencing_token(token)))
        }
        [0, wait] => Ok(AcquireOutcome::Held {
            retry_after: Some(std::time::Duration::from_millis(wait.unsigned_abs())),
        }),
        [-1, stored] => Err(lock_core::raw::size_mismatch(
            name,
            requested_size,
            stored.unsigned_abs(),
        )),
        other => Err(Error::outcome_unknown(
            backend,
            format!("semaphore acquire on {name:?}: unexpected reply {other:?}"),
        )),
    }
}

/// Decode the release script's reply.
///
/// # Errors
/// [`Error::Backend`] on an unexpected reply.
pub fn release_outcome(backend: &str, name: &str, reply: i64) -> Result<ReleaseOutcome> {
    match reply {
        1 => Ok(ReleaseOutcome::Released),
        0 => Ok(ReleaseOutcome::Missing),
        other => Err(Error::outcome_unknown(
            backend,
            format!("semaphore release on {name:?}: unexpected reply {other}"),
        )),
    }
}

/// Decode the renew script's reply.
///
/// # Errors
/// [`Error::Backend`] on an unexpected reply.
pub fn renew_outcome(backend: &str, name: &str, reply: i64) -> Result<RenewOutcome> {
    match reply {
        1 => Ok(RenewOutcome::Renewed),
        0 => Ok(RenewOutcome::Missing),
        other => Err(Error::outcome_unknown(
            backend,
            format!("semaphore renew on {name:?}: unexpected reply {other}"),
        )),
    }
}

/// The keys of `name` on `kinds`, checked after the other arguments (a
/// backend whose grants are not followed by `WAIT` refuses semaphores under
/// replica acknowledgement rather than grant permits a failover could lose
/// unnoticed).
fn keys_on<K: ScriptedKinds + ?Sized>(kinds: &K, name: &str) -> Result<SemaphoreKeys> {
    kinds.check_user_key(name)?;
    let keys = SemaphoreKeys::prefixed(kinds.kinds_key_prefix(), name)?;
    if kinds.kinds_replica_ack().is_some() && !kinds.semaphore_waits_for_replicas() {
        return Err(Error::Unsupported {
            backend: kinds.kinds_backend().to_owned(),
            what: "leased semaphores with replica acknowledgement (use a backend without ReplicaAck)".to_owned(),
        });
    }
    Ok(keys)
}

/// [`lock_core::raw::SemaphoreBackend::acquire_permits`] with
/// [`ACQUIRE`]. Under replica acknowledgement a grant too few replicas
/// acknowledged is given back and fails with
/// [`lock_core::OnShortfall::ReleaseAndFail`], else counts as unconfirmed.
///
/// # Errors
/// As the trait method.
///
/// # Cancel safety
/// As the trait method.
pub async fn acquire<K: ScriptedKinds + ?Sized>(
    kinds: &K,
    name: &str,
    holder: &LockToken,
    request: PermitRequest,
    ttl: Duration,
) -> Result<AcquireOutcome> {
    validate_key(name)?;
    validate_ttl(ttl)?;
    request.validate()?;
    let keys = keys_on(kinds, name)?;
    let op = "semaphore acquire";
    let (reply, replication) = kinds
        .run_kind_script(KindCall {
            op,
            name,
            script: KindScript::SemaphoreAcquire,
            token: holder,
            ttl: Some(ttl),
            keys: &[&keys.holders, &keys.info, &keys.fence, &keys.gone],
            args: &[
                &holder.hex_bytes(),
                ttl_millis(ttl).to_string().as_bytes(),
                request.size.to_string().as_bytes(),
                request.permits.to_string().as_bytes(),
                if request.waiting { b"w" } else { b"t" },
            ],
        })
        .await?;
    let codes = K::reply_ints(&reply).ok_or_else(|| kinds.unexpected_reply(op, name, &reply))?;
    let backend = kinds.kinds_backend();
    let outcome = acquire_outcome(backend, name, request.size, &codes)?;
    acked_grant(kinds, name, "took permits of", outcome, replication, || {
        release(kinds, name, holder)
    })
    .await
}

/// [`lock_core::raw::SemaphoreBackend::release_permits`] with
/// [`RELEASE`].
///
/// # Errors
/// As the trait method.
///
/// # Cancel safety
/// As the trait method.
pub async fn release<K: ScriptedKinds + ?Sized>(kinds: &K, name: &str, holder: &LockToken) -> Result<ReleaseOutcome> {
    validate_key(name)?;
    let keys = keys_on(kinds, name)?;
    let op = "semaphore release";
    let (reply, _) = kinds
        .run_kind_script(KindCall {
            op,
            name,
            script: KindScript::SemaphoreRelease,
            token: holder,
            ttl: None,
            keys: &[&keys.holders, &keys.info, &keys.gone],
            args: &[&holder.hex_bytes()],
        })
        .await?;
    match K::reply_int(&reply) {
        Some(n) => release_outcome(kinds.kinds_backend(), name, n),
        None => Err(kinds.unexpected_reply(op, name, &reply)),
    }
}

/// [`lock_core::raw::SemaphoreBackend::renew_permits`] with [`RENEW`];
/// under replica acknowledgement it counts once confirmed
/// ([`ScriptedKinds::counted_renewal`]).
///
/// # Errors
/// As the trait method.
///
/// # Cancel safety
/// As the trait method.
pub async fn renew<K: ScriptedKinds + ?Sized>(
    kinds: &K,
    name: &str,
    holder: &LockToken,
    ttl: Duration,
) -> Result<RenewOutcome> {
    validate_key(name)?;
    validate_ttl(ttl)?;
    let keys = keys_on(kinds, name)?;
    let op = "semaphore renew";
    let (reply, replication) = kinds
        .run_kind_script(KindCall {
            op,
            name,
            script: KindScript::SemaphoreRenew,
            token: holder,
            ttl: Some(ttl),
            keys: &[&keys.holders, &keys.info],
            args: &[&holder.hex_bytes(), ttl_millis(ttl).to_string().as_bytes()],
        })
        .await?;
    let outcome = match K::reply_int(&reply) {
        Some(n) => renew_outcome(kinds.kinds_backend(), name, n)?,
        None => return Err(kinds.unexpected_reply(op, name, &reply)),
    };
    kinds.counted_renewal(name, outcome, replication)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_the_name_slot_tag() {
        let k = SemaphoreKeys::new("api").expect("plain name");
        assert_eq!(k.holders, "sem:{api}");
        assert_eq!(k.info, "sem:info:{api}");
        assert_eq!(k.fence, "sem:fence:{api}");
        assert_eq!(k.gone, "sem:gone:{api}");
        assert!(GONE_FUNCTIONS.contains(&format!("now + {GONE_WINDOW_MS}\n")));
        assert!(RELEASE.contains(GONE_FUNCTIONS));
        let k = SemaphoreKeys::new("{t}x").expect("tagged name");
        assert_eq!(k.holders, "sem:t:{t}x");
        assert!(SemaphoreKeys::new("a}b").is_err());
        let k = SemaphoreKeys::prefixed("verrou:lua:", "api").expect("plain name");
        assert_eq!(k.holders, "verrou:lua:sem:{api}");
        assert_eq!(k.gone, "verrou:lua:sem:gone:{api}");
        let k = SemaphoreKeys::prefixed("verrou:lua:", "{t}x").expect("tagged name");
        assert_eq!(k.info, "verrou:lua:sem:info:t:{t}x");
        assert!(SemaphoreKeys::prefixed("verrou:lua:", "a}b").is_err());
    }

    /// Every helper key of every kind, for every name, is distinct from
    /// every other name's (with or without a prefix): `x` and `{x}` used to
    /// share `{x}:sem` without one.
    #[test]
    fn distinct_names_never_share_a_kind_key() {
        const KINDS: [&str; 14] = [
            "sem",
            "sem:info",
            "sem:fence",
            "sem:gone",
            "rw:readers",
            "rw:writer",
            "rw:intent",
            "rw:fence",
            "rw:gone",
            "rw:upgrader",
            "leader",
            "leader:term",
            "leader:gone",
            "multi:gone",
        ];
        let names = [
            "x", "{x}", "{x}:sem", "{x}sem", "t:{x}", "{t:{x}}", "sem:{x}", "{x}:t", "a{x}", "{x}x",
        ];
        for prefix in ["", "verrou:lua:", "verrou:tair:"] {
            let mut seen = std::collections::HashMap::new();
            for name in names {
                for kind in KINDS {
                    let key = kind_key(prefix, name, kind).expect("valid name");
                    if let Some(other) = seen.insert(key.clone(), (name, kind)) {
                        panic!("{key:?} is the key of {other:?} and of {:?}", (name, kind));
                    }
                }
            }
        }
    }
}
