//! The lock operations: each one conditional publish on the key's subject
//! (plus a read when the condition fails, to say why). The value is the
//! holder's token; the fencing token is the revision the acquire wrote,
//! which a renewal carries in its value (`<token>:<revision>`) so a read of
//! the key ([`Inner::inspect`]) reports it after any number of renewals.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use lock_core::{AcquireOutcome, Lease, ReleaseOutcome, RenewOutcome};
use lock_core::{FencingToken, LockInfo, LockToken, Result};
use tokio::time::Instant;

use crate::Inner;
use crate::error::NotStored;
use crate::kv::{Entry, Op, busy, ttl_secs};

/// Rounds of "the write was refused, yet the key is as expected" before
/// giving up. On a replicated stream the leader also refuses a conditional
/// write while another write of the same subject is in flight (error
/// 10164), so a holder's release or renewal can be refused by a burst of
/// acquire attempts: it reads, backs off a little and writes again.
pub(crate) const ROUNDS: usize = 12;

/// Rounds of an acquire that finds the key free but its write refused
/// (other acquirers' writes in flight): then `Held`, and the caller waits.
const ACQUIRE_ROUNDS: usize = 4;

/// A short random pause before round `round` (1, 2, 4 … 32 ms, jittered).
pub(crate) async fn back_off(round: usize) {
    let cap = 1u64 << round.min(5);
    tokio::time::sleep(Duration::from_micros(fastrand::u64(cap * 500..=cap * 1000))).await;
}

/// Held leases this backend wrote: subject → the holder's token and the
/// revision of its last write, so a renewal or release is one publish. A
/// lease this map does not know (another client's token, an entry left by a
/// write of unknown outcome, a lease whose subject a later acquire of this
/// process took over) is read first. Keyed by subject alone, so a lookup
/// needs no allocation: one subject has one live holder at a time, and a
/// token that does not match is simply not known.
#[derive(Default)]
pub(crate) struct Held {
    map: std::sync::Mutex<HeldMap>,
}

#[derive(Default)]
struct HeldMap {
    leases: HashMap<String, Remembered>,
    /// The size at which the next insert sweeps out the leases whose TTL
    /// has run out: twice what the last sweep left (at least
    /// [`HELD_SWEEP`]), so that holding many live leases costs each insert
    /// a constant share of a sweep, not a scan of them all.
    next_sweep: usize,
    /// Sweeps so far (tests).
    sweeps: usize,
}

/// A lease this backend wrote: its holder, the revision of its last write,
/// its fencing token (the acquire's revision) and when its TTL runs out.
#[derive(Clone, Copy)]
struct Remembered {
    token: LockToken,
    revision: u64,
    fence: u64,
    until: Instant,
}

/// Past this many entries, those whose TTL has run out are dropped on an
/// insert (a guard dropped outside a runtime never releases); the next
/// sweep waits until the map has doubled.
const HELD_SWEEP: usize = 4096;

impl Held {
    fn lock(&self) -> std::sync::MutexGuard<'_, HeldMap> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn get(&self, subject: &str, token: &LockToken) -> Option<(u64, u64)> {
        self.lock()
            .leases
            .get(subject)
            .filter(|r| r.token == *token)
            .map(|r| (r.revision, r.fence))
    }

    pub(crate) fn put(&self, subject: &str, token: &LockToken, revision: u64, fence: u64, until: Instant) {
        let remembered = Remembered {
            token: *token,
            revision,
            fence,
            until,
        };
        let mut held = self.lock();
        // A renewal: the subject is known, no allocation.
        if let Some(r) = held.leases.get_mut(subject) {
            *r = remembered;
            return;
        }
        if held.leases.len() >= held.next_sweep.max(HELD_SWEEP) {
            let now = Instant::now();
            held.leases.retain(|_, r| r.until > now);
            held.next_sweep = held.leases.len().saturating_mul(2);
            held.sweeps += 1;
        }
        held.leases.insert(subject.to_owned(), remembered);
    }

    /// Forget `subject`'s lease if `token` holds it.
    fn forget(&self, subject: &str, token: &LockToken) {
        let mut held = self.lock();
        if held.leases.get(subject).is_some_and(|r| r.token == *token) {
            held.leases.remove(subject);
        }
    }

    /// How many leases are remembered (tests: nothing leaks).
    pub(crate) fn len(&self) -> usize {
        self.lock().leases.len()
    }
}

