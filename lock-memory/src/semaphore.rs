//! [`SemaphoreBackend`] for the in-process backend: per-holder deadlines on
//! tokio's clock (so paused-time tests cover expiry), a size fixed while any
//! permit is held, fencing tokens per name, and a wake-up on every release.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::raw::{PermitRequest, SemaphoreBackend};
use lock_core::raw::{validate_key, validate_ttl};
use lock_core::{AcquireOutcome, Lease, ReleaseOutcome, RenewOutcome};
use lock_core::{FencingToken, LockToken, PermitsInfo, Result};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::MemoryBackend;

/// Every semaphore of one backend.
#[derive(Default)]
pub(crate) struct Semaphores {
    by_name: HashMap<String, Held>,
    /// Last fencing token per name; kept when the semaphore empties.
    fences: HashMap<String, u64>,
    /// Woken on every release, one per name with waiters.
    waiters: HashMap<String, Arc<Notify>>,
    /// Holders released while missing, refused by acquires until the instant
    /// (as the Lua scripts' `gone` set: a clean-up that overtook its acquire).
    gone: HashMap<(String, LockToken), Instant>,
    /// A refused waiter's reservation per name (as the Lua scripts'
    /// `_rsv`): counted as taken for every other holder while live.
    reservations: HashMap<String, Reservation>,
}

#[derive(Clone, Copy)]
struct Reservation {
    holder: LockToken,
    permits: u32,
    until: Instant,
}

/// How long a holder released while missing stays refused.
const GONE_WINDOW: Duration = Duration::from_millis(lock_core::raw::GONE_WINDOW_MS);

/// The live holders of one semaphore.
struct Held {
    size: u32,
    holders: HashMap<LockToken, Holder>,
}

struct Holder {
    permits: u32,
    expires_at: Instant,
    /// This grant's fencing token: a re-sent acquire of the holder (the
    /// refresh path) answers with it, not with the name's latest.
    fence: u64,
}

impl Semaphores {
    /// The holders of `name` after dropping expired ones (and the entry, once
    /// empty, so the size can change).
    fn live(&mut self, name: &str, now: Instant) -> Option<&mut Held> {
        let empty = match self.by_name.get_mut(name) {
            Some(held) => {
                held.holders.retain(|_, h| h.expires_at > now);
                held.holders.is_empty()
            }
            None => return None,
        };
        if empty {
            self.by_name.remove(name);
        }
        self.by_name.get_mut(name)
    }

    fn renew(&mut self, name: &str, holder: &LockToken, ttl: Duration, now: Instant) -> RenewOutcome {
        match self.live(name, now).and_then(|held| held.holders.get_mut(holder)) {
            Some(h) => {
                h.expires_at = now + ttl;
                RenewOutcome::Renewed
            }
            None => RenewOutcome::Missing,
        }
    }
}

