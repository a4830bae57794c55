//! Fair (FIFO) locking from etcd's own create-revision order, as etcd's
//! `concurrency.Mutex`: each waiter puts one entry under the lock's queue
//! prefix, attached to a lease of its own that lives `claim` (rounded up to
//! whole seconds, at least the server's minimum) past its last attempt; the
//! entry with the lowest create revision heads the queue. A waiter watches
//! only the entry just before its own (no herd); the head watches the lock
//! key. The grant is one transaction that takes the key only if it is free
//! and the waiter's entry is still the one it created, and deletes the
//! entry: nobody can queue ahead of a head, since revisions only grow.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse};
use lock_core::AcquireOutcome;
use lock_core::raw::FairWaiter;
use lock_core::{Error, LockToken, Result};
use tokio::time::Instant;

use crate::Inner;
use crate::error::{NAME, failed, no_header, write_failed};

impl Inner {
    /// The queue prefix of `key`: its length first, so no key's prefix is
    /// a prefix of another's.
    fn queue_prefix(&self, key: &str) -> Vec<u8> {
        format!("{}queue/{}:{key}/", self.namespace, key.len()).into_bytes()
    }

    fn entry_key(&self, key: &str, waiter: &FairWaiter) -> Vec<u8> {
        let mut k = self.queue_prefix(key);
        k.extend_from_slice(&waiter.id.hex_bytes());
        k
    }

    /// `waiter`'s own lease, granted on its first attempt and kept alive by
    /// every later one; granted anew if it ended (its place is lost then).
    async fn waiter_lease(&self, waiter: &FairWaiter) -> Result<i64> {
        self.waiter_lease_for(&waiter.id, waiter.claim).await
    }

    /// The lease of what the backend keeps for waiter `id` (a fair queue
    /// entry, a writer's intent, a semaphore reservation): granted for
    /// `claim` (rounded up to whole seconds, at least the server's minimum)
    /// at its first use, kept alive by each later one, granted anew if it
    /// ended. It lapses `claim` after the waiter's last attempt.
    pub(crate) async fn waiter_lease_for(&self, id: &LockToken, claim: Duration) -> Result<i64> {
        let known = self.waiters().get(id).copied();
        let secs = crate::whole_secs(claim.max(self.min_ttl), "a waiter's claim")?;
        if let Some(lease) = known {
            // Granted anew only when the server says it ended: after a
            // failed keepalive the waiter's entries may still be on it.
            match self.keepalives.keep_alive(&self.client, lease).await? {
                crate::session::KeepAlive::Alive { .. } => return Ok(lease),
                crate::session::KeepAlive::Gone => {}
            }
        }
        let granted = self
            .client
            .lease_client()
            .grant(secs, None)
            .await
            .map_err(|e| failed("granting a waiter's lease", e))?;
        self.waiters().insert(*id, granted.id());
        Ok(granted.id())
    }

    /// Whether waiter `id` has a lease of its own now.
    pub(crate) fn has_waiter_lease(&self, id: &LockToken) -> bool {
        self.waiters().contains_key(id)
    }

