//! Read-write locks, writer-preferring, each a single transaction: a
//! lock's entries live under its own prefix — readers `r/<token>`, the
//! upgradeable reader `u/<token>`, the writer `w/<token>`, a waiting
//! writer's intent `i/<token>` — each holder's on a lease of its own.
//!
//! - A **reader** is granted when no writer and no intent exist (two range
//!   compares), an **upgradeable reader** when besides no upgradeable one
//!   exists, a **writer** when no reader (plain or upgradeable) and no
//!   writer exist; the writer's grant deletes every intent in the same
//!   transaction.
//! - An **upgrade** moves `u/<token>` to `w/<token>` (on a new lease) when
//!   no plain reader is left, deleting every intent; refused, it leaves its
//!   intent as a waiting writer does. A **downgrade** moves `w/<token>` back
//!   to `u/<token>`. The old entry's lease is revoked.
//! - A refused **waiting writer** leaves its intent (guarded by "no other
//!   writer's intent"), so a stream of readers cannot starve it: new
//!   readers are refused while it waits. The intent lives on a lease of the
//!   writer's own, kept alive by each of its attempts (which put the intent
//!   again in their own transaction), so it lapses one TTL (rounded up to
//!   whole seconds) after the writer's last attempt.
//! - A writer's **fencing token** is its entry's create revision (strictly
//!   increasing per name, as every revision); readers carry none.

use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, DeleteOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use lock_core::raw::{RwLockBackend, conversion_not_held};
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{LockToken, Result, RwMode};
use tokio::time::Instant;

use crate::EtcdBackend;
use crate::error::write_failed;
use crate::kinds::{Prefix, no_entry_in, no_entry_in_except};
use crate::lock::{delete_op, first_kv};

/// An entry's value (the key names its owner).
const HELD: &[u8] = b"1";

#[async_trait]
impl RwLockBackend for EtcdBackend {
    /// One range read of the lock's entries.
    async fn inspect_rw(&self, name: &str) -> Result<lock_core::RwInfo> {
        self.inner.inspect_rw(name).await
    }

    async fn try_acquire_rw(
        &self,
        name: &str,
        mode: RwMode,
        waiting: bool,
        token: &LockToken,
        ttl: Duration,
    ) -> Result<AcquireOutcome> {
        let inner = &self.inner;
        let p = Prefix::new(inner, "rw", name)?;
        let (readers, writers, intents) = (p.sub("r/"), p.sub("w/"), p.sub("i/"));
        let upgraders = p.sub("u/");
        let sent_at = Instant::now();
        match mode {
            RwMode::Read | RwMode::Upgradeable => {
                let upgradeable = mode == RwMode::Upgradeable;
                let mine = if upgradeable {
                    upgraders.entry(token)
                } else {
                    readers.entry(token)
                };
                let mut free = vec![no_entry_in(&writers), no_entry_in(&intents)];
                if upgradeable {
                    free.push(no_entry_in(&upgraders));
                }
                let leased = inner
                    .leased_txn(ttl, sent_at, "read-lock acquire", |lease| {
                        Txn::new()
                            .when(free.clone())
                            .and_then([TxnOp::put(
                                mine.clone(),
                                HELD,
                                Some(PutOptions::new().with_lease(lease)),
                            )])
                            .or_else([TxnOp::get(mine.clone(), None)])
                    })
                    .await?;
                // Granted (the entry written on this lease), or held
                // already (a re-sent acquire).
                if leased.resp.succeeded() {
                    return leased.grant(inner, None, sent_at);
                }
                if let Some(kv) = first_kv(&leased.resp) {
                    return leased.grant_found(inner, &kv, None, sent_at).await;
                }
                Ok(AcquireOutcome::Held { retry_after: None })
            }
            RwMode::Write => {
                let mine = writers.entry(token);
                let intent = intents.entry(token);
                // A writer that waited already keeps its intent's lease alive.
                let intent_lease = if waiting && inner.has_waiter_lease(token) {
                    Some(inner.waiter_lease_for(token, ttl).await?)
                } else {
                    None
                };
                let leave_intent = |lease: i64| {
                    let mut free = no_entry_in_except(&intents, &intent);
                    free.push(Compare::create_revision(mine.clone(), CompareOp::Equal, 0));
                    Txn::new().when(free).and_then([TxnOp::put(
                        intent.clone(),
                        HELD,
                        Some(PutOptions::new().with_lease(lease)),
                    )])
                };
                let leased = inner
                    .leased_txn(ttl, sent_at, "write-lock acquire", |lease| {
                        let mut refused = vec![TxnOp::get(mine.clone(), None)];
                        if let Some(intent_lease) = intent_lease {
                            // Leave an intent unless another writer's is live.
                            refused.push(TxnOp::txn(leave_intent(intent_lease)));
                        }
                        Txn::new()
                            .when([no_entry_in(&readers), no_entry_in(&upgraders), no_entry_in(&writers)])
                            .and_then([
                                TxnOp::delete(
                                    intents.start.clone(),
                                    Some(DeleteOptions::new().with_range(intents.end.clone())),
                                ),
                                TxnOp::put(mine.clone(), HELD, Some(PutOptions::new().with_lease(lease))),
                            ])
                            .or_else(refused)
                    })
                    .await?;
                if leased.resp.succeeded() {
                    inner.forget_waiter_lease(token);
                    let revision = leased.revision("write-lock acquire")?;
                    return leased.grant(inner, Some(revision), sent_at);
                }
                if let Some(kv) = first_kv(&leased.resp) {
                    // Held already (a re-sent acquire): its token stays.
                    return leased
                        .grant_found(inner, &kv, Some(kv.create_revision()), sent_at)
                        .await;
                }
                if waiting && intent_lease.is_none() {
                    // First refusal of a waiting writer: its intent, on a
                    // lease of its own, right away.
                    let lease = inner.waiter_lease_for(token, ttl).await?;
                    inner
                        .client
                        .kv_client()
                        .txn(leave_intent(lease))
                        .await
                        .map_err(|e| write_failed("leaving a writer's intent", e))?;
                }
                Ok(AcquireOutcome::Held { retry_after: None })
            }
        }
    }

