//! Leases: one etcd lease per holder (a lock, a multi-key lock, a permit, a
//! leadership, a read or write hold), so what one holder stops renewing
//! ends within its own TTL whatever the backend's other holders do. Every
//! renewal of the backend goes over **one** keepalive stream
//! ([`KeepAlives`]): a renewal round of many holders sends one keepalive
//! message per lease on that stream, answered in order, each wait bounded
//! by the response timeout.
//!
//! A lease granted for an acquire that was refused (or whose holder
//! released it) is kept as a spare for the next acquire of the same TTL:
//! nothing is on it, and nobody renews it, so it ends by itself within its
//! TTL when no acquire takes it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::LeaseKeeper;
use lock_core::{Error, Result};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::error::{NAME, failed, is_lease_not_found};

/// Spare leases kept per TTL (more are revoked).
const MAX_SPARES: usize = 32;

/// One lease.
pub(crate) struct Session {
    /// The etcd lease id.
    pub(crate) lease: i64,
    /// The TTL the server granted, in seconds.
    pub(crate) granted_secs: i64,
    /// When the last keepalive the server answered alive was sent (or the
    /// grant, first).
    refreshed: Mutex<Instant>,
}

/// What a keepalive learnt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeepAlive {
    /// The lease lives its TTL (`ttl`, in seconds, as the server says) from
    /// `sent_at`, a moment after the caller started.
    Alive { ttl: i64, sent_at: Instant },
    /// The server says the lease is gone: every key on it is gone.
    Gone,
}

impl Session {
    fn new(lease: i64, granted_secs: i64, refreshed: Instant) -> Session {
        Session {
            lease,
            granted_secs,
            refreshed: Mutex::new(refreshed),
        }
    }

