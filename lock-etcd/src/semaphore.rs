//! Leased semaphores: a name's holders are entries `h/<token>` under its
//! own prefix (value `<size> <permits>`), each on a lease of its own; a
//! holder's fencing token is its entry's create revision.
//!
//! etcd cannot add permits up in a compare, so an acquire decides from a
//! read of the name's whole range and writes only if nothing in that range
//! was created or changed since (`mod_revision < read + 1` over the range,
//! in the same transaction): a concurrent grant makes the write fail and the
//! acquire decides again from the fresh range its failed transaction
//! returns. A deletion since the read only frees permits, so deciding on a
//! range that still shows it is safe. The first try assumes an empty range
//! (one round trip for an idle semaphore).
//!
//! - **Reservation** (`r/<token>`, value `<permits>`): a refused waiting
//!   request leaves one, as the contract says (see
//!   [`SemaphoreBackend::acquire_permits`]); while another's is live, a
//!   request is granted only if the permits left after it suffice. It lives
//!   on a lease of the waiter's own, kept alive by each of its attempts, so
//!   it lapses one TTL (rounded up to whole seconds) after the waiter's
//!   last attempt.
//! - **Gone** (`g/<token>`, on a lease of its own of [`GONE_WINDOW`] that
//!   nobody renews): a release of a holder that holds nothing (a clean-up
//!   that overtook its own acquire) leaves one, and that holder's late
//!   acquire is refused.

use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Compare, DeleteOptions, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse};
use lock_core::raw::size_mismatch;
use lock_core::raw::{PermitRequest, SemaphoreBackend};
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{LockToken, Result};
use tokio::time::Instant;

use crate::error::{failed, no_header};
use crate::kinds::{Prefix, no_entry_in, unchanged_since};
use crate::lock::delete_op;
use crate::{EtcdBackend, Inner};

/// How long a holder released while holding nothing stays refused (its
/// late acquire, overtaken by the clean-up, must not take permits nobody
/// owns). Tokens are never reused, so refusing one is harmless.
pub const GONE_WINDOW: Duration = Duration::from_secs(60);

/// Decisions an acquire may take before it answers `Held` (each after a
/// concurrent change of the name's range).
const ROUNDS: usize = 16;

/// What the acquire writes when its guard holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// Take the permits (and drop the holder's reservation).
    Grant,
    /// Leave (or take over) the name's reservation.
    Reserve,
}

/// What a read of the name's range says about a request.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    /// The holder holds already: its entry's create revision.
    Holds(i64),
    /// Another size while permits are held.
    SizeMismatch(u64),
    /// Not enough permits: leave a reservation first when `Some`.
    Refuse(Option<Plan>),
    /// Grant.
    Grant,
}

/// The name's range as read.
#[derive(Debug, Default)]
struct View {
    /// `(token hex, size, permits, create revision)`.
    holders: Vec<(Vec<u8>, u64, u64, i64)>,
    /// The reservation with the most permits: `(token hex, permits)`.
    reservation: Option<(Vec<u8>, u64)>,
    /// Tokens released while holding nothing.
    gone: Vec<Vec<u8>>,
}

fn number(text: &[u8]) -> Option<u64> {
    std::str::from_utf8(text).ok()?.parse().ok()
}

impl View {
    fn read(p: &Prefix, kvs: &[KeyValue]) -> View {
        let (h, r, g) = (p.sub("h/"), p.sub("r/"), p.sub("g/"));
        let mut view = View::default();
        for kv in kvs {
            if let Some(owner) = h.owner(kv.key()) {
                let mut parts = kv.value().split(|b| *b == b' ');
                let size = parts.next().and_then(number).unwrap_or(0);
                let permits = parts.next().and_then(number).unwrap_or(0);
                view.holders.push((owner.to_vec(), size, permits, kv.create_revision()));
            } else if let Some(owner) = r.owner(kv.key()) {
                let permits = number(kv.value()).unwrap_or(0);
                if view.reservation.as_ref().is_none_or(|(_, n)| permits > *n) {
                    view.reservation = Some((owner.to_vec(), permits));
                }
            } else if let Some(owner) = g.owner(kv.key()) {
                view.gone.push(owner.to_vec());
            }
        }
        view
    }

    fn decide(&self, me: &[u8], request: PermitRequest) -> Decision {
        if let Some(&(_, _, _, rev)) = self.holders.iter().find(|h| h.0 == me) {
            return Decision::Holds(rev);
        }
        let used: u64 = self.holders.iter().map(|h| h.2).sum();
        if let Some(stored) = self.holders.iter().map(|h| h.1).find(|s| *s != u64::from(request.size)) {
            return Decision::SizeMismatch(stored);
        }
        let (size, wanted) = (u64::from(request.size), u64::from(request.permits));
        let reserved_by_other = match &self.reservation {
            Some((owner, n)) if owner.as_slice() != me => *n,
            _ => 0,
        };
        if used + wanted + reserved_by_other > size {
            let reserve = request.waiting
                && match &self.reservation {
                    None => true,
                    Some((owner, _)) if owner.as_slice() == me => false, // kept on its lease
                    Some((_, n)) => *n < wanted,
                };
            return Decision::Refuse(reserve.then_some(Plan::Reserve));
        }
        if self.gone.iter().any(|g| g.as_slice() == me) {
            return Decision::Refuse(None);
        }
        Decision::Grant
    }
}

