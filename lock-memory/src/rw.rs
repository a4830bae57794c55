//! [`RwLockBackend`] for the in-process backend, with the writer-preferring
//! policy of the Lua scripts (a refused writer's intent holds new readers
//! back), on tokio's clock. The upgradeable holder is one of the readers,
//! named as such.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::raw::{RwLockBackend, conversion_not_held};
use lock_core::raw::{validate_key, validate_ttl};
use lock_core::{AcquireOutcome, Lease, ReleaseOutcome, RenewOutcome};
use lock_core::{FencingToken, LockToken, Result, RwInfo, RwMode};
use tokio::time::Instant;

use crate::MemoryBackend;

/// Every read-write lock of one backend.
#[derive(Default)]
pub(crate) struct RwLocks {
    by_name: HashMap<String, RwState>,
    /// Last writer's fencing token per name; kept when the lock empties.
    fences: HashMap<String, u64>,
}

#[derive(Default)]
struct RwState {
    readers: HashMap<LockToken, Instant>,
    writer: Option<(LockToken, Instant)>,
    intent: Option<(LockToken, Instant)>,
    /// Which reader may upgrade (while it is a reader).
    upgrader: Option<LockToken>,
}

impl RwState {
    fn prune(&mut self, now: Instant) {
        self.readers.retain(|_, until| *until > now);
        if self.writer.is_some_and(|(_, until)| until <= now) {
            self.writer = None;
        }
        if self.intent.is_some_and(|(_, until)| until <= now) {
            self.intent = None;
        }
        if self.upgrader.is_some_and(|t| !self.readers.contains_key(&t)) {
            self.upgrader = None;
        }
    }

    fn is_empty(&self) -> bool {
        self.readers.is_empty() && self.writer.is_none() && self.intent.is_none()
    }

    /// What refuses a new reader (another's intent, the writer) or a new
    /// upgradeable reader (also another upgradeable one): until when.
    fn reader_blocker(&self, token: &LockToken, upgradeable: bool) -> Option<Instant> {
        let upgrader = self
            .upgrader
            .filter(|_| upgradeable)
            .and_then(|t| self.readers.get(&t).copied());
        let blocker = self.writer.or(self.intent.filter(|(t, _)| t != token));
        blocker.map(|(_, until)| until).or(upgrader)
    }

    /// Time until the earliest holder blocking a writer leaves.
    fn writer_wait(&self, now: Instant) -> Duration {
        let first = match self.writer {
            Some((_, until)) => until,
            None => self.readers.values().copied().min().unwrap_or(now),
        };
        first.saturating_duration_since(now).max(Duration::from_millis(1))
    }
}

#[async_trait]
impl RwLockBackend for MemoryBackend {
    async fn try_acquire_rw(
        &self,
        name: &str,
        mode: RwMode,
        waiting: bool,
        token: &LockToken,
        ttl: Duration,
    ) -> Result<AcquireOutcome> {
        validate_key(name)?;
        validate_ttl(ttl)?;
        let now = Instant::now();
        let mut all = self.lock_rw();
        let s = all.by_name.entry(name.to_owned()).or_default();
        s.prune(now);
        let granted = Ok(AcquireOutcome::Acquired(Lease::new()));
        match mode {
            RwMode::Read | RwMode::Upgradeable => {
                let upgradeable = mode == RwMode::Upgradeable;
                if let Some(until) = s.readers.get_mut(token)
                    && (!upgradeable || s.upgrader == Some(*token))
                {
                    *until = now + ttl;
                    return granted;
                }
                if let Some(until) = s.reader_blocker(token, upgradeable) {
                    return Ok(AcquireOutcome::Held {
                        retry_after: Some(until.saturating_duration_since(now).max(Duration::from_millis(1))),
                    });
                }
                s.readers.insert(*token, now + ttl);
                if upgradeable {
                    s.upgrader = Some(*token);
                }
                granted
            }
            RwMode::Write => {
                if let Some((holder, until)) = &mut s.writer
                    && holder == token
                {
                    *until = now + ttl;
                    let fence = all.fences.get(name).copied().unwrap_or(0);
                    return Ok(AcquireOutcome::Acquired(
                        Lease::new().with_fencing_token(Some(FencingToken(fence))),
                    ));
                }
                if s.writer.is_some() || !s.readers.is_empty() {
                    if waiting && s.intent.is_none_or(|(t, _)| t == *token) {
                        s.intent = Some((*token, now + ttl));
                    }
                    return Ok(AcquireOutcome::Held {
                        retry_after: Some(s.writer_wait(now)),
                    });
                }
                s.writer = Some((*token, now + ttl));
                s.intent = None;
                let fence = all.fences.entry(name.to_owned()).or_insert(0);
                *fence += 1;
                Ok(AcquireOutcome::Acquired(
                    Lease::new().with_fencing_token(Some(FencingToken(*fence))),
                ))
            }
        }
    }