    fn refreshed(&self) -> Instant {
        *self.refreshed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A keepalive sent at `sent_at` was answered alive.
    pub(crate) fn refresh(&self, sent_at: Instant) {
        let mut refreshed = self.refreshed.lock().unwrap_or_else(|e| e.into_inner());
        *refreshed = (*refreshed).max(sent_at);
    }

    /// A lower bound of when the server ends the lease: the last keepalive
    /// it answered alive was sent before it reset the lease's TTL.
    pub(crate) fn covered_until(&self) -> Instant {
        self.refreshed() + Duration::from_secs(self.granted_secs.unsigned_abs())
    }
}

/// The leases of one backend: spares by TTL, and those of held entries
/// (revoked when the backend closes).
#[derive(Default)]
pub(crate) struct Sessions {
    spares: Mutex<HashMap<i64, Vec<Arc<Session>>>>,
    held: Mutex<Held>,
}

/// The leases of held entries, pruned of those nobody renewed for a whole
/// TTL past what their last keepalive covered (a lock lost and never
/// released): the map does not grow with lost locks.
#[derive(Default)]
struct Held {
    by_lease: HashMap<i64, Arc<Session>>,
    /// Prune when the map reaches this size (then twice the size left).
    prune_at: usize,
}

impl Sessions {
    fn spares(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Vec<Arc<Session>>>> {
        self.spares.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn held_map(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A lease of `secs` for one holder: a spare that still lives, else a
    /// new grant.
    pub(crate) async fn take(&self, client: &etcd_client::Client, secs: i64) -> Result<Arc<Session>> {
        let now = Instant::now();
        let spare = {
            let mut spares = self.spares();
            let list = spares.entry(secs).or_default();
            list.retain(|s| s.covered_until() > now);
            list.pop()
        };
        if let Some(s) = spare {
            return Ok(s);
        }
        grant(client, secs).await
    }

    /// `session`, unused (nothing of a holder is on it), becomes a spare.
    pub(crate) fn put_back(&self, client: &etcd_client::Client, session: Arc<Session>) {
        if session.covered_until() <= Instant::now() {
            return; // ends by itself
        }
        let mut spares = self.spares();
        let list = spares.entry(session.granted_secs).or_default();
        if list.len() < MAX_SPARES {
            list.push(session);
        } else {
            drop(spares);
            revoke(client, session.lease);
        }
    }

    /// `session` carries a holder's entries now.
    pub(crate) fn hold(&self, session: &Arc<Session>) {
        let mut held = self.held_map();
        held.by_lease.insert(session.lease, session.clone());
        if held.by_lease.len() >= held.prune_at {
            let now = Instant::now();
            held.by_lease
                .retain(|_, s| s.covered_until() + Duration::from_secs(s.granted_secs.unsigned_abs()) > now);
            held.prune_at = (held.by_lease.len() * 2).max(64);
        }
    }

    /// The held lease `lease`, if this backend holds it.
    pub(crate) fn held(&self, lease: i64) -> Option<Arc<Session>> {
        self.held_map().by_lease.get(&lease).cloned()
    }

    /// `lease` carries nothing of this backend's any more.
    pub(crate) fn unhold(&self, lease: i64) -> Option<Arc<Session>> {
        self.held_map().by_lease.remove(&lease)
    }

    /// Every lease id (revoked when the backend closes).
    pub(crate) fn leases(&self) -> Vec<i64> {
        let mut out: Vec<i64> = self.held_map().by_lease.keys().copied().collect();
        out.extend(self.spares().values().flatten().map(|s| s.lease));
        out
    }
}

/// A new lease of `secs`, refused when the server raises it to its
/// minimum (a lock would outlive its TTL after its holder died).
pub(crate) async fn grant(client: &etcd_client::Client, secs: i64) -> Result<Arc<Session>> {
    let sent_at = Instant::now();
    let granted = client
        .lease_client()
        .grant(secs, None)
        .await
        .map_err(|e| failed("granting a lease", e))?;
    if granted.ttl() > secs {
        revoke(client, granted.id());
        return Err(Error::invalid(format!(
            "this etcd server's minimum lease TTL is {} s, above the {secs} s asked for: \
             use a TTL of at least {} s (or lower the server's election timeout)",
            granted.ttl(),
            granted.ttl()
        )));
    }
    Ok(Arc::new(Session::new(granted.id(), granted.ttl(), sent_at)))
}

/// Revoke `lease` in the background (best effort: needs a runtime; a lease
/// left behind ends within its TTL, as nobody renews it).
pub(crate) fn revoke(client: &etcd_client::Client, lease: i64) {
    if lease == 0 {
        return;
    }
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        let mut leases = client.lease_client();
        rt.spawn(async move {
            let _ = leases.revoke(lease).await;
        });
    }
}

/// A keepalive waiting for its answer on the stream.
struct Pending {
    lease: i64,
    reply: oneshot::Sender<std::result::Result<i64, String>>,
}

/// The backend's one keepalive stream, while it is open.
struct Open {
    keeper: LeaseKeeper,
    /// Keepalives sent and not answered yet, in the order sent (the server
    /// answers a stream's keepalives in order).
    pending: Arc<Mutex<VecDeque<Pending>>>,
    closed: Arc<AtomicBool>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Release);
        self.reader.abort();
        fail_all(&self.pending, "the lease keepalive stream was closed");
    }
}

fn fail_all(pending: &Mutex<VecDeque<Pending>>, why: &str) {
    let drained: Vec<Pending> = pending.lock().unwrap_or_else(|e| e.into_inner()).drain(..).collect();
    for p in drained {
        let _ = p.reply.send(Err(why.to_owned()));
    }
}

/// One keepalive stream for every lease of a backend: each keepalive is one
/// message on it, its answer awaited at most the response timeout. The
/// stream is opened on first use and again after it fails or an answer is
/// late (a late answer can then never be taken for a later keepalive's).
pub(crate) struct KeepAlives {
    slot: tokio::sync::Mutex<Option<Open>>,
    timeout: Duration,
    /// Keepalive messages sent (diagnostics and tests).
    pub(crate) sent: AtomicU64,
    /// Keepalive streams opened (diagnostics and tests).
    pub(crate) opened: AtomicU64,
}

impl KeepAlives {
    pub(crate) fn new(timeout: Duration) -> KeepAlives {
        KeepAlives {
            slot: tokio::sync::Mutex::new(None),
            timeout,
            sent: AtomicU64::new(0),
            opened: AtomicU64::new(0),
        }
    }

    /// Keep `lease` alive: one keepalive.
    pub(crate) async fn keep_alive(&self, client: &etcd_client::Client, lease: i64) -> Result<KeepAlive> {
        self.keep_alive_many(client, &[lease])
            .await
            .pop()
            .unwrap_or_else(|| Err(Error::backend(NAME, "the keepalive returned no outcome")))
    }

