//! Multi-key locks: every key in one transaction, all or nothing, under
//! the plain locks' keys (so the two exclude each other), on one lease of
//! the holder's own.

use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
use lock_core::raw::MultiLockBackend;
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{Error, LockToken, Result};
use tokio::time::Instant;

use crate::EtcdBackend;
use crate::lock::delete_op;

fn check(keys: &[&str]) -> Result<()> {
    if keys.is_empty() {
        return Err(Error::invalid("a multi-key lock needs at least one key"));
    }
    if keys.len() > lock_core::MultiLockManager::MAX_KEYS {
        return Err(Error::invalid(format!(
            "a multi-key lock takes at most {} keys, got {}",
            lock_core::MultiLockManager::MAX_KEYS,
            keys.len()
        )));
    }
    Ok(())
}

/// Each key's current value, from the gets of a failed transaction.
fn values(resp: &etcd_client::TxnResponse) -> Vec<Option<Vec<u8>>> {
    resp.op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(mut g) => Some(g.take_kvs().into_iter().next().map(|kv| kv.into_key_value().1)),
            _ => None,
        })
        .collect()
}

#[async_trait]
impl MultiLockBackend for EtcdBackend {
    async fn try_acquire_all(&self, keys: &[&str], token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        check(keys)?;
        let inner = &self.inner;
        inner.lease_secs(ttl)?; // a TTL the server refuses fails before any write
        let ks = keys.iter().map(|k| inner.lock_key(k)).collect::<Result<Vec<_>>>()?;
        let value = token.hex_bytes().to_vec();
        let sent_at = Instant::now();
        // First every key free; after a read showing some keys already ours
        // (a retried acquire), those compared by value instead.
        let mut ours = vec![false; ks.len()];
        for _ in 0..2 {
            // On a lease of the holder's own.
            let leased = inner
                .leased_txn(ttl, sent_at, "multi-key acquire", |lease| {
                    let compares: Vec<Compare> = ks
                        .iter()
                        .zip(&ours)
                        .map(|(k, mine)| {
                            if *mine {
                                Compare::value(k.clone(), CompareOp::Equal, value.clone())
                            } else {
                                Compare::create_revision(k.clone(), CompareOp::Equal, 0)
                            }
                        })
                        .collect();
                    let puts: Vec<TxnOp> = ks
                        .iter()
                        .map(|k| TxnOp::put(k.clone(), value.clone(), Some(PutOptions::new().with_lease(lease))))
                        .collect();
                    let gets: Vec<TxnOp> = ks.iter().map(|k| TxnOp::get(k.clone(), None)).collect();
                    Txn::new().when(compares).and_then(puts).or_else(gets)
                })
                .await?;
            if leased.resp.succeeded() {
                return leased.grant(inner, Some(leased.revision("multi-key acquire")?), sent_at);
            }
            let resp = &leased.resp;
            let current = values(resp);
            if current.iter().flatten().any(|v| *v != value) {
                return Ok(AcquireOutcome::Held { retry_after: None });
            }
            ours = current.iter().map(Option::is_some).collect();
        }
        Ok(AcquireOutcome::Held { retry_after: None })
    }

    async fn release_all(&self, keys: &[&str], token: &LockToken) -> Result<ReleaseOutcome> {
        check(keys)?;
        let inner = &self.inner;
        let ks = keys.iter().map(|k| inner.lock_key(k)).collect::<Result<Vec<_>>>()?;
        let value = token.hex_bytes().to_vec();
        let txn = Txn::new()
            .when(
                ks.iter()
                    .map(|k| Compare::value(k.clone(), CompareOp::Equal, value.clone()))
                    .collect::<Vec<_>>(),
            )
            .and_then(ks.iter().map(|k| delete_op(k.clone())).collect::<Vec<_>>())
            .or_else(ks.iter().map(|k| TxnOp::get(k.clone(), None)).collect::<Vec<_>>());
        let resp = inner.release_txn(txn, "multi-key release", true).await?;
        if resp.succeeded() {
            return Ok(ReleaseOutcome::Released);
        }
        // Not all ours: give back the ones that are, as one transaction.
        let current = values(&resp);
        let mine: Vec<&Vec<u8>> = ks
            .iter()
            .zip(&current)
            .filter(|(_, v)| v.as_ref() == Some(&value))
            .map(|(k, _)| k)
            .collect();
        if !mine.is_empty() {
            let txn = Txn::new()
                .when(
                    mine.iter()
                        .map(|k| Compare::value(k.to_vec(), CompareOp::Equal, value.clone()))
                        .collect::<Vec<_>>(),
                )
                .and_then(mine.iter().map(|k| delete_op(k.to_vec())).collect::<Vec<_>>());
            inner.release_txn(txn, "multi-key release", false).await?;
        }
        Ok(if current.iter().flatten().any(|v| *v != value) {
            ReleaseOutcome::HeldByOther
        } else {
            ReleaseOutcome::Missing
        })
    }

    async fn renew_all(&self, keys: &[&str], token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        check(keys)?;
        let items: Vec<(&str, &LockToken)> = keys.iter().map(|k| (*k, token)).collect();
        for outcome in self.inner.renew_many(&items, ttl).await {
            match outcome? {
                RenewOutcome::Renewed => {}
                other => return Ok(other),
            }
        }
        Ok(RenewOutcome::Renewed)
    }
}