    async fn release_rw(&self, name: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        validate_key(name)?;
        let now = Instant::now();
        let mut all = self.lock_rw();
        let Some(s) = all.by_name.get_mut(name) else {
            return Ok(ReleaseOutcome::Missing);
        };
        s.prune(now);
        if s.intent.is_some_and(|(t, _)| t == *token) {
            s.intent = None;
        }
        let released = if s.writer.is_some_and(|(t, _)| t == *token) {
            s.writer = None;
            true
        } else {
            s.readers.remove(token).is_some()
        };
        if s.is_empty() {
            all.by_name.remove(name);
        }
        Ok(if released {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::Missing
        })
    }

    async fn renew_rw(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        validate_key(name)?;
        validate_ttl(ttl)?;
        let now = Instant::now();
        let mut all = self.lock_rw();
        let Some(s) = all.by_name.get_mut(name) else {
            return Ok(RenewOutcome::Missing);
        };
        s.prune(now);
        if let Some((holder, until)) = &mut s.writer
            && holder == token
        {
            *until = now + ttl;
            return Ok(RenewOutcome::Renewed);
        }
        if let Some(until) = s.readers.get_mut(token) {
            *until = now + ttl;
            return Ok(RenewOutcome::Renewed);
        }
        Ok(RenewOutcome::Missing)
    }

    async fn upgrade_rw(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        validate_key(name)?;
        validate_ttl(ttl)?;
        let now = Instant::now();
        let mut all = self.lock_rw();
        let RwLocks { by_name, fences } = &mut *all;
        let Some(s) = by_name.get_mut(name) else {
            return Err(conversion_not_held(name));
        };
        s.prune(now);
        let fence = fences.entry(name.to_owned()).or_insert(0);
        if let Some((holder, until)) = &mut s.writer
            && holder == token
        {
            *until = now + ttl;
            return Ok(AcquireOutcome::Acquired(
                Lease::new().with_fencing_token(Some(FencingToken(*fence))),
            ));
        }
        if s.upgrader != Some(*token) {
            return Err(conversion_not_held(name));
        }
        // Writers are out (a reader is inside: this one); other readers?
        let others = s
            .readers
            .iter()
            .filter(|(t, _)| *t != token)
            .map(|(_, until)| *until)
            .min();
        if let Some(until) = others {
            if s.intent.is_none_or(|(t, _)| t == *token) {
                s.intent = Some((*token, now + ttl));
            }
            return Ok(AcquireOutcome::Held {
                retry_after: Some(until.saturating_duration_since(now).max(Duration::from_millis(1))),
            });
        }
        s.readers.remove(token);
        s.upgrader = None;
        s.intent = None;
        s.writer = Some((*token, now + ttl));
        *fence += 1;
        Ok(AcquireOutcome::Acquired(
            Lease::new().with_fencing_token(Some(FencingToken(*fence))),
        ))
    }

    async fn downgrade_rw(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        validate_key(name)?;
        validate_ttl(ttl)?;
        let now = Instant::now();
        let mut all = self.lock_rw();
        let Some(s) = all.by_name.get_mut(name) else {
            return Err(conversion_not_held(name));
        };
        s.prune(now);
        let upgrader = s.upgrader == Some(*token);
        if s.writer.is_some_and(|(t, _)| t == *token) || upgrader {
            s.writer = None;
            s.readers.insert(*token, now + ttl);
            s.upgrader = Some(*token);
            return Ok(AcquireOutcome::Acquired(Lease::new()));
        }
        Err(conversion_not_held(name))
    }

    /// Counts the live holders without pruning the expired ones: a read.
    async fn inspect_rw(&self, name: &str) -> Result<RwInfo> {
        validate_key(name)?;
        let now = Instant::now();
        let all = self.lock_rw();
        let Some(s) = all.by_name.get(name) else {
            return Ok(RwInfo::default());
        };
        let waiting = s.intent.is_some_and(|(_, until)| until > now);
        if s.writer.is_some_and(|(_, until)| until > now) {
            let fence = all.fences.get(name).copied().map(FencingToken);
            return Ok(RwInfo::writer(fence).with_writer_waiting(waiting));
        }
        let readers = s.readers.values().filter(|until| **until > now).count();
        Ok(RwInfo::readers(u32::try_from(readers).unwrap_or(u32::MAX)).with_writer_waiting(waiting))
    }
}
