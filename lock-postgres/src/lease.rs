//! [`LockBackend`] for [`PostgresBackend`]: plain locks as lease rows, their
//! fair queue and release notifications.

use std::time::Duration;

use async_trait::async_trait;
use lock_core::raw::FairWaiter;
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{Capabilities, Error, LockBackend, LockToken, Result};
use tokio_postgres::types::Type;

use crate::conn::Op;
use crate::error::{BACKEND, bad_reply};
use crate::outcome::{acquire_outcome, outcome_code, release_outcome, renew_outcome};
use crate::{Param, PostgresBackend, RENEW_BATCH, ReplicationMode, check_key, notify, ttl_param};

#[async_trait]
impl LockBackend for PostgresBackend {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        check_key(key)?;
        let ms = ttl_param(ttl)?;
        let owner: &[u8] = token.as_bytes();
        let Some(n) = &self.inner.notifier else {
            let params: [Param<'_>; 3] = [(&key, Type::TEXT), (&owner, Type::BYTEA), (&ms, Type::INT8)];
            return acquire_outcome(&self.run(&self.inner.sql.acquire, &params, Op::Grant(owner)).await?);
        };
        // A lease held by another is marked as waited for, so that its
        // release notifies (a release nobody waits for does not).
        let had_waited = n.waited_lately(key);
        let params: [Param<'_>; 4] = [
            (&key, Type::TEXT),
            (&owner, Type::BYTEA),
            (&ms, Type::INT8),
            (&had_waited, Type::BOOL),
        ];
        let outcome = acquire_outcome(
            &self
                .run(&self.inner.sql.acquire_marking, &params, Op::Grant(owner))
                .await?,
        )?;
        if matches!(outcome, AcquireOutcome::Held { .. }) {
            // Its wait comes next: a release announced before that wait
            // begins is kept for it.
            n.expect_plain(key);
        }
        Ok(outcome)
    }

    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        check_key(key)?;
        let owner: &[u8] = token.as_bytes();
        let channel = self.inner.channel.as_str();
        let rows = if self.inner.notifier.is_some() {
            let params: [Param<'_>; 3] = [(&key, Type::TEXT), (&owner, Type::BYTEA), (&channel, Type::TEXT)];
            self.run(&self.inner.sql.release_notify, &params, Op::Cleanup(owner))
                .await?
        } else {
            let params: [Param<'_>; 2] = [(&key, Type::TEXT), (&owner, Type::BYTEA)];
            self.run(&self.inner.sql.release, &params, Op::Cleanup(owner)).await?
        };
        outcome_code(&rows, "release").map(release_outcome)
    }

    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        check_key(key)?;
        let ms = ttl_param(ttl)?;
        let owner: &[u8] = token.as_bytes();
        let params: [Param<'_>; 3] = [(&key, Type::TEXT), (&owner, Type::BYTEA), (&ms, Type::INT8)];
        let rows = self.query(&self.inner.sql.renew, &params, true).await?;
        outcome_code(&rows, "renew").map(renew_outcome)
    }

    async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        let mut out = Vec::with_capacity(items.len());
        let ms = match ttl_param(ttl) {
            Ok(ms) => ms,
            Err(e) => return items.iter().map(|_| Err(clone_invalid(&e))).collect(),
        };
        for chunk in items.chunks(RENEW_BATCH) {
            // Bad keys answer alone; the rest go in one statement.
            let checks: Vec<Result<()>> = chunk.iter().map(|(k, _)| check_key(k)).collect();
            let keys: Vec<&str> = chunk
                .iter()
                .zip(&checks)
                .filter(|(_, c)| c.is_ok())
                .map(|((k, _), _)| *k)
                .collect();
            let owners: Vec<&[u8]> = chunk
                .iter()
                .zip(&checks)
                .filter(|(_, c)| c.is_ok())
                .map(|((_, t), _)| t.as_bytes().as_slice())
                .collect();
            let params: [Param<'_>; 3] = [
                (&keys, Type::TEXT_ARRAY),
                (&owners, Type::BYTEA_ARRAY),
                (&ms, Type::INT8),
            ];
            let mut answers = match self.query(&self.inner.sql.renew_many, &params, true).await {
                Ok(rows) if rows.len() == keys.len() => rows
                    .iter()
                    .map(|r| {
                        r.try_get::<_, i32>(0)
                            .map(renew_outcome)
                            .map_err(|_| bad_reply("renew_many"))
                    })
                    .collect::<Vec<_>>(),
                Ok(_) => keys.iter().map(|_| Err(bad_reply("renew_many"))).collect(),
                Err(e) => keys.iter().map(|_| Err(copy_error(&e))).collect(),
            }
            .into_iter();
            for check in checks {
                out.push(match check {
                    Ok(()) => answers.next().unwrap_or_else(|| Err(bad_reply("renew_many"))),
                    Err(e) => Err(e),
                });
            }
        }
        out
    }

