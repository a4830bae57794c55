//! Lua shared by backends whose servers run Redis scripts (redis-lua, and
//! Tair's Redis-compatible servers): release notifications that wake one
//! waiter, and the fair (FIFO) queue. Each backend names the helper keys
//! (they are the scripts' KEYS) and composes its own release script around
//! [`FUNCTIONS`]; the protocol (waiter ids, `verrou:wake:` channels) is one.
//!
//! For backend authors; applications never need this module.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use const_format::concatcp;
use lock_core::FencingToken;
use tokio::time::Instant;

/// How much longer than its wait a waiter's marker lives, ms: the round
/// trips between the waiter and the server. [`FUNCTIONS`] uses the same.
pub const WAITING_MARGIN_MS: u64 = 100;

/// Starvation bound of barging (default-mode) waiters, ms since the
/// waiter's acquire first waited on the key (the backend counts it,
/// [`Waits`], across the acquire's waits; [`MARK_WAITING`] records it in
/// server time). A
/// mutex release ([`FUNCTIONS`]' `hand_off`) wakes a waiter only once it
/// has waited this long, and then reserves the key for it
/// ([`RESERVATION_MS`]), so the releaser cannot barge back past it. A
/// waiter that has not waited this long is not woken: the releaser (or a
/// newcomer) may take the key right back, which keeps a hot key with its
/// holder instead of paying a hand-off per release; the next release after
/// the bound, its recheck ([`RECHECK_MS`]) or its timer covers it.
pub const STARVING_MS: u64 = 15;

/// How long a release's reservation of the key for a starving waiter lives,
/// ms: the wake-up's delivery and the waiter's claim. Nobody else can take
/// the key meanwhile; a reservation nobody claims (the waiter gave up or
/// its process died) expires, costing the key at most this long.
pub const RESERVATION_MS: u64 = 25;

/// After this long without a wake-up, a barging waiter looks once whether
/// the key is free (a release that found nobody starving yet wakes nobody,
/// and no further release may come), ms; then it sleeps the rest of its
/// wait.
pub const RECHECK_MS: u64 = STARVING_MS;

/// Wraps a waiter's registration (`mark`, true when it registered): a
/// registration that succeeded sends when its reply came on `answered`.
/// See [`wait_or_recheck`].
pub async fn noting_reply(mark: impl Future<Output = bool>, answered: tokio::sync::oneshot::Sender<Instant>) -> bool {
    let registered = mark.await;
    if registered {
        let _ = answered.send(Instant::now());
    }
    registered
}

/// A barging waiter's wait: `wait` (up to `max_wait` on the board, woken by
/// a release that reserved the key for it) and, once its registration was
/// answered ([`noting_reply`]) and [`RECHECK_MS`] more have passed, one look
/// whether the key is free (`free`), which ends the wait when it is. Timed
/// from the reply, the look comes after the server counts the waiter as
/// starving (its registration time, less its earlier waits, is before the
/// reply): a release before the look that found it not yet starving freed
/// the key, which the look sees; a release after the look wakes it. True
/// when the wait ended early (woken, or the key free).
pub async fn wait_or_recheck(
    max_wait: Duration,
    wait: impl Future<Output = ()>,
    answered: tokio::sync::oneshot::Receiver<Instant>,
    free: impl Future<Output = bool>,
) -> bool {
    let started = Instant::now();
    let recheck = async {
        if let Ok(at) = answered.await {
            tokio::time::sleep_until(at + Duration::from_millis(RECHECK_MS)).await;
            if free.await {
                return;
            }
        }
        std::future::pending::<()>().await;
    };
    tokio::select! {
        () = wait => started.elapsed() < max_wait,
        () = recheck => true,
    }
}

/// A reserved lock key's value starts with this, then the waiter's id (its
/// process id, then its own: 64 hex digits). Tokens are hex digits only,
/// so a reservation never matches a holder's token: a stale holder's
/// release or renewal sees the key held by another. Any waiter of the named
/// process may claim it (one waiter per key and manager waits at a time).
pub const RESERVED_PREFIX: &str = "verrou:reserved:";

/// Appended to a lock key's value by a waiter that registers on it, on
/// backends whose uncontended release is a native compare-and-delete of the
/// token (Tair's `CAD`): the holder's `CAD` then answers "mismatch", and
/// only then does the holder run the release script that accepts the token
/// with or without the mark and wakes a waiter. No token (hex digits) and
/// no reservation ends with it, so a marked value is never another
/// holder's token. Every script that compares a lock key's value with a
/// token (the multi-key lock's, the fair queue's) accepts the marked form.
pub const WAITER_MARK: &str = "~w";