#[async_trait]
impl SemaphoreBackend for EtcdBackend {
    /// One range read of the holders' entries.
    async fn inspect_permits(&self, name: &str) -> Result<lock_core::PermitsInfo> {
        self.inner.inspect_permits(name).await
    }

    async fn acquire_permits(
        &self,
        name: &str,
        holder: &LockToken,
        request: PermitRequest,
        ttl: Duration,
    ) -> Result<AcquireOutcome> {
        request.validate()?;
        let inner = &self.inner;
        inner.lease_secs(ttl)?;
        let p = Prefix::new(inner, "sem", name)?;
        let me = holder.hex_bytes();
        let (mine, reservation) = (p.sub("h/").entry(holder), p.sub("r/").entry(holder));
        let value = format!("{} {}", request.size, request.permits).into_bytes();
        let sent_at = Instant::now();
        // First as if the range were empty (it is, for an idle semaphore).
        let mut guard: Compare = no_entry_in(&p);
        let mut plan = Plan::Grant;
        for _ in 0..ROUNDS {
            let others = p.sub("r/");
            let rsv_lease = match plan {
                Plan::Reserve => inner.waiter_lease_for(holder, ttl).await?,
                Plan::Grant => 0,
            };
            let leased = inner
                .leased_txn(ttl, sent_at, "semaphore acquire", |lease| {
                    let with_lease = Some(PutOptions::new().with_lease(lease));
                    let writes = match plan {
                        Plan::Grant => vec![
                            TxnOp::delete(reservation.clone(), None),
                            TxnOp::put(mine.clone(), value.clone(), with_lease),
                        ],
                        Plan::Reserve => {
                            // One reservation per name: the others go.
                            let mut after = reservation.clone();
                            after.push(0);
                            vec![
                                TxnOp::delete(
                                    others.start.clone(),
                                    Some(DeleteOptions::new().with_range(reservation.clone())),
                                ),
                                TxnOp::delete(after, Some(DeleteOptions::new().with_range(others.end.clone()))),
                                TxnOp::put(
                                    reservation.clone(),
                                    request.permits.to_string(),
                                    Some(PutOptions::new().with_lease(rsv_lease)),
                                ),
                            ]
                        }
                    };
                    Txn::new().when([guard.clone()]).and_then(writes).or_else([TxnOp::get(
                        p.start.clone(),
                        Some(GetOptions::new().with_range(p.end.clone())),
                    )])
                })
                .await?;
            let revision = leased.revision("semaphore acquire")?;
            if leased.resp.succeeded() {
                return match plan {
                    Plan::Grant => {
                        inner.forget_waiter_lease(holder);
                        leased.grant(inner, Some(revision), sent_at)
                    }
                    Plan::Reserve => Ok(AcquireOutcome::Held { retry_after: None }),
                };
            }
            let kvs = match leased.resp.op_responses().into_iter().next() {
                Some(TxnOpResponse::Get(mut g)) => g.take_kvs(),
                _ => return Err(no_header("semaphore acquire (no range in the answer)")),
            };
            let view = View::read(&p, &kvs);
            match view.decide(&me, request) {
                Decision::Holds(fence) => {
                    return match kvs.iter().find(|kv| kv.key() == mine.as_slice()) {
                        Some(kv) => leased.grant_found(inner, kv, Some(fence), sent_at).await,
                        None => Err(no_header("semaphore acquire (the holder's entry is not in the range)")),
                    };
                }
                Decision::SizeMismatch(stored) => return Err(size_mismatch(name, request.size, stored)),
                Decision::Refuse(None) => {
                    if request.waiting && view.reservation.as_ref().is_some_and(|(o, _)| o.as_slice() == me) {
                        // Keep this waiter's reservation alive.
                        inner.waiter_lease_for(holder, ttl).await?;
                    }
                    return Ok(AcquireOutcome::Held { retry_after: None });
                }
                Decision::Refuse(Some(next)) => plan = next,
                Decision::Grant => plan = Plan::Grant,
            }
            guard = unchanged_since(&p, revision);
        }
        // The range kept changing under this acquire: try again later.
        Ok(AcquireOutcome::Held {
            retry_after: Some(Duration::from_millis(5)),
        })
    }

