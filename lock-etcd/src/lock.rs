//! The lock operations: one transaction each, guarded by the owner's token
//! (the key's value); the fencing token is the key's create revision.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use lock_core::{AcquireOutcome, Lease, ReleaseOutcome};
use lock_core::{Error, FencingToken, LockToken, Result};
use tokio::time::Instant;

use crate::Inner;
use crate::error::{NAME, failed, is_lease_not_found, no_header, write_failed};
use crate::session::{KeepAlive, Session};

impl Inner {
    pub(crate) async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        let k = self.lock_key(key)?;
        let value = token.hex_bytes();
        let sent_at = Instant::now();
        // Known from the write on, for renewals that trust the lease.
        self.held.expect(&k, &value);
        let granted = async {
            let leased = self
                .leased_txn(ttl, sent_at, "acquire", |lease| {
                    Txn::new()
                        .when([Compare::create_revision(k.clone(), CompareOp::Equal, 0)])
                        .and_then([TxnOp::put(
                            k.clone(),
                            value.to_vec(),
                            Some(PutOptions::new().with_lease(lease)),
                        )])
                        .or_else([TxnOp::get(k.clone(), None)])
                })
                .await?;
            if !leased.resp.succeeded() {
                return Ok(AcquireOutcome::Held { retry_after: None });
            }
            let revision = leased.revision("acquire")?;
            self.held.confirm(&k, &value, &leased.session, revision, revision);
            leased.grant(self, Some(revision), sent_at)
        }
        .await;
        if !matches!(granted, Ok(AcquireOutcome::Acquired(_))) {
            self.held.forget(&k, &value);
        }
        granted
    }

    /// Run the transaction `build(lease)` for a holder's entries on a lease
    /// of their own for `ttl` (a spare, or a new grant; granted again once
    /// if a spare vanished meanwhile), keeping it alive meanwhile unless its
    /// last keepalive covers `ttl` from `sent_at`.
    pub(crate) async fn leased_txn(
        &self,
        ttl: Duration,
        sent_at: Instant,
        what: &str,
        build: impl Fn(i64) -> Txn,
    ) -> Result<Leased<'_>> {
        let secs = self.lease_secs(ttl)?;
        for attempt in 0..2 {
            let session = self.sessions.take(&self.client, secs).await?;
            let mut kv = self.client.kv_client();
            // Dropped in flight, the lease is simply not used again: nobody
            // renews it, so whatever the write left on it ends within its
            // TTL.
            let (answer, kept) = futures::join!(kv.txn(build(session.lease)), self.fresh(&session, sent_at, ttl));
            match answer {
                Err(e) if is_lease_not_found(&e) && attempt == 0 => {}
                Err(e) => {
                    let err = write_failed(what, e);
                    if !err.is_outcome_unknown() {
                        self.sessions.put_back(&self.client, session);
                    }
                    return Err(err);
                }
                Ok(resp) => {
                    return Ok(Leased {
                        resp,
                        session,
                        gone: matches!(kept, Ok(KeepAlive::Gone)),
                        inner: self,
                        used: std::sync::atomic::AtomicBool::new(false),
                    });
                }
            }
        }
        Err(Error::backend(NAME, "the lease vanished twice in a row"))
    }

    /// Keep `session` alive unless its last keepalive already covers `ttl`
    /// from `since` (the key then lives at least that long).
    pub(crate) async fn fresh(&self, session: &Session, since: Instant, ttl: Duration) -> Result<KeepAlive> {
        let covered = session.covered_until();
        if covered >= since + ttl {
            return Ok(KeepAlive::Alive {
                ttl: session.granted_secs,
                sent_at: since,
                revision: 0,
            });
        }
        let kept = self.keepalives.keep_alive(&self.client, session.lease).await?;
        if let KeepAlive::Alive { sent_at, .. } = kept {
            session.refresh(sent_at);
        }
        Ok(kept)
    }

    pub(crate) async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        let k = self.lock_key(key)?;
        let when = Compare::value(k.clone(), CompareOp::Equal, token.hex_bytes().to_vec());
        let txn = Txn::new()
            .when([when])
            .and_then([delete_op(k.clone())])
            .or_else([TxnOp::get(k.clone(), None)]);
        let resp = self.release_txn(txn, "release", true).await;
        self.held.forget(&k, &token.hex_bytes());
        let resp = resp?;
        if resp.succeeded() {
            return Ok(ReleaseOutcome::Released);
        }
        Ok(release_outcome(Err(first_kv(&resp))))
    }

    /// Deletes `k` in one transaction when every compare of `when` holds;
    /// otherwise reads it. `Ok(())` when deleted, else what is there now.
    /// The lease of what it deleted is revoked.
    pub(crate) async fn delete_if(
        &self,
        k: Vec<u8>,
        when: Vec<Compare>,
        what: &str,
    ) -> Result<std::result::Result<(), Option<KeyValue>>> {
        let txn = Txn::new()
            .when(when)
            .and_then([delete_op(k.clone())])
            .or_else([TxnOp::get(k, None)]);
        let resp = self.release_txn(txn, what, false).await?;
        if resp.succeeded() {
            return Ok(Ok(()));
        }
        Ok(Err(first_kv(&resp)))
    }

    /// A transaction that deletes what a holder holds (its deletes made with
    /// [`delete_op`]): the leases of the entries it deleted carry nothing of
    /// the holder's any more, so they end now (a lone lock's lease becomes a
    /// spare when `reuse`). A release of unknown outcome leaves them be:
    /// nobody renews them, so what is on them ends within its TTL.
    pub(crate) async fn release_txn(&self, txn: Txn, what: &str, reuse: bool) -> Result<TxnResponse> {
        let resp = self
            .client
            .kv_client()
            .txn(txn)
            .await
            .map_err(|e| write_failed(what, e))?;
        let mut leases: Vec<i64> = Vec::new();
        for op in resp.op_responses() {
            if let TxnOpResponse::Delete(d) = op {
                for prev in d.prev_kvs() {
                    self.held.deleted(prev.key());
                }
                leases.extend(d.prev_kvs().iter().map(KeyValue::lease).filter(|l| *l != 0));
            }
        }
        leases.sort_unstable();
        leases.dedup();
        let reuse = reuse && leases.len() == 1;
        for lease in leases {
            match self.sessions.unhold(lease) {
                Some(session) if reuse => self.sessions.put_back(&self.client, session),
                _ => crate::session::revoke(&self.client, lease),
            }
        }
        Ok(resp)
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

/// A transaction run by [`Inner::leased_txn`], with the lease of its own
/// that its entries are attached to. Dropped without a grant, an unused
/// lease becomes a spare.
pub(crate) struct Leased<'a> {
    pub(crate) resp: TxnResponse,
    pub(crate) session: Arc<Session>,
    /// The server said the lease ended around the transaction.
    gone: bool,
    inner: &'a Inner,
    /// A grant counts on the lease (or failed after writing to it).
    used: std::sync::atomic::AtomicBool,
}