    async fn release_rw(&self, name: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        let p = Prefix::new(&self.inner, "rw", name)?;
        self.inner.forget_waiter_lease(token);
        let txn = Txn::new().and_then([
            delete_op(p.sub("r/").entry(token)),
            delete_op(p.sub("w/").entry(token)),
            delete_op(p.sub("u/").entry(token)),
            delete_op(p.sub("i/").entry(token)),
        ]);
        let resp = self.inner.release_txn(txn, "read-write release", false).await?;
        let held = resp
            .op_responses()
            .into_iter()
            .take(3)
            .any(|op| matches!(op, TxnOpResponse::Delete(d) if d.deleted() > 0));
        Ok(if held {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::Missing
        })
    }

    async fn renew_rw(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        let p = Prefix::new(&self.inner, "rw", name)?;
        let entries = vec![
            Ok((p.sub("r/").entry(token), Vec::new())),
            Ok((p.sub("w/").entry(token), Vec::new())),
            Ok((p.sub("u/").entry(token), Vec::new())),
        ];
        let mut missing = Ok(RenewOutcome::Missing);
        for outcome in self.inner.renew_entries(entries, ttl).await {
            match outcome {
                Ok(RenewOutcome::Renewed) => return Ok(RenewOutcome::Renewed),
                Ok(_) => {}
                Err(e) => missing = Err(e),
            }
        }
        missing
    }