/// The value prefix that lets `process`'s waiters claim a reserved key:
/// [`RESERVED_PREFIX`] and the process id.
#[must_use]
pub fn reservation_of(process: &[u8; 32]) -> Vec<u8> {
    let mut v = Vec::with_capacity(RESERVED_PREFIX.len() + 32);
    v.extend_from_slice(RESERVED_PREFIX.as_bytes());
    v.extend_from_slice(process);
    v
}

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
/// there), `hand_off(key, marker, wakes, since, q, e, bound, hold, stale)`
/// (a mutex release that found the marker, the key already deleted or
/// taken again: takes the releaser's own last registration `stale` (or
/// `''`, [`Waits::take_stale`]) out of the wake set, then reserves a free
/// key for `hold` ms ([`RESERVATION_MS`]) for the live barging waiter that
/// started waiting first, if it has waited `bound` ms ([`STARVING_MS`]),
/// and wakes it; else wakes nobody barging; wakes the fair queue's head
/// when nothing was reserved; sets the marker again while waiters remain),
/// and `extend(key, ms)`.
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
local function mark_again(marker, wakes, e, now)
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
  mark_again(marker, wakes, e, now)
end
local function release_and_wake(key, marker, wakes, q, e)
  if redis.call('DEL', key, marker) == 2 then wake_after_release(marker, wakes, q, e) end
end
local function starving(wakes, since, now, bound)
  -- The live waiter whose acquire started waiting first, if it has waited
  -- the bound;
  -- entries no longer in the wake set (woken, or their wait is over) go.
  for _ = 1, 64 do
    local first = redis.call('ZRANGE', since, 0, 0, 'WITHSCORES')
    if not first[1] then return nil end
    if redis.call('ZSCORE', wakes, first[1]) then
      -- Whole ms: the fraction only orders waiters within one.
      if now - math.floor(tonumber(first[2])) >= bound then return first[1] end
      return nil
    end
    redis.call('ZREM', since, first[1])
  end
  return nil
end
local function hand_off(key, marker, wakes, since, q, e, bound, hold, stale)
  local now = now_ms()
  if stale and stale ~= '' then
    redis.call('ZREM', wakes, stale)
    redis.call('ZREM', since, stale)
  end
  redis.call('ZREMRANGEBYSCORE', wakes, '-inf', now)
  local w = starving(wakes, since, now, tonumber(bound))
  if w and redis.call('SET', key, '",
    RESERVED_PREFIX,
    r"' .. w, 'PX', hold, 'NX') then
    redis.call('ZREM', wakes, w)
    redis.call('ZREM', since, w)
    wake(w)
  else
    local h = fair_head(q, e, now)
    if h then wake(h) end
  end
  mark_again(marker, wakes, e, now)
end
local function extend(key, ms)
  if redis.call('PTTL', key) < tonumber(ms) then redis.call('PEXPIRE', key, ms) end
end
"
);