/// The last delete marker this backend wrote or saw per lock subject, so
/// the next acquire of the key expects it at once (one publish) instead of
/// finding it by a refused write and a read. A hint: a marker that ended
/// meanwhile only costs the read.
#[derive(Default)]
pub(crate) struct Markers {
    map: std::sync::Mutex<HashMap<String, u64>>,
}

impl Markers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take(&self, subject: &str) -> Option<u64> {
        self.lock().remove(subject)
    }

    fn note(&self, subject: &str, revision: u64) {
        let mut map = self.lock();
        if map.len() >= HELD_SWEEP {
            map.clear();
        }
        map.insert(subject.to_owned(), revision);
    }
}

/// Whose the entry is: mine at (revision, fencing token), another's, or
/// nobody's.
enum Found {
    Mine(u64, u64),
    Other,
    Missing,
}

/// A live entry's holder token and fencing token: the value is the token
/// (an acquire's write, whose revision is the fencing token) or
/// `<token>:<fencing token>` (a renewal's).
fn holder(e: &Entry) -> (&[u8], u64) {
    let value = e.value.as_ref();
    match value.iter().position(|b| *b == b':') {
        Some(at) => {
            let fence = std::str::from_utf8(&value[at + 1..])
                .ok()
                .and_then(|t| t.parse::<u64>().ok())
                .unwrap_or(e.revision);
            (&value[..at], fence)
        }
        None => (value, e.revision),
    }
}

fn found(entry: Option<Entry>, token: &LockToken) -> Found {
    match entry {
        Some(e) if e.live => match holder(&e) {
            (who, fence) if who == token.hex_bytes().as_slice() => Found::Mine(e.revision, fence),
            _ => Found::Other,
        },
        _ => Found::Missing,
    }
}

/// A renewal's value: the token and the fencing token it keeps.
pub(crate) fn renewal_value(token: &LockToken, fence: u64) -> Bytes {
    let hex = token.hex_bytes();
    // One allocation: room for the token, ':' and the longest u64.
    let mut value = Vec::with_capacity(hex.len() + 1 + 20);
    value.extend_from_slice(&hex);
    value.push(b':');
    let _ = std::io::Write::write_fmt(&mut value, format_args!("{fence}"));
    Bytes::from(value)
}

