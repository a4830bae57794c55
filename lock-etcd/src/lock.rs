//! The lock operations: one transaction each, guarded by the owner's token
//! (the key's value); the fencing token is the key's create revision.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse};
use lock_core::{AcquireOutcome, Error, FencingToken, Lease, LockToken, ReleaseOutcome, RenewOutcome, Result};
use tokio::time::Instant;

use crate::error::{NAME, failed, is_lease_not_found, no_header, write_failed};
use crate::session::{KeepAlive, Session};
use crate::{Inner, MAX_TXN_OPS};

impl Inner {
    pub(crate) async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        let secs = self.lease_secs(ttl)?;
        let k = self.lock_key(key)?;
        let value = token.hex_bytes();
        let sent_at = Instant::now();
        // A lease that vanished between two uses is granted again once.
        for attempt in 0..2 {
            let session = self.sessions.get_or_grant(&self.client, secs).await?;
            let txn = Txn::new()
                .when([Compare::create_revision(k.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    k.clone(),
                    value.to_vec(),
                    Some(PutOptions::new().with_lease(session.lease)),
                )])
                .or_else([TxnOp::get(k.clone(), None)]);
            let mut kv = self.client.kv_client();
            let (answer, kept) = futures::join!(kv.txn(txn), self.fresh(&session, sent_at, ttl));
            let resp = match answer {
                Err(e) if is_lease_not_found(&e) && attempt == 0 => {
                    self.sessions.forget(secs, &session);
                    continue;
                }
                Err(e) => return Err(write_failed("acquire", e)),
                Ok(resp) => resp,
            };
            if !resp.succeeded() {
                return Ok(AcquireOutcome::Held { retry_after: None });
            }
            let revision = resp.header().ok_or_else(|| no_header("acquire"))?.revision();
            if matches!(kept, Ok(KeepAlive::Gone)) {
                // The lease ended around the grant: the key went with it.
                self.sessions.forget(secs, &session);
                return Err(Error::backend(NAME, "the lease expired while the lock was granted"));
            }
            let validity = session.covered_until().saturating_duration_since(sent_at);
            let fence = u64::try_from(revision).map_err(|_| no_header("acquire (negative revision)"))?;
            return Ok(AcquireOutcome::Acquired(
                Lease::new()
                    .with_fencing_token(Some(FencingToken(fence)))
                    .with_validity(Some(validity)),
            ));
        }
        Err(Error::backend(NAME, "the lease vanished twice in a row"))
    }

    /// Keep `session` alive unless its last keepalive already covers `ttl`
    /// from `since` (the key then lives at least that long).
    pub(crate) async fn fresh(&self, session: &Session, since: Instant, ttl: Duration) -> Result<KeepAlive> {
        if session.covered_until() >= since + ttl {
            return Ok(KeepAlive::Alive);
        }
        session
            .keep_alive(&self.client, since, &self.sessions.keepalives_sent)
            .await
    }

    pub(crate) async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        let k = self.lock_key(key)?;
        let value = token.hex_bytes();
        let txn = Txn::new()
            .when([Compare::value(k.clone(), CompareOp::Equal, value.to_vec())])
            .and_then([TxnOp::delete(k.clone(), None)])
            .or_else([TxnOp::get(k.clone(), None)]);
        let resp = self
            .client
            .kv_client()
            .txn(txn)
            .await
            .map_err(|e| write_failed("release", e))?;
        if resp.succeeded() {
            return Ok(ReleaseOutcome::Released);
        }
        Ok(match first_kv(&resp) {
            None => ReleaseOutcome::Missing,
            Some(_) => ReleaseOutcome::HeldByOther,
        })
    }

    pub(crate) async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        let prepared: Vec<Result<Vec<u8>>> = items.iter().map(|(key, _)| self.lock_key(key)).collect();
        let secs = match self.lease_secs(ttl) {
            Ok(s) => s,
            Err(e) => return items.iter().map(|_| Err(clone_error(&e))).collect(),
        };
        let since = Instant::now();
        let session = match self.sessions.get_or_grant(&self.client, secs).await {
            Ok(s) => s,
            Err(e) => return items.iter().map(|_| Err(clone_error(&e))).collect(),
        };
        let keys: Vec<&[u8]> = prepared.iter().filter_map(|k| k.as_deref().ok()).collect();
        let (kept, read) = futures::join!(
            session.keep_alive(&self.client, since, &self.sessions.keepalives_sent),
            self.read_keys(&keys)
        );
        let gone = match kept {
            Ok(KeepAlive::Alive) => false,
            Ok(KeepAlive::Gone) => {
                self.sessions.forget(secs, &session);
                true
            }
            Err(e) => return items.iter().map(|_| Err(clone_error(&e))).collect(),
        };
        let mut read = match read {
            Ok(r) => r.into_iter(),
            Err(e) => return items.iter().map(|_| Err(clone_error(&e))).collect(),
        };
        let mut out = Vec::with_capacity(items.len());
        for ((_, token), k) in items.iter().zip(prepared) {
            let k = match k {
                Ok(k) => k,
                Err(e) => {
                    out.push(Err(e));
                    continue;
                }
            };
            let current = read.next().flatten();
            out.push(self.renew_one(k, token, current, &session, gone).await);
        }
        out
    }

    async fn renew_one(
        &self,
        k: Vec<u8>,
        token: &LockToken,
        current: Option<KeyValue>,
        session: &Arc<Session>,
        lease_gone: bool,
    ) -> Result<RenewOutcome> {
        let value = token.hex_bytes();
        let Some(kv) = current else {
            return Ok(RenewOutcome::Missing);
        };
        if kv.value() != value.as_slice() {
            return Ok(RenewOutcome::HeldByOther);
        }
        if lease_gone && kv.lease() == session.lease {
            return Ok(RenewOutcome::Missing); // it went with its lease
        }
        if kv.lease() == session.lease {
            return Ok(RenewOutcome::Renewed);
        }
        if lease_gone {
            return Err(Error::backend(NAME, "the lease expired during the renewal"));
        }
        // Taken (or last renewed) with another TTL: move it to this TTL's
        // lease, still ours (same value, same create revision: same fence).
        let txn = Txn::new()
            .when([
                Compare::value(k.clone(), CompareOp::Equal, value.to_vec()),
                Compare::create_revision(k.clone(), CompareOp::Equal, kv.create_revision()),
            ])
            .and_then([TxnOp::put(
                k.clone(),
                value.to_vec(),
                Some(PutOptions::new().with_lease(session.lease)),
            )])
            .or_else([TxnOp::get(k, None)]);
        let resp = self
            .client
            .kv_client()
            .txn(txn)
            .await
            .map_err(|e| write_failed("renew", e))?;
        if resp.succeeded() {
            return Ok(RenewOutcome::Renewed);
        }
        Ok(match first_kv(&resp) {
            None => RenewOutcome::Missing,
            Some(_) => RenewOutcome::HeldByOther,
        })
    }

    /// Reads `keys` in transactions of at most [`MAX_TXN_OPS`] gets (one
    /// round trip each, sent together): each key's current entry, in order.
    async fn read_keys(&self, keys: &[&[u8]]) -> Result<Vec<Option<KeyValue>>> {
        let reads = keys.chunks(MAX_TXN_OPS).map(|chunk| {
            let ops: Vec<TxnOp> = chunk.iter().map(|k| TxnOp::get(k.to_vec(), None)).collect();
            let mut kv = self.client.kv_client();
            async move { kv.txn(Txn::new().and_then(ops)).await }
        });
        let mut out = Vec::with_capacity(keys.len());
        for resp in futures::future::join_all(reads).await {
            let resp = resp.map_err(|e| failed("reading the renewed keys", e))?;
            for op in resp.op_responses() {
                out.push(match op {
                    TxnOpResponse::Get(mut g) => g.take_kvs().into_iter().next(),
                    _ => None,
                });
            }
        }
        Ok(out)
    }

    /// The current entry of `key` (one read).
    pub(crate) async fn get_entry(&self, k: &[u8]) -> Result<(Option<KeyValue>, i64)> {
        let mut resp = self
            .client
            .kv_client()
            .get(k.to_vec(), None::<GetOptions>)
            .await
            .map_err(|e| failed("get", e))?;
        let revision = resp.header().ok_or_else(|| no_header("get"))?.revision();
        Ok((resp.take_kvs().into_iter().next(), revision))
    }
}

/// The entry of the first `get` in a transaction's answer.
pub(crate) fn first_kv(resp: &TxnResponse) -> Option<KeyValue> {
    resp.op_responses().into_iter().find_map(|op| match op {
        TxnOpResponse::Get(mut g) => g.take_kvs().into_iter().next(),
        _ => None,
    })
}

/// Errors are not `Clone`: one error per item of a failed batch, same
/// kind and message.
pub(crate) fn clone_error(e: &Error) -> Error {
    match e {
        Error::InvalidArgument(m) => Error::InvalidArgument(m.clone()),
        e if e.is_outcome_unknown() => Error::outcome_unknown(NAME, e.to_string()),
        e => Error::backend(NAME, e.to_string()),
    }
}
