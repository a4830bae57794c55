//! The versioned store on etcd's own revisions: a value's version is its
//! key's `mod_revision`, cluster-wide and only growing, so versions never
//! repeat for any key, even after a delete. Every write is one transaction
//! comparing the version (plus a lease grant for a write with a TTL).

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use lock_core::raw::validate_key;
use lock_core::{CasOutcome, CreateOutcome, DeleteOutcome, Expiry, Result, Versioned, VersionedStore};

use crate::error::{failed, no_header, write_failed};
use crate::lock::first_kv;
use crate::{EtcdBackend, Inner};

impl Inner {
    /// Put options for a write with `expiry`: a fresh lease for a TTL (its
    /// own: the value expires exactly that long after the write, rounded up
    /// to whole seconds), no lease to persist, the current one to keep.
    async fn put_options(&self, expiry: Expiry) -> Result<PutOptions> {
        Ok(match expiry {
            Expiry::After(ttl) => {
                let secs = self.lease_secs(ttl)?;
                let lease = self
                    .client
                    .lease_client()
                    .grant(secs, None)
                    .await
                    .map_err(|e| failed("granting the value's lease", e))?;
                PutOptions::new().with_lease(lease.id())
            }
            Expiry::Persist => PutOptions::new(),
            _ => PutOptions::new().with_ignore_lease(),
        })
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
        let opts = self.inner.put_options(expiry).await?;
        let txn = Txn::new()
            .when([Compare::create_revision(k.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(k, value.to_vec(), Some(opts))]);
        let resp = self
            .inner
            .client
            .kv_client()
            .txn(txn)
            .await
            .map_err(|e| write_failed("create", e))?;
        if !resp.succeeded() {
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
        let opts = self.inner.put_options(expiry).await?;
        let txn = Txn::new()
            .when([
                Compare::create_revision(k.clone(), CompareOp::Greater, 0),
                Compare::mod_revision(k.clone(), CompareOp::Equal, expected),
            ])
            .and_then([TxnOp::put(k.clone(), value.to_vec(), Some(opts))])
            .or_else([TxnOp::get(k, None)]);
        let resp = self
            .inner
            .client
            .kv_client()
            .txn(txn)
            .await
            .map_err(|e| write_failed("compare-and-set", e))?;
        if resp.succeeded() {
            return Ok(CasOutcome::Written {
                version: Inner::written(&resp, "compare-and-set")?,
            });
        }
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