/// `KEYS[1]` lock, `KEYS[2]` its waiter marker, `KEYS[3]` its wake set,
/// `KEYS[4]` when its waiters registered (waiter id → server ms); `ARGV[1]`
/// how long the marker lives, ms, `ARGV[2]` the waiter's id, `ARGV[3]` how long
/// it waits, ms, `ARGV[4]` how long its acquire has waited before, ms
/// ([`Waits::start`]). Sent by a (barging) waiter once subscribed: 0 when the
/// lock is already free or reserved for the waiter's process (do not wait:
/// claim it), else 1 after joining the wake set until its wait ends (its
/// entry expires with its timer, so a release never wakes a wait that is
/// over) with the time its acquire started waiting (a release reserves the
/// key for it once that is [`STARVING_MS`] ago). Within one millisecond,
/// waiters are ordered by their own id (a fraction of a ms taken from it),
/// not by their process's: a waiter named the same on several servers
/// (Redlock's nodes) is ordered the same on each. `ARGV[5]` (optional, a
/// backend whose release is a native compare-and-delete): [`WAITER_MARK`],
/// appended to the lock key's value (its TTL kept) unless it ends with it,
/// so that the holder's release finds the waiter.
pub const MARK_WAITING: &str = concatcp!(
    FUNCTIONS,
    r"
local cur = redis.call('GET', KEYS[1])
if not cur then return 0 end
local mine = '",
    RESERVED_PREFIX,
    r"' .. string.sub(ARGV[2], 1, 32)
if string.sub(cur, 1, #mine) == mine then return 0 end
local now = now_ms()
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[3]), ARGV[2])
extend(KEYS[3], ARGV[1])
local tie = (tonumber(string.sub(ARGV[2], 33, 35), 16) or 0) / 4096
redis.call('ZADD', KEYS[4], now - tonumber(ARGV[4]) + tie, ARGV[2])
extend(KEYS[4], ARGV[1])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
end
if ARGV[5] and string.sub(cur, -#ARGV[5]) ~= ARGV[5] then
  redis.call('SET', KEYS[1], cur .. ARGV[5], 'KEEPTTL')
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
/// `ARGV[5]` (optional, as [`MARK_WAITING`]'s): [`WAITER_MARK`]; the
/// token with it counts as the waiter's own, a grant while the marker
/// exists (waiters remain) writes the token marked, and a waiter that
/// queues behind a holder marks the holder's value.
pub const ACQUIRE_FAIR: &str = concatcp!(
    FUNCTIONS,
    r"
local cur = redis.call('GET', KEYS[1])
local last = false
if KEYS[5] then last = redis.call('GET', KEYS[5]) end
last = tonumber(last or '0') or 0
local mark = ARGV[5]
if cur == ARGV[1] or (mark and cur == ARGV[1] .. mark) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, last}
end
local now = now_ms()
local head = fair_head(KEYS[3], KEYS[4], now)
if not cur and (not head or head == ARGV[3]) then
  local v = ARGV[1]
  if mark and redis.call('EXISTS', KEYS[2]) == 1 then v = v .. mark end
  redis.call('SET', KEYS[1], v, 'PX', ARGV[2])
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
if mark and cur and string.sub(cur, -#mark) ~= mark then
  redis.call('SET', KEYS[1], cur .. mark, 'KEEPTTL')
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

/// A wait that ended this long ago no longer counts: the acquire gave up
/// (or was cancelled) without a grant.
const WAIT_FORGOTTEN: Duration = Duration::from_secs(1);

/// Keys with this many waits remembered: forgotten ones are dropped.
const WAITS_KEPT: usize = 4096;

/// One key's wait, as this backend saw it.
#[derive(Debug, Clone, Copy)]
struct Wait {
    /// When the key's waiter first waited in its acquire.
    since: Instant,
    /// When it last started or ended a wait.
    last: Instant,
    /// Its last wait ended early: woken (a reservation for this process,
    /// most likely), or the key was free.
    woken: bool,
    /// The id of its last registration.
    id: crate::board::WaiterId,
    /// The acquire was granted: the next wait is another acquire's.
    granted: bool,
    /// The last registration of the acquire that holds the key now, for
    /// its release to take out of the wake set ([`Waits::take_stale`]).
    stale: Option<crate::board::WaiterId>,
}

/// How long a backend's waiter on each key has waited across the waits of
/// one acquire (the manager's line lets one waiter per key and manager
/// wait at a time), and whether its last wait was cut short by a wake-up.
/// Client-side bookkeeping only: a waiter that re-registers after its
/// timer keeps its age, so it becomes starving ([`STARVING_MS`]) however
/// short each of its waits is. A grant ([`Waits::acquired`]) ends the
/// key's wait.
#[derive(Debug, Default)]
pub struct Waits {
    waits: Mutex<HashMap<String, Wait>>,
    /// Entries in `waits`, so that a grant with none costs no lock.
    len: AtomicUsize,
}

/// A wait's age as the scripts take it: whole ms, saturating.
fn whole_ms(waited: Duration) -> u64 {
    u64::try_from(waited.as_millis()).unwrap_or(u64::MAX)
}

impl Waits {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Wait>> {
        // Each update leaves the map consistent: a poisoned lock is usable.
        match self.waits.lock() {
            Ok(w) => w,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// A wait on `key` by waiter `id` starts: how long the key's waiter has
    /// waited so far in its acquire, ms (0 for a first wait).
    pub fn start(&self, key: &str, id: crate::board::WaiterId) -> u64 {
        let now = Instant::now();
        let mut w = self.lock();
        if w.len() >= WAITS_KEPT && !w.contains_key(key) {
            w.retain(|_, e| now.duration_since(e.last) < WAIT_FORGOTTEN);
        }
        let entry = w.entry(key.to_owned()).or_insert(Wait {
            since: now,
            last: now,
            woken: false,
            id,
            granted: false,
            stale: None,
        });
        if entry.granted || now.duration_since(entry.last) >= WAIT_FORGOTTEN {
            entry.since = now;
            entry.granted = false;
        }
        entry.last = now;
        entry.woken = false;
        entry.id = id;
        let waited = now.duration_since(entry.since);
        self.len.store(w.len(), Ordering::Relaxed);
        whole_ms(waited)
    }

    /// [`Waits::start`] for a wait whose caller may name the waiter
    /// (`LockBackend::wait_for_release_opts`): the named waiter's age
    /// (`named`, the same on every node it waits on) instead of this
    /// backend's count, which is still kept for the release's clean-up.
    pub fn start_named(&self, key: &str, id: crate::board::WaiterId, named: Option<Duration>) -> u64 {
        let counted = self.start(key, id);
        named.map_or(counted, whole_ms)
    }

    /// The wait on `key` ended: `woken`, before its timer.
    pub fn end(&self, key: &str, woken: bool) {
        if let Some(e) = self.lock().get_mut(key) {
            e.last = Instant::now();
            e.woken = woken;
        }
    }

    /// Whether the last wait on `key` was cut short by a wake-up (asked
    /// once: the answer is cleared), so the next attempt may claim a
    /// reservation at once.
    pub fn take_woken(&self, key: &str) -> bool {
        if self.len.load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.lock().get_mut(key).is_some_and(|e| std::mem::take(&mut e.woken))
    }

    /// `key` was granted to this backend: its wait is over. The id of its
    /// last registration is kept for the release ([`Waits::take_stale`]).
    pub fn acquired(&self, key: &str) {
        if self.len.load(Ordering::Relaxed) == 0 {
            return;
        }
        if let Some(e) = self.lock().get_mut(key)
            && !e.granted
        {
            e.granted = true;
            e.woken = false;
            e.stale = Some(e.id);
        }
    }

    /// `key` is being released by this backend: the id of the registration
    /// its holder last made while waiting for it, if it waited. That entry
    /// may still be live in the wake set (a grant by the waiter's timer,
    /// not by a reservation, leaves it there), and the release takes it
    /// out, or a later release would reserve the key for a waiter that
    /// waits no more (whose process would then take the key back through
    /// its own reservation, past the starving waiters).
    pub fn take_stale(&self, key: &str) -> Option<crate::board::WaiterId> {
        if self.len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut w = self.lock();
        let e = w.get_mut(key)?;
        let stale = e.stale.take();
        if e.granted {
            // Nobody of this backend waits for the key now.
            w.remove(key);
            self.len.store(w.len(), Ordering::Relaxed);
        }
        stale
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acquire_keeps_its_age_across_waits_and_its_release_takes_its_registration() {
        let waits = Waits::default();
        let (first, second, other) = ([b'1'; 64], [b'2'; 64], [b'3'; 64]);
        waits.start("k", first);
        waits.end("k", false);
        std::thread::sleep(Duration::from_millis(5));
        // The timer's attempt failed: the next wait keeps the acquire's age
        // (at least the 5 ms slept: the clock is monotonic).
        assert!(waits.start("k", second) >= 5);
        waits.end("k", true);
        assert!(waits.take_woken("k"));
        assert!(!waits.take_woken("k"), "asked once");
        waits.acquired("k");
        // Another waiter of this backend starts afresh while the holder
        // holds; the holder's release takes the holder's registration.
        assert!(waits.start("k", other) < 5, "a new acquire's age");
        assert_eq!(waits.take_stale("k"), Some(second));
        assert_eq!(waits.take_stale("k"), None);
        waits.acquired("k");
        assert_eq!(waits.take_stale("k"), Some(other));
        assert_eq!(waits.len.load(Ordering::Relaxed), 0);
        // A backend that never waited has nothing to take.
        waits.acquired("k");
        assert_eq!(waits.take_stale("k"), None);
    }

    #[test]
    fn a_reservation_never_looks_like_a_token() {
        let reservation = reservation_of(&[b'a'; 32]);
        assert!(reservation.starts_with(RESERVED_PREFIX.as_bytes()));
        assert!(!reservation.iter().all(u8::is_ascii_hexdigit));
    }

    #[test]
    fn a_marked_value_is_never_a_token_nor_a_reservation() {
        let token = lock_core::LockToken::from_bytes([0xab; 16]).to_hex();
        assert!(!WAITER_MARK.is_empty());
        assert!(!WAITER_MARK.bytes().any(|b| b.is_ascii_hexdigit()));
        assert!(!token.ends_with(WAITER_MARK));
        let reservation = reservation_of(&[b'a'; 32]);
        assert!(!reservation.ends_with(WAITER_MARK.as_bytes()));
    }
}
