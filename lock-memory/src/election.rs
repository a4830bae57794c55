//! [`ElectionBackend`] for the in-process backend: one leader per name with
//! its identity and term, on tokio's clock; terms never repeat.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::raw::ElectionBackend;
use lock_core::raw::validate_identity;
use lock_core::raw::{validate_key, validate_ttl};
use lock_core::{AcquireOutcome, Lease, ReleaseOutcome, RenewOutcome};
use lock_core::{FencingToken, LeaderInfo, LockToken, Result};
use tokio::time::Instant;

use crate::MemoryBackend;

/// Every election of one backend.
#[derive(Default)]
pub(crate) struct Elections {
    leaders: HashMap<String, Leader>,
    /// Last term per name; kept when the leader goes.
    terms: HashMap<String, u64>,
}

struct Leader {
    token: LockToken,
    identity: Vec<u8>,
    term: u64,
    expires_at: Instant,
}

impl Elections {
    fn live(&mut self, name: &str, now: Instant) -> Option<&mut Leader> {
        if self.leaders.get(name).is_some_and(|l| l.expires_at <= now) {
            self.leaders.remove(name);
        }
        self.leaders.get_mut(name)
    }
}

#[async_trait]
impl ElectionBackend for MemoryBackend {
    async fn try_lead(&self, name: &str, token: &LockToken, identity: &[u8], ttl: Duration) -> Result<AcquireOutcome> {
        validate_key(name)?;
        validate_ttl(ttl)?;
        validate_identity(identity)?;
        let now = Instant::now();
        let mut s = self.lock_elections();
        if let Some(leader) = s.live(name, now) {
            if leader.token != *token {
                return Ok(AcquireOutcome::Held {
                    retry_after: Some(leader.expires_at - now),
                });
            }
            leader.expires_at = now + ttl;
            let term = leader.term;
            return Ok(AcquireOutcome::Acquired(
                Lease::new().with_fencing_token(Some(FencingToken(term))),
            ));
        }
        let term = s.terms.entry(name.to_owned()).or_insert(0);
        *term += 1;
        let term = *term;
        s.leaders.insert(
            name.to_owned(),
            Leader {
                token: *token,
                identity: identity.to_vec(),
                term,
                expires_at: now + ttl,
            },
        );
        Ok(AcquireOutcome::Acquired(
            Lease::new().with_fencing_token(Some(FencingToken(term))),
        ))
    }

    async fn resign(&self, name: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        validate_key(name)?;
        let now = Instant::now();
        let mut s = self.lock_elections();
        match s.live(name, now) {
            None => Ok(ReleaseOutcome::Missing),
            Some(l) if l.token != *token => Ok(ReleaseOutcome::HeldByOther),
            Some(_) => {
                s.leaders.remove(name);
                Ok(ReleaseOutcome::Released)
            }
        }
    }

    async fn renew_lead(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        validate_key(name)?;
        validate_ttl(ttl)?;
        let now = Instant::now();
        let mut s = self.lock_elections();
        match s.live(name, now) {
            None => Ok(RenewOutcome::Missing),
            Some(l) if l.token != *token => Ok(RenewOutcome::HeldByOther),
            Some(l) => {
                l.expires_at = now + ttl;
                Ok(RenewOutcome::Renewed)
            }
        }
    }

    async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>> {
        validate_key(name)?;
        let now = Instant::now();
        let mut s = self.lock_elections();
        Ok(s.live(name, now).map(|l| LeaderInfo::new(l.identity.clone(), l.term)))
    }
}