    /// Keep each of `leases` alive: one keepalive message each on the
    /// backend's one stream, answered in order; each answer awaited at
    /// most the response timeout.
    pub(crate) async fn keep_alive_many(&self, client: &etcd_client::Client, leases: &[i64]) -> Vec<Result<KeepAlive>> {
        let mut waits: Vec<std::result::Result<(Instant, oneshot::Receiver<_>), Error>> =
            Vec::with_capacity(leases.len());
        {
            // Held only while sending: answers are awaited without it.
            let slot = tokio::time::timeout(self.timeout, self.slot.lock()).await;
            let Ok(mut slot) = slot else {
                return leases
                    .iter()
                    .map(|_| Err(timed_out("sending a lease keepalive")))
                    .collect();
            };
            for &lease in leases {
                waits.push(self.send(client, &mut slot, lease).await);
            }
        }
        let mut out = Vec::with_capacity(waits.len());
        let mut late = false;
        for wait in waits {
            let (sent_at, rx) = match wait {
                Ok(w) => w,
                Err(e) => {
                    out.push(Err(e));
                    continue;
                }
            };
            let left = (sent_at + self.timeout).saturating_duration_since(Instant::now());
            out.push(match tokio::time::timeout(left, rx).await {
                Err(_) => {
                    late = true;
                    Err(timed_out("the lease keepalive's answer"))
                }
                Ok(Err(_)) => Err(Error::backend(NAME, "the lease keepalive stream closed")),
                Ok(Ok(Err(why))) => Err(Error::backend(NAME, format!("lease keepalive: {why}"))),
                Ok(Ok(Ok(ttl))) if ttl > 0 => Ok(KeepAlive::Alive { ttl, sent_at }),
                Ok(Ok(Ok(_))) => Ok(KeepAlive::Gone),
            });
        }
        if late {
            // Reopen on the next use (maybe on another member); what was
            // sent on this stream fails now.
            if let Ok(mut slot) = self.slot.try_lock() {
                *slot = None;
            }
        }
        out
    }

    /// Send one keepalive for `lease`, opening the stream first if needed.
    async fn send(
        &self,
        client: &etcd_client::Client,
        slot: &mut Option<Open>,
        lease: i64,
    ) -> Result<(Instant, oneshot::Receiver<std::result::Result<i64, String>>)> {
        if slot.as_ref().is_none_or(|o| o.closed.load(Ordering::Acquire)) {
            *slot = None;
            let opened = tokio::time::timeout(self.timeout, client.lease_client().keep_alive(lease)).await;
            let (keeper, responses) = match opened {
                Err(_) => return Err(timed_out("opening the lease keepalive stream")),
                Ok(Err(e)) if is_lease_not_found(&e) => {
                    // Opening sent a keepalive for `lease`: the answer is in.
                    let (tx, rx) = oneshot::channel();
                    let _ = tx.send(Ok(0));
                    return Ok((Instant::now(), rx));
                }
                Ok(Err(e)) => return Err(failed("opening the lease keepalive stream", e)),
                Ok(Ok(opened)) => opened,
            };
            self.opened.fetch_add(1, Ordering::Relaxed);
            let pending = Arc::new(Mutex::new(VecDeque::new()));
            let closed = Arc::new(AtomicBool::new(false));
            let reader = tokio::spawn(read_answers(responses, pending.clone(), closed.clone()));
            *slot = Some(Open {
                keeper,
                pending,
                closed,
                reader,
            });
        }
        let Some(open) = slot.as_mut() else {
            return Err(Error::backend(NAME, "the lease keepalive stream is not open"));
        };
        let (tx, rx) = oneshot::channel();
        let sent_at = Instant::now();
        open.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(Pending { lease, reply: tx });
        open.keeper.id = lease;
        self.sent.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout(self.timeout, open.keeper.keep_alive()).await {
            Ok(Ok(())) => Ok((sent_at, rx)),
            Ok(Err(e)) => {
                *slot = None;
                Err(failed("sending a lease keepalive", e))
            }
            Err(_) => {
                *slot = None;
                Err(timed_out("sending a lease keepalive"))
            }
        }
    }
}

/// The stream's reader: each answer goes to the oldest pending keepalive
/// (which must be for the same lease); an error, a close or a mismatch
/// fails every pending keepalive and closes the stream.
async fn read_answers(
    mut responses: etcd_client::LeaseKeepAliveStream,
    pending: Arc<Mutex<VecDeque<Pending>>>,
    closed: Arc<AtomicBool>,
) {
    let why = loop {
        match responses.message().await {
            Ok(Some(resp)) => {
                let next = pending.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                match next {
                    Some(p) if p.lease == resp.id() => {
                        let _ = p.reply.send(Ok(resp.ttl()));
                    }
                    Some(p) => {
                        let _ = p.reply.send(Err("an answer for another lease".into()));
                        break "the keepalive answers came out of order".to_owned();
                    }
                    None => break "an answer nobody asked for".to_owned(),
                }
            }
            Ok(None) => break "the lease keepalive stream closed".to_owned(),
            Err(e) if is_lease_not_found(&e) => break "lease not found".to_owned(),
            Err(e) => break format!("lease keepalive: {e}"),
        }
    };
    tracing::debug!(why, "the lease keepalive stream ended");
    closed.store(true, Ordering::Release);
    fail_all(&pending, &why);
}

fn timed_out(what: &str) -> Error {
    Error::backend(NAME, format!("{what}: no answer within the response timeout"))
}
