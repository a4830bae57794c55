//! Renewals: a keepalive of each held entry's own lease. A lock key this
//! backend created (or last read) on its lease is trusted while the
//! backend's watch over the lock prefix says nobody changed it
//! ([`crate::held`]); any other entry is read first, one transaction per
//! 128 keys.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse};
use lock_core::{Error, LockToken, RenewOutcome, Result};

use crate::error::{NAME, failed, no_header, write_failed};
use crate::held::Trust;
use crate::lock::{clone_error, first_kv};
use crate::session::{KeepAlive, Session};
use crate::{Inner, MAX_TXN_OPS};

/// An entry to renew: its key and the prefix its value starts with while
/// its owner holds it.
type Item = (Vec<u8>, Vec<u8>);

impl Inner {
    pub(crate) async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        let entries = items
            .iter()
            .map(|(key, token)| Ok((self.lock_key(key)?, token.hex_bytes().to_vec())))
            .collect();
        self.renew_entries(entries, ttl).await
    }

    /// Renew entries for `ttl`: each is a key and the prefix its value
    /// starts with while its owner holds it (the whole token for a lock;
    /// empty for an entry whose key names its owner). One keepalive message
    /// per lease, all on the backend's one keepalive stream. A lock key the
    /// watch vouches for is not read: its renewal waits only for the watch
    /// to report the keepalive answer's revision (one progress request);
    /// the others are read ([`Inner::renew_read`]).
    pub(crate) async fn renew_entries(&self, entries: Vec<Result<Item>>, ttl: Duration) -> Vec<Result<RenewOutcome>> {
        let secs = match self.lease_secs(ttl) {
            Ok(s) => s,
            Err(e) => return entries.iter().map(|_| Err(clone_error(&e))).collect(),
        };
        if entries
            .iter()
            .any(|e| e.as_ref().is_ok_and(|(k, _)| self.held.tracks(k)))
        {
            self.held.open(&self.client).await;
        }
        let mut out: Vec<Option<Result<RenewOutcome>>> = (0..entries.len()).map(|_| None).collect();
        let mut to_read = Vec::new();
        let mut items = Vec::with_capacity(entries.len());
        for (i, entry) in entries.into_iter().enumerate() {
            match entry {
                Err(e) => out[i] = Some(Err(e)),
                Ok(item) => items.push((i, item)),
            }
        }
        let keys: Vec<(&[u8], &[u8])> = items.iter().map(|(_, (k, o))| (k.as_slice(), o.as_slice())).collect();
        let trusts = self.held.trust(&keys);
        let mut trusted = Vec::with_capacity(items.len());
        for ((i, item), trust) in items.iter().zip(trusts) {
            match trust {
                // A lease of another TTL: the entry moves (after a read).
                Some(t) if t.session.granted_secs == secs => trusted.push((*i, item, t)),
                _ => to_read.push((*i, item)),
            }
        }
        if let Some(first) = trusted.first().map(|t| t.2.clone()) {
            let mut leases: Vec<i64> = trusted.iter().map(|t| t.2.session.lease).collect();
            leases.sort_unstable();
            leases.dedup();
            let kept = self.keepalives.keep_alive_many(&self.client, &leases).await;
            let answered = kept
                .iter()
                .filter_map(|k| match k {
                    Ok(KeepAlive::Alive { revision, .. }) => Some(*revision),
                    _ => None,
                })
                .max();
            let reported = match answered {
                Some(revision) => self.held.reported(&first, revision).await,
                None => true,
            };
            let checks: Vec<(&[u8], &Trust)> = trusted.iter().map(|(_, (k, _), t)| (k.as_slice(), t)).collect();
            let still = self.held.still(&checks);
            for ((i, item, t), still) in trusted.iter().zip(still) {
                let kept = leases.binary_search(&t.session.lease).ok().and_then(|at| kept.get(at));
                out[*i] = match kept {
                    Some(Err(e)) => Some(Err(clone_error(e))),
                    Some(Ok(KeepAlive::Gone)) => {
                        self.sessions.unhold(t.session.lease);
                        self.held.forget(&item.0, &item.1);
                        Some(Ok(RenewOutcome::Missing)) // it went with its lease
                    }
                    Some(Ok(KeepAlive::Alive { ttl, sent_at, .. })) if *ttl == secs && reported && still => {
                        t.session.refresh(*sent_at);
                        Some(Ok(RenewOutcome::Renewed))
                    }
                    // Changed, or the watch could not tell: read it.
                    _ => {
                        to_read.push((*i, item));
                        None
                    }
                };
            }
        }
        if !to_read.is_empty() {
            let (at, items): (Vec<usize>, Vec<Result<Item>>) =
                to_read.into_iter().map(|(i, item)| (i, Ok(item.clone()))).unzip();
            for (i, got) in at.into_iter().zip(self.renew_read(items, secs).await) {
                out[i] = Some(got);
            }
        }
        out.into_iter()
            .map(|o| o.unwrap_or_else(|| Err(Error::backend(NAME, "the renewal returned no outcome"))))
            .collect()
    }

    /// One keepalive per lease, each session refreshed by its answer (a
    /// lease the server says is gone is no longer held).
    async fn keep_alive_leases(&self, leases: &[i64]) -> HashMap<i64, Result<KeepAlive>> {
        let kept: HashMap<i64, Result<KeepAlive>> = leases
            .iter()
            .copied()
            .zip(self.keepalives.keep_alive_many(&self.client, leases).await)
            .collect();
        for (lease, k) in &kept {
            match k {
                Ok(KeepAlive::Alive { sent_at, .. }) => {
                    if let Some(s) = self.sessions.held(*lease) {
                        s.refresh(*sent_at);
                    }
                }
                Ok(KeepAlive::Gone) => {
                    self.sessions.unhold(*lease);
                }
                Err(_) => {}
            }
        }
        kept
    }

    /// Renew entries of `secs` after reading them: one read per 128 keys,
    /// then one keepalive message per lease they are on; an entry taken
    /// with another TTL moves to a new lease of this TTL (same value, same
    /// create revision). The lock keys read as their owner's are trusted
    /// from then on ([`crate::held`]).
    async fn renew_read(&self, entries: Vec<Result<Item>>, secs: i64) -> Vec<Result<RenewOutcome>> {
        for (k, owner) in entries.iter().flatten() {
            self.held.expect(k, owner);
        }
        let keys: Vec<&[u8]> = entries
            .iter()
            .filter_map(|e| e.as_ref().ok().map(|(k, _)| k.as_slice()))
            .collect();
        let read = match self.read_keys(&keys).await {
            Ok(r) => r,
            Err(e) => return entries.iter().map(|_| Err(clone_error(&e))).collect(),
        };
        let mut read = read.into_iter();
        // Each entry's current state, and the leases of those still ours.
        let mut states = Vec::with_capacity(entries.len());
        let mut leases = Vec::new();
        for entry in entries {
            let state = entry.map(|(k, owner)| {
                let (current, revision) = read.next().unwrap_or((None, 0));
                match current {
                    Some(kv) if kv.value().starts_with(&owner) => {
                        if kv.lease() == 0 {
                            self.held.forget(&k, &owner);
                        } else {
                            leases.push(kv.lease());
                            match self.sessions.held(kv.lease()) {
                                Some(session) => {
                                    self.held.confirm(&k, &owner, &session, kv.create_revision(), revision);
                                }
                                None => self.held.forget(&k, &owner),
                            }
                        }
                        Ok(kv)
                    }
                    Some(_) => {
                        self.held.forget(&k, &owner);
                        Err(RenewOutcome::HeldByOther)
                    }
                    None => {
                        self.held.forget(&k, &owner);
                        Err(RenewOutcome::Missing)
                    }
                }
            });
            states.push(state);
        }
        leases.sort_unstable();
        leases.dedup();
        let kept = self.keep_alive_leases(&leases).await;
        // Entries to move to a lease of `secs`: one new lease per old one.
        let mut moved_to: HashMap<i64, Result<Arc<Session>>> = HashMap::new();
        let mut out = Vec::with_capacity(states.len());
        for state in states {
            let kv = match state {
                Err(e) => {
                    out.push(Err(e));
                    continue;
                }
                Ok(Err(outcome)) => {
                    out.push(Ok(outcome));
                    continue;
                }
                Ok(Ok(kv)) => kv,
            };
            match kept.get(&kv.lease()) {
                Some(Err(e)) => {
                    out.push(Err(clone_error(e)));
                    continue;
                }
                Some(Ok(KeepAlive::Gone)) => {
                    out.push(Ok(RenewOutcome::Missing)); // it went with its lease
                    continue;
                }
                Some(Ok(KeepAlive::Alive { ttl, .. })) if *ttl == secs => {
                    out.push(Ok(RenewOutcome::Renewed));
                    continue;
                }
                // Taken (or last renewed) with another TTL, or on no lease.
                _ => {}
            }
            // Read again after the move.
            self.held.deleted(kv.key());
            let target = match moved_to.get(&kv.lease()) {
                Some(t) => t.as_ref().map(Arc::clone).map_err(clone_error),
                None => {
                    let t = crate::session::grant(&self.client, secs).await;
                    moved_to.insert(kv.lease(), t.as_ref().map(Arc::clone).map_err(clone_error));
                    t
                }
            };
            let target = match target {
                Ok(t) => t,
                Err(e) => {
                    out.push(Err(e));
                    continue;
                }
            };
            out.push(match self.move_entry(&kv, target.lease, "renew").await {
                Ok(Ok(())) => {
                    self.sessions.hold(&target);
                    Ok(RenewOutcome::Renewed)
                }
                Ok(Err(Some(_))) => Ok(RenewOutcome::HeldByOther),
                Ok(Err(None)) => Ok(RenewOutcome::Missing),
                Err(e) => Err(e),
            });
        }
        for old in moved_to.keys() {
            // Nothing of this holder's is left on it.
            if self.sessions.unhold(*old).is_some() {
                crate::session::revoke(&self.client, *old);
            }
        }
        out
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
        self.held.deleted(&k); // read again after the move
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
    /// round trip each, sent together): each key's current entry, in order,
    /// with the revision it was read at.
    async fn read_keys(&self, keys: &[&[u8]]) -> Result<Vec<(Option<KeyValue>, i64)>> {
        let reads = keys.chunks(MAX_TXN_OPS).map(|chunk| {
            let ops: Vec<TxnOp> = chunk.iter().map(|k| TxnOp::get(k.to_vec(), None)).collect();
            let mut kv = self.client.kv_client();
            async move { kv.txn(Txn::new().and_then(ops)).await }
        });
        let mut out = Vec::with_capacity(keys.len());
        for resp in futures::future::join_all(reads).await {
            let resp = resp.map_err(|e| failed("reading the renewed keys", e))?;
            let revision = resp
                .header()
                .ok_or_else(|| no_header("reading the renewed keys"))?
                .revision();
            for op in resp.op_responses() {
                out.push(match op {
                    TxnOpResponse::Get(mut g) => (g.take_kvs().into_iter().next(), revision),
                    _ => (None, revision),
                });
            }
        }
        Ok(out)
    }
}
