//! Leases: one etcd lease per holder (a lock, a multi-key lock, a permit, a
//! leadership, a read or write hold), so what one holder stops renewing
//! ends within its own TTL whatever the backend's other holders do. Every
//! renewal of the backend goes over **one** keepalive stream
//! ([`crate::keepalive::KeepAlives`]): a renewal round of many holders
//! sends one keepalive message per lease on that stream, answered in
//! order, the round's wait bounded by the response timeout.
//!
//! A lease granted for an acquire that was refused (or whose holder
//! released it) is kept as a spare for the next acquire of the same TTL:
//! nothing is on it, and nobody renews it, so it ends by itself within its
//! TTL when no acquire takes it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{Error, Result};
use tokio::time::Instant;

use crate::error::failed;

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
    /// `sent_at`, a moment after the caller started; `revision` is the
    /// store revision of the member that answered.
    Alive { ttl: i64, sent_at: Instant, revision: i64 },
    /// The server says the lease is gone: every key on it is gone.
    Gone,
}

impl Session {
    pub(crate) fn new(lease: i64, granted_secs: i64, refreshed: Instant) -> Session {
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