    async fn release_permits(&self, name: &str, holder: &LockToken) -> Result<ReleaseOutcome> {
        let inner = &self.inner;
        let p = Prefix::new(inner, "sem", name)?;
        let (mine, reservation, gone) = (
            p.sub("h/").entry(holder),
            p.sub("r/").entry(holder),
            p.sub("g/").entry(holder),
        );
        inner.forget_waiter_lease(holder);
        let held = || Compare::create_revision(mine.clone(), etcd_client::CompareOp::Greater, 0);
        let release = || [delete_op(mine.clone()), delete_op(reservation.clone())];
        let txn = Txn::new()
            .when([held()])
            .and_then(release())
            .or_else([delete_op(reservation.clone())]);
        if inner.release_txn(txn, "semaphore release", false).await?.succeeded() {
            return Ok(ReleaseOutcome::Released);
        }
        // It holds nothing: its late acquire is refused for the window, by
        // an entry on a lease of its own that nobody renews (so it ends
        // within the window whatever else the backend holds).
        let secs = crate::whole_secs(GONE_WINDOW, "the gone window")?;
        let gone_lease = crate::session::grant(&inner.client, secs).await?.lease;
        let txn = Txn::new().when([held()]).and_then(release()).or_else([TxnOp::put(
            gone,
            [],
            Some(PutOptions::new().with_lease(gone_lease)),
        )]);
        let resp = inner.release_txn(txn, "semaphore release", false).await;
        if !matches!(&resp, Ok(r) if !r.succeeded()) {
            crate::session::revoke(&inner.client, gone_lease); // unused
        }
        Ok(if resp?.succeeded() {
            ReleaseOutcome::Released // its late acquire landed meanwhile
        } else {
            ReleaseOutcome::Missing
        })
    }

    async fn renew_permits(&self, name: &str, holder: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        let mut out = self.renew_permits_many(&[(name, holder)], ttl).await;
        out.pop().unwrap_or(Ok(RenewOutcome::Missing))
    }

    async fn renew_permits_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        let entries = items
            .iter()
            .map(|(name, holder)| {
                Ok((
                    Prefix::new(&self.inner, "sem", name)?.sub("h/").entry(holder),
                    Vec::new(),
                ))
            })
            .collect();
        self.inner.renew_entries(entries, ttl).await
    }

    async fn wait_for_permits(&self, name: &str, max_wait: Duration) {
        lock_core::raw::wait_hint(max_wait, self.inner.wait_for_permits(name)).await;
    }
}

impl Inner {
    /// Until an entry of `name`'s range is deleted (a holder left, a lease
    /// ended), from the revision read.
    async fn wait_for_permits(&self, name: &str) -> Result<()> {
        let p = Prefix::new(self, "sem", name)?;
        let resp = self
            .client
            .kv_client()
            .get(
                p.start.clone(),
                Some(GetOptions::new().with_range(p.end.clone()).with_count_only()),
            )
            .await
            .map_err(|e| failed("reading a semaphore", e))?;
        let revision = resp
            .header()
            .ok_or_else(|| no_header("reading a semaphore"))?
            .revision();
        self.watch_for(p.start, Some(p.end), revision + 1, true).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(holders: &[(&[u8], u64, u64)], reservation: Option<(&[u8], u64)>) -> View {
        View {
            holders: holders
                .iter()
                .enumerate()
                .map(|(i, (o, s, n))| (o.to_vec(), *s, *n, i64::try_from(i).unwrap_or(0) + 10))
                .collect(),
            reservation: reservation.map(|(o, n)| (o.to_vec(), n)),
            gone: vec![b"late".to_vec()],
        }
    }

    #[test]
    fn decisions_follow_the_contract() {
        let req = |size, permits, waiting| PermitRequest::new(size, permits).waiting(waiting);
        let v = view(&[(b"a", 3, 1), (b"b", 3, 1)], None);
        assert_eq!(v.decide(b"a", req(3, 1, false)), Decision::Holds(10));
        assert_eq!(v.decide(b"c", req(3, 1, false)), Decision::Grant);
        assert_eq!(v.decide(b"c", req(4, 1, false)), Decision::SizeMismatch(3));
        assert_eq!(v.decide(b"c", req(3, 2, false)), Decision::Refuse(None));
        assert_eq!(v.decide(b"c", req(3, 2, true)), Decision::Refuse(Some(Plan::Reserve)));
        assert_eq!(v.decide(b"late", req(3, 1, false)), Decision::Refuse(None));
        // Another's reservation of 2 holds the last free permit back...
        let v = view(&[(b"a", 3, 1)], Some((b"big", 2)));
        assert_eq!(v.decide(b"c", req(3, 1, true)), Decision::Refuse(None));
        // ...but not from its owner, and a larger request takes it over.
        assert_eq!(v.decide(b"big", req(3, 2, true)), Decision::Grant);
        assert_eq!(v.decide(b"c", req(3, 3, true)), Decision::Refuse(Some(Plan::Reserve)));
        assert_eq!(view(&[], None).decide(b"c", req(5, 5, false)), Decision::Grant);
    }
}
