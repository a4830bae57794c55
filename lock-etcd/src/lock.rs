//! The lock operations: one transaction each, guarded by the owner's token
//! (the key's value); the fencing token is the key's create revision.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse};
use lock_core::raw::{AcquireOutcome, Lease, ReleaseOutcome, RenewOutcome};
use lock_core::{Error, FencingToken, LockToken, Result};
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
            let pending = self.sessions.unsettled(secs, &session);
            let (answer, kept) = futures::join!(kv.txn(txn), self.fresh(&session, sent_at, ttl));
            let resp = match answer {
                Err(e) if is_lease_not_found(&e) && attempt == 0 => {
                    pending.settle();
                    self.sessions.forget(secs, &session);
                    continue;
                }
                Err(e) => {
                    let err = Err(write_failed("acquire", e));
                    pending.settle_if_known(&err);
                    return err;
                }
                Ok(resp) => {
                    pending.settle();
                    resp
                }
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

    /// Run the transaction `build(lease)` for an entry on the shared lease
    /// of `ttl` (one grant again if that lease vanished since its last use),
    /// keeping the lease alive meanwhile (unless a recent keepalive covers
    /// `ttl` from `sent_at`).
    pub(crate) async fn leased_txn(
        &self,
        ttl: Duration,
        sent_at: Instant,
        what: &str,
        build: impl Fn(i64) -> Txn,
    ) -> Result<Leased> {
        let secs = self.lease_secs(ttl)?;
        for attempt in 0..2 {
            let session = self.sessions.get_or_grant(&self.client, secs).await?;
            let mut kv = self.client.kv_client();
            let pending = self.sessions.unsettled(secs, &session);
            let (answer, kept) = futures::join!(kv.txn(build(session.lease)), self.fresh(&session, sent_at, ttl));
            match answer {
                Err(e) if is_lease_not_found(&e) && attempt == 0 => {
                    pending.settle();
                    self.sessions.forget(secs, &session);
                }
                Err(e) => {
                    let err = Err(write_failed(what, e));
                    pending.settle_if_known(&err);
                    return err;
                }
                Ok(resp) => {
                    pending.settle();
                    return Ok(Leased {
                        resp,
                        session,
                        secs,
                        gone: matches!(kept, Ok(KeepAlive::Gone)),
                    });
                }
            }
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
        let when = Compare::value(k.clone(), CompareOp::Equal, token.hex_bytes().to_vec());
        Ok(release_outcome(self.delete_if(k, vec![when], "release").await?))
    }

    /// Deletes `k` in one transaction when every compare of `when` holds;
    /// otherwise reads it. `Ok(())` when deleted, else what is there now.
    pub(crate) async fn delete_if(
        &self,
        k: Vec<u8>,
        when: Vec<Compare>,
        what: &str,
    ) -> Result<std::result::Result<(), Option<KeyValue>>> {
        let txn = Txn::new()
            .when(when)
            .and_then([TxnOp::delete(k.clone(), None)])
            .or_else([TxnOp::get(k, None)]);
        let resp = self.release_txn(txn, what).await?;
        if resp.succeeded() {
            return Ok(Ok(()));
        }
        Ok(Err(first_kv(&resp)))
    }

    /// A transaction that deletes what a holder holds. When its outcome is
    /// unknown (or its future is dropped in flight), every shared lease is
    /// retired: the entries it may have left behind end within their TTL
    /// rather than live on with the lease.
    pub(crate) async fn release_txn(&self, txn: Txn, what: &str) -> Result<TxnResponse> {
        let pending = self.sessions.unsettled_release();
        let resp = self
            .client
            .kv_client()
            .txn(txn)
            .await
            .map_err(|e| write_failed(what, e));
        pending.settle_if_known(&resp);
        resp
    }

    pub(crate) async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        let entries = items
            .iter()
            .map(|(key, token)| Ok((self.lock_key(key)?, token.hex_bytes().to_vec())))
            .collect();
        self.renew_entries(entries, ttl).await
    }

    /// Renew entries on the shared lease of `ttl`: each is a key and the
    /// prefix its value starts with while its owner holds it (the whole
    /// token for a lock; empty for an entry whose key names its owner). One
    /// keepalive for the lease and one read per 128 keys; an entry taken
    /// with another TTL moves to this TTL's lease (same value, same create
    /// revision).
    pub(crate) async fn renew_entries(
        &self,
        entries: Vec<Result<(Vec<u8>, Vec<u8>)>>,
        ttl: Duration,
    ) -> Vec<Result<RenewOutcome>> {
        let secs = match self.lease_secs(ttl) {
            Ok(s) => s,
            Err(e) => return entries.iter().map(|_| Err(clone_error(&e))).collect(),
        };
        let since = Instant::now();
        let session = match self.sessions.get_or_grant(&self.client, secs).await {
            Ok(s) => s,
            Err(e) => return entries.iter().map(|_| Err(clone_error(&e))).collect(),
        };
        let keys: Vec<&[u8]> = entries
            .iter()
            .filter_map(|e| e.as_ref().ok().map(|(k, _)| k.as_slice()))
            .collect();
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
            Err(e) => return entries.iter().map(|_| Err(clone_error(&e))).collect(),
        };
        let mut read = match read {
            Ok(r) => r.into_iter(),
            Err(e) => return entries.iter().map(|_| Err(clone_error(&e))).collect(),
        };
        let mut out = Vec::with_capacity(entries.len());
        for entry in entries {
            let (_, owner) = match entry {
                Ok(e) => e,
                Err(e) => {
                    out.push(Err(e));
                    continue;
                }
            };
            let current = read.next().flatten();
            out.push(self.renew_one(&owner, current, &session, gone).await);
        }
        out
    }

    async fn renew_one(
        &self,
        owner: &[u8],
        current: Option<KeyValue>,
        session: &Arc<Session>,
        lease_gone: bool,
    ) -> Result<RenewOutcome> {
        let Some(kv) = current else {
            return Ok(RenewOutcome::Missing);
        };
        if !kv.value().starts_with(owner) {
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
        // Taken (or last renewed) with another TTL, or on a retired lease:
        // move it to this TTL's lease, still ours (same fence).
        Ok(match self.move_entry(&kv, session.lease, "renew").await? {
            Ok(()) => RenewOutcome::Renewed,
            Err(Some(_)) => RenewOutcome::HeldByOther,
            Err(None) => RenewOutcome::Missing,
        })
    }

    /// Moves `kv`, an entry its holder holds, to `lease`: the same value and
    /// the same create revision (the same fence), in one transaction that
    /// holds only while neither changed. `Ok(())` when moved, else what is
    /// there now (read in the same transaction).
    pub(crate) async fn move_entry(
        &self,
        kv: &KeyValue,
        lease: i64,
        what: &str,
    ) -> Result<std::result::Result<(), Option<KeyValue>>> {
        let k = kv.key().to_vec();
        let txn = Txn::new()
            .when([
                Compare::value(k.clone(), CompareOp::Equal, kv.value().to_vec()),
                Compare::create_revision(k.clone(), CompareOp::Equal, kv.create_revision()),
            ])
            .and_then([TxnOp::put(
                k.clone(),
                kv.value().to_vec(),
                Some(PutOptions::new().with_lease(lease)),
            )])
            .or_else([TxnOp::get(k, None)]);
        let resp = self
            .client
            .kv_client()
            .txn(txn)
            .await
            .map_err(|e| write_failed(what, e))?;
        Ok(if resp.succeeded() { Ok(()) } else { Err(first_kv(&resp)) })
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

/// A transaction run by [`Inner::leased_txn`], with the shared lease its
/// entries are attached to.
pub(crate) struct Leased {
    pub(crate) resp: TxnResponse,
    pub(crate) session: Arc<Session>,
    secs: i64,
    /// The server said the lease ended around the transaction.
    gone: bool,
}

impl Leased {
    /// The grant of an entry written (or found) on this lease: its validity
    /// runs from `sent_at` to what the lease's last keepalive covers. An
    /// error when the lease ended around the grant (the entry went with it).
    pub(crate) fn grant(&self, inner: &Inner, fence: Option<i64>, sent_at: Instant) -> Result<AcquireOutcome> {
        if self.gone {
            inner.sessions.forget(self.secs, &self.session);
            return Err(Error::backend(NAME, "the lease expired while the lock was granted"));
        }
        let fence = match fence {
            Some(f) => Some(FencingToken(
                u64::try_from(f).map_err(|_| no_header("grant (negative revision)"))?,
            )),
            None => None,
        };
        let validity = self.session.covered_until().saturating_duration_since(sent_at);
        Ok(AcquireOutcome::Acquired(
            Lease::new().with_fencing_token(fence).with_validity(Some(validity)),
        ))
    }

    /// The grant of an entry the holder holds already, found by this
    /// transaction (a re-sent acquire). The grant's validity counts on this
    /// transaction's lease, so an entry on another lease (taken with another
    /// TTL, or on a lease retired after a write of unknown outcome, which
    /// nothing keeps alive) moves to it first; not granted (`Held`) when the
    /// entry ended or changed meanwhile.
    pub(crate) async fn grant_found(
        &self,
        inner: &Inner,
        kv: &KeyValue,
        fence: Option<i64>,
        sent_at: Instant,
    ) -> Result<AcquireOutcome> {
        if !self.gone
            && kv.lease() != self.session.lease
            && inner
                .move_entry(kv, self.session.lease, "moving a held entry to the live lease")
                .await?
                .is_err()
        {
            return Ok(AcquireOutcome::Held { retry_after: None });
        }
        self.grant(inner, fence, sent_at)
    }

    /// The revision the transaction ran at.
    pub(crate) fn revision(&self, what: &str) -> Result<i64> {
        Ok(self.resp.header().ok_or_else(|| no_header(what))?.revision())
    }
}

/// A release's outcome from [`Inner::delete_if`]: released, or the key
/// missing or another's.
pub(crate) fn release_outcome(deleted: std::result::Result<(), Option<KeyValue>>) -> ReleaseOutcome {
    match deleted {
        Ok(()) => ReleaseOutcome::Released,
        Err(None) => ReleaseOutcome::Missing,
        Err(Some(_)) => ReleaseOutcome::HeldByOther,
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