    async fn upgrade_rw(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        let inner = &self.inner;
        let p = Prefix::new(inner, "rw", name)?;
        let (readers, intents) = (p.sub("r/"), p.sub("i/"));
        let (mine, upgradeable, intent) = (p.sub("w/").entry(token), p.sub("u/").entry(token), intents.entry(token));
        let sent_at = Instant::now();
        let intent_lease = if inner.has_waiter_lease(token) {
            Some(inner.waiter_lease_for(token, ttl).await?)
        } else {
            None
        };
        let leave_intent = |lease: i64| {
            let mut free = no_entry_in_except(&intents, &intent);
            free.push(Compare::create_revision(upgradeable.clone(), CompareOp::Greater, 0));
            Txn::new().when(free).and_then([TxnOp::put(
                intent.clone(),
                HELD,
                Some(PutOptions::new().with_lease(lease)),
            )])
        };
        let leased = inner
            .leased_txn(ttl, sent_at, "upgrade", |lease| {
                let mut refused = vec![TxnOp::get(mine.clone(), None), TxnOp::get(upgradeable.clone(), None)];
                if let Some(intent_lease) = intent_lease {
                    refused.push(TxnOp::txn(leave_intent(intent_lease)));
                }
                Txn::new()
                    .when([
                        Compare::create_revision(upgradeable.clone(), CompareOp::Greater, 0),
                        no_entry_in(&readers),
                    ])
                    .and_then([
                        delete_op(upgradeable.clone()),
                        TxnOp::delete(
                            intents.start.clone(),
                            Some(DeleteOptions::new().with_range(intents.end.clone())),
                        ),
                        TxnOp::put(mine.clone(), HELD, Some(PutOptions::new().with_lease(lease))),
                    ])
                    .or_else(refused)
            })
            .await?;
        if leased.resp.succeeded() {
            inner.forget_waiter_lease(token);
            end_old_lease(inner, &leased.resp);
            let revision = leased.revision("upgrade")?;
            return leased.grant(inner, Some(revision), sent_at);
        }
        let found = found_kvs(&leased.resp);
        if let Some(Some(kv)) = found.first() {
            // Upgraded already (a re-sent upgrade): its token stays.
            return leased.grant_found(inner, kv, Some(kv.create_revision()), sent_at).await;
        }
        if !matches!(found.get(1), Some(Some(_))) {
            return Err(conversion_not_held(name));
        }
        if intent_lease.is_none() {
            // First refusal: its intent, on a lease of its own, right away.
            let lease = inner.waiter_lease_for(token, ttl).await?;
            inner
                .client
                .kv_client()
                .txn(leave_intent(lease))
                .await
                .map_err(|e| write_failed("leaving an upgrade's intent", e))?;
        }
        Ok(AcquireOutcome::Held { retry_after: None })
    }

    async fn downgrade_rw(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        let inner = &self.inner;
        let p = Prefix::new(inner, "rw", name)?;
        let (written, mine) = (p.sub("w/").entry(token), p.sub("u/").entry(token));
        let sent_at = Instant::now();
        let leased = inner
            .leased_txn(ttl, sent_at, "downgrade", |lease| {
                Txn::new()
                    .when([Compare::create_revision(written.clone(), CompareOp::Greater, 0)])
                    .and_then([
                        delete_op(written.clone()),
                        TxnOp::put(mine.clone(), HELD, Some(PutOptions::new().with_lease(lease))),
                    ])
                    .or_else([TxnOp::get(mine.clone(), None)])
            })
            .await?;
        if leased.resp.succeeded() {
            end_old_lease(inner, &leased.resp);
            return leased.grant(inner, None, sent_at);
        }
        match first_kv(&leased.resp) {
            // Downgraded already (a re-sent downgrade).
            Some(kv) => leased.grant_found(inner, &kv, None, sent_at).await,
            None => Err(conversion_not_held(name)),
        }
    }
}

/// The entries a refused transaction's gets found, in order (`None`: none).
fn found_kvs(resp: &etcd_client::TxnResponse) -> Vec<Option<etcd_client::KeyValue>> {
    resp.op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(g) => Some(g.kvs().first().cloned()),
            _ => None,
        })
        .collect()
}

/// A conversion moved the holder's entry to a new lease: the old one
/// (what its delete found) carries nothing of it any more and ends now.
fn end_old_lease(inner: &crate::Inner, resp: &etcd_client::TxnResponse) {
    for op in resp.op_responses() {
        if let TxnOpResponse::Delete(d) = op {
            for lease in d
                .prev_kvs()
                .iter()
                .map(etcd_client::KeyValue::lease)
                .filter(|l| *l != 0)
            {
                if inner.sessions.unhold(lease).is_some() {
                    crate::session::revoke(&inner.client, lease);
                }
            }
        }
    }
}
