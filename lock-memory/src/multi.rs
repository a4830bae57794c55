//! [`MultiLockBackend`] for the in-process backend: the mutex's own map, so
//! multi-key locks and plain locks on the same keys exclude each other.

use std::time::Duration;

use async_trait::async_trait;
use lock_core::raw::MultiLockBackend;
use lock_core::raw::{validate_key, validate_ttl};
use lock_core::{AcquireOutcome, Lease, ReleaseOutcome, RenewOutcome};
use lock_core::{FencingToken, LockToken, Result};
use tokio::time::Instant;

use crate::MemoryBackend;

fn validate(keys: &[&str]) -> Result<()> {
    if keys.is_empty() {
        return Err(lock_core::Error::invalid("a multi-key lock needs at least one key"));
    }
    keys.iter().try_for_each(|k| validate_key(k))
}

#[async_trait]
impl MultiLockBackend for MemoryBackend {
    async fn try_acquire_all(&self, keys: &[&str], token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        validate(keys)?;
        validate_ttl(ttl)?;
        let now = Instant::now();
        let mut s = self.state_at(now);
        for key in keys {
            if let Some(held) = s.locks.get(*key)
                && held.token != *token
            {
                return Ok(AcquireOutcome::Held {
                    retry_after: Some(held.expires_at - now),
                });
            }
        }
        // Fences come from one sequence shared by every key: the last one
        // drawn is above every earlier token of each key of the set.
        let mut fence = 0;
        for key in keys {
            // A key this token already holds (a retried acquire) gets a fresh
            // entry: the old one's expiry index goes with it.
            s.remove_lock(key);
            fence = s.insert_lock(key, *token, now + ttl);
        }
        Ok(AcquireOutcome::Acquired(
            Lease::new().with_fencing_token(Some(FencingToken(fence))),
        ))
    }

    async fn release_all(&self, keys: &[&str], token: &LockToken) -> Result<ReleaseOutcome> {
        validate(keys)?;
        let mut s = self.state_at(Instant::now());
        let (mut mine, mut other) = (0, 0);
        for key in keys {
            match s.locks.get(*key) {
                Some(held) if held.token == *token => {
                    s.remove_lock(key);
                    s.notify_release(key);
                    mine += 1;
                }
                Some(_) => other += 1,
                None => {}
            }
        }
        Ok(if mine == keys.len() {
            ReleaseOutcome::Released
        } else if other > 0 {
            ReleaseOutcome::HeldByOther
        } else {
            ReleaseOutcome::Missing
        })
    }

    async fn renew_all(&self, keys: &[&str], token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        validate(keys)?;
        validate_ttl(ttl)?;
        let now = Instant::now();
        let mut s = self.state_at(now);
        for key in keys {
            match s.locks.get(*key) {
                None => return Ok(RenewOutcome::Missing),
                Some(held) if held.token != *token => return Ok(RenewOutcome::HeldByOther),
                Some(_) => {}
            }
        }
        for key in keys {
            s.renew(key, token, ttl, now);
        }
        Ok(RenewOutcome::Renewed)
    }
}