impl Inner {
    pub(crate) async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        let subject = self.subject_of("l", key)?;
        let secs = ttl_secs(ttl, "ttl")?;
        let value = Bytes::copy_from_slice(&token.hex_bytes());
        let sent_at = Instant::now();
        // Create-if-absent: no message on the subject, or its last one a
        // delete marker (the client's, or the server's when a TTL ran
        // out), written only while that marker is still the last one: two
        // creators after a release both expect the same marker, and one
        // of them wins.
        let mut expected = self.markers.take(&subject).unwrap_or(0);
        for round in 0..ACQUIRE_ROUNDS {
            match self
                .write(&subject, Op::Put, value.clone(), expected, Some(secs), "acquire")
                .await
            {
                Ok(revision) => {
                    self.held.put(&subject, token, revision, revision, sent_at + ttl);
                    return Ok(AcquireOutcome::Acquired(
                        Lease::new().with_fencing_token(Some(FencingToken(revision))),
                    ));
                }
                Err(NotStored::Failed(e)) => return Err(e),
                Err(NotStored::WrongLast) => {}
            }
            match self.last(&subject).await? {
                None if expected == 0 => back_off(round).await,
                None => expected = 0,
                Some(e) if !e.live && e.revision == expected => back_off(round).await,
                Some(e) if !e.live => expected = e.revision,
                Some(_) => return Ok(AcquireOutcome::Held { retry_after: None }),
            }
        }
        Ok(AcquireOutcome::Held { retry_after: None })
    }

    /// The revision `token` holds `subject` at: remembered, else read.
    async fn held_revision(&self, subject: &str, token: &LockToken) -> Result<Found> {
        match self.held.get(subject, token) {
            Some((revision, fence)) => Ok(Found::Mine(revision, fence)),
            None => Ok(found(self.last(subject).await?, token)),
        }
    }

    pub(crate) async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        let subject = self.subject_of("l", key)?;
        let mut now = self.held_revision(&subject, token).await?;
        for round in 0..ROUNDS {
            let revision = match now {
                Found::Mine(r, _) => r,
                Found::Other => {
                    self.held.forget(&subject, token);
                    return Ok(ReleaseOutcome::HeldByOther);
                }
                Found::Missing => {
                    self.held.forget(&subject, token);
                    return Ok(ReleaseOutcome::Missing);
                }
            };
            match self.delete_marker(&subject, revision, "release").await {
                Ok(marker) => {
                    self.markers.note(&subject, marker);
                    self.held.forget(&subject, token);
                    return Ok(ReleaseOutcome::Released);
                }
                Err(NotStored::Failed(e)) => return Err(e),
                // Renewed meanwhile by a write whose answer was lost, or
                // expired, or another's: read to tell.
                Err(NotStored::WrongLast) => {
                    now = found(self.last(&subject).await?, token);
                    if matches!(now, Found::Mine(r, _) if r == revision) {
                        back_off(round).await;
                    }
                }
            }
        }
        Err(busy("release"))
    }

    pub(crate) async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        let subject = self.subject_of("l", key)?;
        let secs = ttl_secs(ttl, "ttl")?;
        let sent_at = Instant::now();
        let mut now = self.held_revision(&subject, token).await?;
        for round in 0..ROUNDS {
            let (revision, fence) = match now {
                Found::Mine(r, fence) => (r, fence),
                Found::Other => {
                    self.held.forget(&subject, token);
                    return Ok(RenewOutcome::HeldByOther);
                }
                Found::Missing => {
                    self.held.forget(&subject, token);
                    return Ok(RenewOutcome::Missing);
                }
            };
            // The token and its fencing token at the held revision, with
            // the TTL again.
            match self
                .write(
                    &subject,
                    Op::Put,
                    renewal_value(token, fence),
                    revision,
                    Some(secs),
                    "renew",
                )
                .await
            {
                Ok(new) => {
                    self.held.put(&subject, token, new, fence, sent_at + ttl);
                    return Ok(RenewOutcome::Renewed);
                }
                Err(NotStored::Failed(e)) => return Err(e),
                Err(NotStored::WrongLast) => {
                    now = found(self.last(&subject).await?, token);
                    if matches!(now, Found::Mine(r, _) if r == revision) {
                        back_off(round).await;
                    }
                }
            }
        }
        Err(busy("renew"))
    }

    /// What the server holds for `key`: one read of its subject's last
    /// message (from the stream leader). The remaining lease is the
    /// entry's whole `Nats-TTL` counted from the reply, an upper bound
    /// that needs no clock comparison with the server (the server expires
    /// it that long after it stored the write, which came before the
    /// read); the fencing token is the acquire's revision.
    pub(crate) async fn inspect(&self, key: &str) -> Result<LockInfo> {
        let subject = self.subject_of("l", key)?;
        match self.last(&subject).await? {
            Some(e) if e.live => {
                let remaining = e.ttl_secs.map(Duration::from_secs);
                let (_, fence) = holder(&e);
                Ok(LockInfo::held(remaining).with_fencing_token(Some(FencingToken(fence))))
            }
            _ => Ok(LockInfo::free()),
        }
    }

    /// Until `key` is released or expires: its current entry read, then a
    /// watch of its subject from the next revision (an ordered consumer,
    /// server-side filtered), until a delete or purge marker comes. Renewals
    /// (new values) do not wake it.
    pub(crate) async fn wait_for_release(&self, key: &str) -> Result<()> {
        let bucket_key = self.bucket_key("l", key)?;
        let subject = self.subject(&bucket_key);
        let Some(current) = self.last(&subject).await? else {
            return Ok(());
        };
        if !current.live {
            self.markers.note(&subject, current.revision);
            return Ok(());
        }
        let mut watch = self
            .store
            .watch_from_revision(&bucket_key, current.revision + 1)
            .await
            .map_err(|e| crate::error::failed("watch", e))?;
        while let Some(entry) = watch.next().await {
            let entry = entry.map_err(|e| crate::error::failed("watch", e))?;
            if entry.operation != async_nats::jetstream::kv::Operation::Put {
                self.markers.note(&subject, entry.revision);
                return Ok(());
            }
        }
        Err(lock_core::Error::backend(crate::error::NAME, "the watch ended"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(value: &[u8], revision: u64, live: bool) -> Entry {
        Entry {
            revision,
            live,
            value: Bytes::copy_from_slice(value),
            ttl_secs: Some(2),
            stored_at: time::OffsetDateTime::UNIX_EPOCH,
        }
    }

    /// An acquire's value is the token (its revision the fencing token), a
    /// renewal's `<token>:<fencing token>`; a suffix that is not a number
    /// (or overflows) falls back to the entry's revision, never a panic;
    /// another token's entry is another's, a marker nobody's.
    #[test]
    fn the_holder_and_its_fencing_token_are_read_from_the_value() {
        let token = LockToken::generate().unwrap();
        let hex = token.hex_bytes();
        let with = |suffix: &str| [hex.as_slice(), suffix.as_bytes()].concat();
        assert!(matches!(found(Some(entry(&hex, 7, true)), &token), Found::Mine(7, 7)));
        assert!(matches!(
            found(Some(entry(&with(":3"), 9, true)), &token),
            Found::Mine(9, 3)
        ));
        for bad in [":", ":x", ":-1", ":18446744073709551616"] {
            assert!(
                matches!(found(Some(entry(&with(bad), 9, true)), &token), Found::Mine(9, 9)),
                "{bad}"
            );
        }
        let other = LockToken::generate().unwrap().hex_bytes();
        assert!(matches!(found(Some(entry(&other, 9, true)), &token), Found::Other));
        assert!(matches!(found(Some(entry(&hex, 9, false)), &token), Found::Missing));
        assert!(matches!(found(None, &token), Found::Missing));
        assert_eq!(
            renewal_value(&token, u64::MAX).as_ref(),
            with(":18446744073709551615").as_slice()
        );
        assert_eq!(holder(&entry(&renewal_value(&token, u64::MAX), 9, true)).1, u64::MAX);
    }

    /// 10,000 held leases (the renewal benchmark's) cost a few sweeps in
    /// all, not one scan of every lease per insert once past 4,096 (which
    /// made each renewal scan the whole map: a third of the client's CPU).
    #[test]
    fn remembering_many_live_leases_sweeps_rarely_and_drops_the_expired() {
        let held = Held::default();
        let until = Instant::now() + Duration::from_secs(3600);
        let tokens: Vec<LockToken> = (0..10_000).map(|_| LockToken::generate().unwrap()).collect();
        for (i, t) in tokens.iter().enumerate() {
            held.put(&format!("l.k{i}"), t, 1, 1, until);
        }
        // Renewals put every lease again.
        for (i, t) in tokens.iter().enumerate() {
            held.put(&format!("l.k{i}"), t, 2, 1, until);
        }
        assert_eq!(held.len(), 10_000);
        assert!(held.lock().sweeps <= 3, "{} sweeps", held.lock().sweeps);
        assert_eq!(held.get("l.k7", &tokens[7]), Some((2, 1)));
        // Another token on a known subject is not known; its forget leaves
        // the holder's lease.
        assert_eq!(held.get("l.k7", &tokens[8]), None);
        held.forget("l.k7", &tokens[8]);
        assert_eq!(held.get("l.k7", &tokens[7]), Some((2, 1)));
        // A later holder of the subject replaces the earlier one.
        held.put("l.k7", &tokens[8], 5, 5, until);
        assert_eq!(held.get("l.k7", &tokens[7]), None);
        assert_eq!(held.get("l.k7", &tokens[8]), Some((5, 5)));

        // Expired leases go at the next sweep.
        let expired = Held::default();
        let past = Instant::now();
        for i in 0..HELD_SWEEP {
            expired.put(&format!("l.e{i}"), &LockToken::generate().unwrap(), 1, 1, past);
        }
        expired.put("l.live", &tokens[0], 1, 1, until);
        assert_eq!(expired.len(), 1);
    }
}
