//! Leader election's Lua scripts, shared by the Lua and Tair backends. Keys
//! of `name`, in its slot: `lead` (hash `t` token, `id` identity, `term`,
//! with the lease's TTL) and `term` (the last term, no TTL). A new term is
//! `max(last + 1, server time in µs)`, the rule of the mutex's fencing
//! tokens ([`crate::fence::GRANT_FENCE`]): terms only grow while the
//! counter is kept, and a server that lost it (a restart without data,
//! eviction) starts above every earlier term as long as its clock is not
//! behind the µs value of the last term. Across a failover that lost the
//! counter this holds only if the new server's clock is not behind the old
//! one's: a clock that lags can hand out a term at or below an earlier one
//! until it catches up (mind clock skew between machines).
//!
//! A third key, `gone` (sorted set, token → server ms), records the tokens
//! whose resignation found them not leading; a campaign with such a token
//! is refused for [`super::semaphore::GONE_WINDOW_MS`], as the semaphore's
//! acquire: a clean-up resignation that reached the server before its own
//! campaign, across a reconnect, makes that late campaign fail instead of
//! leaving a leader nobody owns for its TTL.

#[cfg(doc)]
use super::semaphore::SemaphoreKeys;
use std::time::Duration;

use super::scripted::{KindCall, KindScript, ScriptedKinds, acked_grant, refuse_under_ack, released, renewed, run};
use super::semaphore::{GONE_FUNCTIONS, kind_key};
use lock_core::Result;
use lock_core::raw::validate_identity;
use lock_core::raw::{ttl_millis, validate_key, validate_ttl};
use lock_core::{AcquireOutcome, Lease, ReleaseOutcome, RenewOutcome};
use lock_core::{FencingToken, LockToken};

/// The two keys of one election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionKeys {
    /// The leader's hash.
    pub lead: String,
    /// The term counter.
    pub term: String,
    /// Tokens that resigned before their campaign arrived.
    pub gone: String,
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
            gone: kind_key(prefix, name, "leader:gone")?,
        })
    }
}

/// KEYS lead, term, gone; ARGV token, identity, ttl ms, and optionally a
/// channel on which a new leader is announced (`PUBLISH`, a `pcall`: a
/// refusal only costs observers their poll). `{1, term}` leads (new or
/// refreshed); `{0, pttl}` another leads, or `{0, 1}` the token already
/// resigned (in `gone`: nothing written). A new term is
/// `max(last + 1, server µs)`, stored with `%.0f` (as
/// [`crate::fence::GRANT_FENCE`]: `tostring` would switch to exponent
/// notation); a `GET` of a counter of another type fails the script before
/// its first write.
pub const LEAD: &str = const_format::concatcp!(
    GONE_FUNCTIONS,
    r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if is_gone(KEYS[3], ARGV[1], now) then return {0, 1} end
local cur = redis.call('HGET', KEYS[1], 't')
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1, tonumber(redis.call('HGET', KEYS[1], 'term'))}
end
if cur then return {0, redis.call('PTTL', KEYS[1])} end
local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local term = tonumber(t[1]) * 1000000 + tonumber(t[2])
if term <= last then term = last + 1 end
redis.call('SET', KEYS[2], string.format('%.0f', term))
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 't', ARGV[1], 'id', ARGV[2], 'term', string.format('%.0f', term))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if ARGV[4] then redis.pcall('PUBLISH', ARGV[4], '1') end
return {1, term}
"
);

/// KEYS lead, gone; ARGV token, and optionally a channel on which the
/// resignation is announced (as in [`LEAD`]). `1` resigned, `2` another
/// leads, `0` none; in both latter cases the token is refused by campaigns
/// for [`super::semaphore::GONE_WINDOW_MS`].
pub const RESIGN: &str = const_format::concatcp!(
    GONE_FUNCTIONS,
    r"
local cur = redis.call('HGET', KEYS[1], 't')
if cur == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] then redis.pcall('PUBLISH', ARGV[2], '1') end
  return 1
end
local t = redis.call('TIME')
record_gone(KEYS[2], ARGV[1], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
if cur then return 2 end
return 0
"
);

/// KEYS lead; ARGV token, ttl ms. `1` renewed, `2` another leads, `0` none.
pub const RENEW: &str = r"
local cur = redis.call('HGET', KEYS[1], 't')
if not cur then return 0 end
if cur ~= ARGV[1] then return 2 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
";