#[async_trait]
impl SemaphoreBackend for MemoryBackend {
    async fn acquire_permits(
        &self,
        name: &str,
        holder: &LockToken,
        request: PermitRequest,
        ttl: Duration,
    ) -> Result<AcquireOutcome> {
        validate_key(name)?;
        validate_ttl(ttl)?;
        request.validate()?;
        let now = Instant::now();
        let mut s = self.lock_semaphores();
        s.gone.retain(|_, until| *until > now);
        s.reservations.retain(|_, r| r.until > now);
        if let Some(held) = s.live(name, now) {
            if held.size != request.size {
                return Err(lock_core::raw::size_mismatch(name, request.size, u64::from(held.size)));
            }
            if let Some(h) = held.holders.get_mut(holder) {
                h.expires_at = now + ttl;
                return Ok(AcquireOutcome::Acquired(
                    Lease::new().with_fencing_token(Some(FencingToken(h.fence))),
                ));
            }
        }
        // Another waiter's live reservation counts as taken, held or not.
        let (used, first) = s.live(name, now).map_or((0, now), |held| {
            let used: u32 = held.holders.values().map(|h| h.permits).sum();
            (used, held.holders.values().map(|h| h.expires_at).min().unwrap_or(now))
        });
        let other = s
            .reservations
            .get(name)
            .filter(|r| r.until > now && r.holder != *holder)
            .copied();
        if used + request.permits + other.map_or(0, |r| r.permits) > request.size {
            if request.waiting && other.is_none_or(|r| request.permits > r.permits) {
                let reservation = Reservation {
                    holder: *holder,
                    permits: request.permits,
                    until: now + ttl,
                };
                s.reservations.insert(name.to_owned(), reservation);
            }
            return Ok(AcquireOutcome::Held {
                retry_after: Some(first.saturating_duration_since(now).max(Duration::from_millis(1))),
            });
        }
        if s.reservations.get(name).is_some_and(|r| r.holder == *holder) {
            s.reservations.remove(name);
        }
        if s.gone.contains_key(&(name.to_owned(), *holder)) {
            return Ok(AcquireOutcome::Held {
                retry_after: Some(Duration::from_millis(1)),
            });
        }
        let fence = s.fences.entry(name.to_owned()).or_insert(0);
        *fence += 1;
        let fence = *fence;
        let held = s.by_name.entry(name.to_owned()).or_insert_with(|| Held {
            size: request.size,
            holders: HashMap::new(),
        });
        held.holders.insert(
            *holder,
            Holder {
                permits: request.permits,
                expires_at: now + ttl,
                fence,
            },
        );
        Ok(AcquireOutcome::Acquired(
            Lease::new().with_fencing_token(Some(FencingToken(fence))),
        ))
    }

    async fn release_permits(&self, name: &str, holder: &LockToken) -> Result<ReleaseOutcome> {
        validate_key(name)?;
        let now = Instant::now();
        let mut s = self.lock_semaphores();
        if s.reservations.get(name).is_some_and(|r| r.holder == *holder) {
            s.reservations.remove(name);
        }
        let removed = s
            .live(name, now)
            .is_some_and(|held| held.holders.remove(holder).is_some());
        if !removed {
            s.gone.retain(|_, until| *until > now);
            s.gone.insert((name.to_owned(), *holder), now + GONE_WINDOW);
            return Ok(ReleaseOutcome::Missing);
        }
        let _ = s.live(name, now); // drop the entry if it emptied
        if let Some(n) = s.waiters.remove(name) {
            n.notify_waiters();
        }
        Ok(ReleaseOutcome::Released)
    }

    async fn renew_permits(&self, name: &str, holder: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        validate_key(name)?;
        validate_ttl(ttl)?;
        Ok(self.lock_semaphores().renew(name, holder, ttl, Instant::now()))
    }

    async fn renew_permits_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        let now = Instant::now();
        let mut s = self.lock_semaphores();
        items
            .iter()
            .map(|(name, holder)| {
                validate_key(name)?;
                validate_ttl(ttl)?;
                Ok(s.renew(name, holder, ttl, now))
            })
            .collect()
    }

    async fn wait_for_permits(&self, name: &str, max_wait: Duration) {
        let notify = self
            .lock_semaphores()
            .waiters
            .entry(name.to_owned())
            .or_default()
            .clone();
        // Created before any later release: notify_waiters reaches it.
        let notified = notify.notified();
        let _ = tokio::time::timeout(max_wait, notified).await;
    }

    /// Counts the live holders without dropping the expired ones: a read.
    async fn inspect_permits(&self, name: &str) -> Result<PermitsInfo> {
        validate_key(name)?;
        let now = Instant::now();
        let s = self.lock_semaphores();
        let Some(held) = s.by_name.get(name) else {
            return Ok(PermitsInfo::default());
        };
        let live = held.holders.values().filter(|h| h.expires_at > now);
        let (in_use, holders) = live.fold((0, 0), |(p, n), h| (p + h.permits, n + 1));
        Ok(PermitsInfo::new(in_use, holders, (holders > 0).then_some(held.size)))
    }
}
