//! The versioned store on etcd's own revisions: a value's version is its
//! key's `mod_revision`, cluster-wide and only growing, so versions never
//! repeat for any key, even after a delete. Every write is one transaction
//! comparing the version (plus a lease grant for a write with a TTL: each
//! value with a TTL on a lease of its own, which ends with it: a write that
//! is refused revokes the lease it took, one that replaces a value revokes
//! the old value's, a delete the deleted value's).

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse};
use lock_core::raw::validate_key;
use lock_core::{CasOutcome, CreateOutcome, DeleteOutcome, Expiry, Result, Versioned, VersionedStore};

use crate::error::{failed, no_header, write_failed};
use crate::lock::first_kv;
use crate::{EtcdBackend, Inner};

impl Inner {
    /// Put options for a write with `expiry`, and the lease granted for it:
    /// a fresh lease for a TTL (its own: the value expires exactly that long
    /// after the write, rounded up to whole seconds), no lease to persist,
    /// the current one to keep (no lease granted).
    async fn put_options(&self, expiry: Expiry) -> Result<(PutOptions, Option<i64>)> {
        Ok(match expiry {
            Expiry::After(ttl) => {
                let secs = self.lease_secs(ttl)?;
                let lease = self
                    .client
                    .lease_client()
                    .grant(secs, None)
                    .await
                    .map_err(|e| failed("granting the value's lease", e))?;
                (PutOptions::new().with_lease(lease.id()), Some(lease.id()))
            }
            Expiry::Persist => (PutOptions::new(), None),
            _ => (PutOptions::new().with_ignore_lease(), None),
        })
    }

    /// Revoke a value's lease that carries nothing (any more): best effort,
    /// awaited (a lease left behind ends within its TTL).
    async fn drop_lease(&self, lease: Option<i64>) {
        if let Some(lease) = lease.filter(|l| *l != 0) {
            let _ = self.client.lease_client().revoke(lease).await;
        }
    }

    /// After a write whose transaction failed: its lease carries nothing,
    /// unless the outcome is unknown (the value may be on it).
    async fn after_failed_write<T>(&self, lease: Option<i64>, result: Result<T>) -> Result<T> {
        if let Err(e) = &result
            && !e.is_outcome_unknown()
        {
            self.drop_lease(lease).await;
        }
        result
    }

    fn written(resp: &etcd_client::TxnResponse, what: &str) -> Result<u64> {
        let revision = resp.header().ok_or_else(|| no_header(what))?.revision();
        u64::try_from(revision).map_err(|_| no_header(what))
    }
}

fn versioned(kv: etcd_client::KeyValue) -> Versioned {
    Versioned {
        version: kv.mod_revision().unsigned_abs(),
        value: kv.into_key_value().1,
    }
}

#[async_trait]
impl VersionedStore for EtcdBackend {
    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        let k = self.inner.value_key(key)?;
        Ok(self.inner.get_entry(&k).await?.0.map(versioned))
    }

    async fn create(&self, key: &str, value: &[u8], expiry: Expiry) -> Result<CreateOutcome> {
        validate_key(key)?;
        expiry.validate()?;
        let k = self.inner.value_key(key)?;
        // A new key has no lease to keep.
        let expiry = if matches!(expiry, Expiry::After(_)) {
            expiry
        } else {
            Expiry::Persist
        };
        let (opts, lease) = self.inner.put_options(expiry).await?;
        let txn = Txn::new()
            .when([Compare::create_revision(k.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(k, value.to_vec(), Some(opts))]);
        let sent = self
            .inner
            .client
            .kv_client()
            .txn(txn)
            .await
            .map_err(|e| write_failed("create", e));
        let resp = self.inner.after_failed_write(lease, sent).await?;
        if !resp.succeeded() {
            self.inner.drop_lease(lease).await;
            return Ok(CreateOutcome::Exists);
        }
        Ok(CreateOutcome::Created {
            version: Inner::written(&resp, "create")?,
        })
    }

    async fn compare_and_set(&self, key: &str, expected: u64, value: &[u8], expiry: Expiry) -> Result<CasOutcome> {
        validate_key(key)?;
        expiry.validate()?;
        let k = self.inner.value_key(key)?;
        let Ok(expected) = i64::try_from(expected) else {
            // No revision is that high: the key, if any, has another version.
            return Ok(match self.get(key).await? {
                Some(v) => CasOutcome::Conflict(v),
                None => CasOutcome::Missing,
            });
        };
        let keeps_lease = !matches!(expiry, Expiry::After(_) | Expiry::Persist);
        let (opts, lease) = self.inner.put_options(expiry).await?;
        // The put returns the value it replaces: its lease, unless kept,
        // carries nothing afterwards.
        let txn = Txn::new()
            .when([
                Compare::create_revision(k.clone(), CompareOp::Greater, 0),
                Compare::mod_revision(k.clone(), CompareOp::Equal, expected),
            ])
            .and_then([TxnOp::put(k.clone(), value.to_vec(), Some(opts.with_prev_key()))])
            .or_else([TxnOp::get(k, None)]);
        let sent = self
            .inner
            .client
            .kv_client()
            .txn(txn)
            .await
            .map_err(|e| write_failed("compare-and-set", e));
        let resp = self.inner.after_failed_write(lease, sent).await?;
        if resp.succeeded() {
            if !keeps_lease {
                let replaced = resp.op_responses().into_iter().find_map(|op| match op {
                    TxnOpResponse::Put(p) => p.prev_key().map(KeyValue::lease),
                    _ => None,
                });
                self.inner.drop_lease(replaced.filter(|l| Some(*l) != lease)).await;
            }
            return Ok(CasOutcome::Written {
                version: Inner::written(&resp, "compare-and-set")?,
            });
        }
        self.inner.drop_lease(lease).await;
        Ok(match first_kv(&resp) {
            None => CasOutcome::Missing,
            Some(kv) => CasOutcome::Conflict(versioned(kv)),
        })
    }

    async fn delete(&self, key: &str, expected: u64) -> Result<DeleteOutcome> {
        validate_key(key)?;
        let k = self.inner.value_key(key)?;
        let expected = i64::try_from(expected).unwrap_or(i64::MAX);
        let when = vec![
            Compare::create_revision(k.clone(), CompareOp::Greater, 0),
            Compare::mod_revision(k.clone(), CompareOp::Equal, expected),
        ];
        Ok(match self.inner.delete_if(k, when, "delete").await? {
            Ok(()) => DeleteOutcome::Deleted,
            Err(None) => DeleteOutcome::Missing,
            Err(Some(kv)) => DeleteOutcome::Conflict {
                current_version: kv.mod_revision().unsigned_abs(),
            },
        })
    }

    fn name(&self) -> &str {
        crate::error::NAME
    }
}