    async fn try_acquire_fair(
        &self,
        key: &str,
        token: &LockToken,
        ttl: Duration,
        waiter: &FairWaiter,
    ) -> Result<AcquireOutcome> {
        check_key(key)?;
        let ms = ttl_param(ttl)?;
        let claim = ttl_param(waiter.claim)?;
        let owner: &[u8] = token.as_bytes();
        let id: &[u8] = waiter.id.as_bytes();
        let notifier = self.inner.notifier.as_ref();
        // Where a release that names it the head is sent (its process's
        // own channel), if this backend listens.
        let inbox: Option<&str> = notifier.map(notify::Notifier::inbox);
        let params: [Param<'_>; 6] = [
            (&key, Type::TEXT),
            (&owner, Type::BYTEA),
            (&ms, Type::INT8),
            (&id, Type::BYTEA),
            (&claim, Type::INT8),
            (&inbox, Type::TEXT),
        ];
        if let Some(n) = notifier {
            // Before the attempt: a release that names it the head while
            // the attempt is in flight still wakes its next wait.
            n.expect_fair(key, waiter);
        }
        let outcome = acquire_outcome(
            &self
                .run(&self.inner.sql.acquire_fair, &params, Op::Grant(owner))
                .await?,
        )?;
        match (outcome, notifier) {
            (AcquireOutcome::Acquired(lease), Some(n)) => {
                n.forget_fair(key, waiter);
                Ok(AcquireOutcome::Acquired(lease))
            }
            // Next in line: with notifications the release wakes it, and
            // the claim's pace keeps its entry (no need to poll faster).
            (
                AcquireOutcome::Held {
                    retry_after: Some(Duration::ZERO),
                },
                Some(_),
            ) => Ok(AcquireOutcome::Held { retry_after: None }),
            (outcome, _) => Ok(outcome),
        }
    }

    async fn leave_queue(&self, key: &str, waiter: &FairWaiter) -> Result<()> {
        check_key(key)?;
        let id: &[u8] = waiter.id.as_bytes();
        let channel = self.inner.channel.as_str();
        if let Some(n) = &self.inner.notifier {
            n.forget_fair(key, waiter);
            let params: [Param<'_>; 3] = [(&key, Type::TEXT), (&id, Type::BYTEA), (&channel, Type::TEXT)];
            self.query(&self.inner.sql.leave_queue_notify, &params, true)
                .await
                .map(drop)
        } else {
            let params: [Param<'_>; 2] = [(&key, Type::TEXT), (&id, Type::BYTEA)];
            self.query(&self.inner.sql.leave_queue, &params, true).await.map(drop)
        }
    }

    async fn wait_for_release(&self, key: &str, max_wait: Duration) {
        match &self.inner.notifier {
            Some(n) => n.wait(key, max_wait).await,
            None => tokio::time::sleep(max_wait).await,
        }
    }

    async fn wait_fair(&self, key: &str, waiter: &FairWaiter, max_wait: Duration) {
        match &self.inner.notifier {
            // Woken when a release names it the queue's head.
            Some(n) => n.wait_fair(key, waiter, max_wait).await,
            None => tokio::time::sleep(max_wait).await,
        }
    }

    /// One `SELECT` of the key's live row: its fence and remaining ms.
    async fn inspect(&self, key: &str) -> Result<lock_core::LockInfo> {
        check_key(key)?;
        self.inspect_lock(key).await
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new(BACKEND);
        caps.fencing_tokens = true;
        caps.fair_queue = true;
        // Every commit waits for the synchronous standbys.
        caps.replica_ack = self
            .inner
            .replication
            .get()
            .is_some_and(ReplicationMode::is_synchronous);
        caps.semaphores = true;
        caps.multi_key_locks = true;
        caps.rw_locks = true;
        caps.leader_election = true;
        caps.distinguishes_missing = true;
        caps.release_notifications = self.inner.notifier.is_some();
        caps
    }
}

fn clone_invalid(e: &Error) -> Error {
    Error::invalid(match e {
        Error::InvalidArgument(m) => m.clone(),
        other => other.to_string(),
    })
}

/// One batch failure, repeated for every item of the batch.
fn copy_error(e: &Error) -> Error {
    if let Error::Refused { reason, message, .. } = e {
        return Error::refused(BACKEND, *reason, message.clone());
    }
    let message = match e {
        Error::Backend { message, .. } => message.clone(),
        other => other.to_string(),
    };
    if e.is_outcome_unknown() {
        Error::outcome_unknown(BACKEND, message)
    } else {
        Error::backend(BACKEND, message)
    }
}