    fn waiters(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<LockToken, i64>> {
        self.waiter_leases.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn forget_waiter(&self, waiter: &FairWaiter) {
        self.forget_waiter_lease(&waiter.id);
    }

    /// Revoke waiter `id`'s lease, if it has one (what it held goes with it).
    pub(crate) fn forget_waiter_lease(&self, id: &LockToken) {
        if let Some(lease) = self.waiters().remove(id) {
            let mut leases = self.client.lease_client();
            tokio::spawn(async move {
                let _ = leases.revoke(lease).await;
            });
        }
    }

    pub(crate) async fn try_acquire_fair(
        &self,
        key: &str,
        token: &LockToken,
        ttl: Duration,
        waiter: &FairWaiter,
    ) -> Result<AcquireOutcome> {
        self.lease_secs(ttl)?; // a TTL the server refuses fails before queueing
        let k = self.lock_key(key)?;
        let entry = self.entry_key(key, waiter);
        let sent_at = Instant::now();
        let waiter_lease = self.waiter_lease(waiter).await?;
        let head = TxnOp::get(
            self.queue_prefix(key),
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Ascend)
                    .with_limit(1)
                    .with_keys_only(),
            ),
        );
        // Queue once (reads in a transaction see its own writes), and read
        // the head and the lock.
        let txn = Txn::new()
            .when([Compare::create_revision(entry.clone(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(entry.clone(), [], Some(PutOptions::new().with_lease(waiter_lease))),
                head.clone(),
                TxnOp::get(k.clone(), Some(GetOptions::new().with_keys_only())),
                TxnOp::get(entry.clone(), Some(GetOptions::new().with_keys_only())),
            ])
            .or_else([
                head,
                TxnOp::get(k.clone(), Some(GetOptions::new().with_keys_only())),
                TxnOp::get(entry.clone(), Some(GetOptions::new().with_keys_only())),
            ]);
        let resp = self
            .client
            .kv_client()
            .txn(txn)
            .await
            .map_err(|e| write_failed("queueing a fair waiter", e))?;
        let mut gets = resp.op_responses().into_iter().filter_map(|op| match op {
            TxnOpResponse::Get(mut g) => Some(g.take_kvs().into_iter().next()),
            _ => None,
        });
        let (head, lock, mine) = (gets.next().flatten(), gets.next().flatten(), gets.next().flatten());
        let Some(mine) = mine else {
            return Err(Error::backend(NAME, "the waiter's queue entry vanished"));
        };
        let is_head = head.is_some_and(|h| h.create_revision() == mine.create_revision());
        if lock.is_some() || !is_head {
            return Ok(AcquireOutcome::Held { retry_after: None });
        }
        // On a lease of the holder's own (what `leased_txn` does for every
        // grant).
        let leased = self
            .leased_txn(ttl, sent_at, "fair acquire", |lease| {
                Txn::new()
                    .when([
                        Compare::create_revision(k.clone(), CompareOp::Equal, 0),
                        Compare::create_revision(entry.clone(), CompareOp::Equal, mine.create_revision()),
                    ])
                    .and_then([
                        TxnOp::put(
                            k.clone(),
                            token.hex_bytes().to_vec(),
                            Some(PutOptions::new().with_lease(lease)),
                        ),
                        TxnOp::delete(entry.clone(), None),
                    ])
            })
            .await?;
        if !leased.resp.succeeded() {
            return Ok(AcquireOutcome::Held { retry_after: None });
        }
        self.forget_waiter(waiter);
        leased.grant(self, Some(leased.revision("fair acquire")?), sent_at)
    }

    /// Until the entry before `waiter`'s is deleted, or (at the head) the
    /// lock is released.
    pub(crate) async fn wait_fair(&self, key: &str, waiter: &FairWaiter) -> Result<()> {
        let entry = self.entry_key(key, waiter);
        let mut resp = self
            .client
            .kv_client()
            .get(
                self.queue_prefix(key),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_sort(SortTarget::Create, SortOrder::Ascend)
                        .with_keys_only(),
                ),
            )
            .await
            .map_err(|e| failed("reading the fair queue", e))?;
        let revision = resp
            .header()
            .ok_or_else(|| no_header("reading the fair queue"))?
            .revision();
        let kvs = resp.take_kvs();
        let predecessor = match kvs.iter().position(|kv| kv.key() == entry.as_slice()) {
            Some(i) if i > 0 => kvs[i - 1].key().to_vec(),
            Some(_) => return self.wait_for_release(key).await,
            None => return Ok(()), // not queued: the next attempt queues it
        };
        self.watch_until_deleted(predecessor, revision + 1).await
    }

    pub(crate) async fn leave_queue(&self, key: &str, waiter: &FairWaiter) -> Result<()> {
        let entry = self.entry_key(key, waiter);
        self.client
            .kv_client()
            .delete(entry, None)
            .await
            .map_err(|e| write_failed("leaving the fair queue", e))?;
        self.forget_waiter(waiter);
        Ok(())
    }
}