impl Drop for Leased<'_> {
    fn drop(&mut self) {
        // A transaction that succeeded wrote to the lease: used, even when
        // its caller did not grant (that lease is then left to end).
        if self.gone || self.resp.succeeded() || *self.used.get_mut() {
            return;
        }
        self.inner.sessions.put_back(&self.inner.client, self.session.clone());
    }
}

impl Leased<'_> {
    /// The grant of an entry written (or found) on this lease: its validity
    /// runs from `sent_at` to what the lease's last keepalive covers. An
    /// error when the lease ended around the grant (the entry went with it).
    pub(crate) fn grant(&self, inner: &Inner, fence: Option<i64>, sent_at: Instant) -> Result<AcquireOutcome> {
        self.used.store(true, std::sync::atomic::Ordering::Relaxed);
        if self.gone {
            return Err(Error::backend(NAME, "the lease expired while the lock was granted"));
        }
        let fence = match fence {
            Some(f) => Some(FencingToken(
                u64::try_from(f).map_err(|_| no_header("grant (negative revision)"))?,
            )),
            None => None,
        };
        inner.sessions.hold(&self.session);
        let validity = self.session.covered_until().saturating_duration_since(sent_at);
        Ok(AcquireOutcome::Acquired(
            Lease::new().with_fencing_token(fence).with_validity(Some(validity)),
        ))
    }

    /// The grant of an entry the holder holds already, found by this
    /// transaction (a re-sent acquire, whose first attempt's lease nobody
    /// renews). The grant's validity counts on this transaction's lease, so
    /// the entry moves to it first; not granted (`Held`) when the entry
    /// ended or changed meanwhile.
    pub(crate) async fn grant_found(
        &self,
        inner: &Inner,
        kv: &KeyValue,
        fence: Option<i64>,
        sent_at: Instant,
    ) -> Result<AcquireOutcome> {
        if !self.gone && kv.lease() != self.session.lease {
            self.used.store(true, std::sync::atomic::Ordering::Relaxed);
            if inner
                .move_entry(kv, self.session.lease, "moving a held entry to its new lease")
                .await?
                .is_err()
            {
                return Ok(AcquireOutcome::Held { retry_after: None });
            }
            // The old lease carried this holder's entry alone.
            if inner.sessions.unhold(kv.lease()).is_some() {
                crate::session::revoke(&inner.client, kv.lease());
            }
        }
        self.grant(inner, fence, sent_at)
    }

    /// The revision the transaction ran at.
    pub(crate) fn revision(&self, what: &str) -> Result<i64> {
        Ok(self.resp.header().ok_or_else(|| no_header(what))?.revision())
    }
}

/// A delete in a release transaction: it returns what it deleted, so the
/// release can end that entry's lease ([`Inner::release_txn`]).
pub(crate) fn delete_op(k: Vec<u8>) -> TxnOp {
    TxnOp::delete(k, Some(DeleteOptions::new().with_prev_key()))
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