/// The keys of `name` on `kinds`, which refuses leader election under
/// replica acknowledgement (grants are not followed by `WAIT`).
///
/// # Errors
/// [`lock_core::Error::Unsupported`] under replica acknowledgement;
/// [`lock_core::Error::InvalidArgument`] for a bad or reserved name.
pub fn keys_on<K: ScriptedKinds + ?Sized>(kinds: &K, name: &str) -> Result<ElectionKeys> {
    // Under replica acknowledgement, wins and renewals `WAIT` where the
    // backend follows kind scripts with it; refused elsewhere.
    if !kinds.semaphore_waits_for_replicas() {
        refuse_under_ack(kinds, "leader election with replica acknowledgement")?;
    }
    validate_key(name)?;
    kinds.check_user_key(name)?;
    ElectionKeys::prefixed(kinds.kinds_key_prefix(), name)
}

/// [`lock_core::raw::ElectionBackend::try_lead`] with [`LEAD`], announced
/// on [`ScriptedKinds::leader_channel`].
///
/// # Errors
/// As the trait method.
///
/// # Cancel safety
/// As the trait method.
pub async fn try_lead<K: ScriptedKinds + ?Sized>(
    kinds: &K,
    name: &str,
    token: &LockToken,
    identity: &[u8],
    ttl: Duration,
) -> Result<AcquireOutcome> {
    let keys = keys_on(kinds, name)?;
    validate_ttl(ttl)?;
    validate_identity(identity)?;
    let (hex, ms) = (token.hex_bytes(), ttl_millis(ttl).to_string());
    let channel = kinds.leader_channel(&keys.lead);
    let mut args: Vec<&[u8]> = vec![&hex, identity, ms.as_bytes()];
    args.extend(channel.as_deref().map(str::as_bytes));
    let op = "campaign";
    let (reply, replication) = kinds
        .run_kind_script(KindCall {
            op,
            name,
            script: KindScript::Lead,
            token,
            ttl: Some(ttl),
            keys: &[&keys.lead, &keys.term, &keys.gone],
            args: &args,
        })
        .await?;
    let outcome = match K::reply_ints(&reply).as_deref() {
        Some([1, term]) => Ok(AcquireOutcome::Acquired(
            Lease::new().with_fencing_token(Some(FencingToken(term.unsigned_abs()))),
        )),
        Some([0, pttl]) => Ok(AcquireOutcome::Held {
            retry_after: u64::try_from(*pttl).ok().map(Duration::from_millis),
        }),
        _ => Err(kinds.unexpected_reply(op, name, &reply)),
    }?;
    acked_grant(kinds, name, "won the leadership of", outcome, replication, || {
        resign(kinds, name, token)
    })
    .await
}

/// [`lock_core::raw::ElectionBackend::resign`] with [`RESIGN`], announced
/// on [`ScriptedKinds::leader_channel`].
///
/// # Errors
/// As the trait method.
///
/// # Cancel safety
/// As the trait method.
pub async fn resign<K: ScriptedKinds + ?Sized>(kinds: &K, name: &str, token: &LockToken) -> Result<ReleaseOutcome> {
    let keys = keys_on(kinds, name)?;
    let hex = token.hex_bytes();
    let channel = kinds.leader_channel(&keys.lead);
    let mut args: Vec<&[u8]> = vec![&hex];
    args.extend(channel.as_deref().map(str::as_bytes));
    let op = "resign";
    let reply = run(
        kinds,
        KindCall {
            op,
            name,
            script: KindScript::Resign,
            token,
            ttl: None,
            keys: &[&keys.lead, &keys.gone],
            args: &args,
        },
    )
    .await?;
    released(kinds, op, name, &reply, 2)
}

/// [`lock_core::raw::ElectionBackend::renew_lead`] with [`RENEW`].
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
    let op = "leadership renew";
    let (reply, replication) = kinds
        .run_kind_script(KindCall {
            op,
            name,
            script: KindScript::RenewLead,
            token,
            ttl: Some(ttl),
            keys: &[&keys.lead],
            args: &[&token.hex_bytes(), ttl_millis(ttl).to_string().as_bytes()],
        })
        .await?;
    // Under replica acknowledgement a renewal counts once confirmed.
    let outcome = renewed(kinds, op, name, &reply, 2)?;
    kinds.counted_renewal(name, outcome, replication)
}
