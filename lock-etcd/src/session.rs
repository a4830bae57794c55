//! Shared leases: one etcd lease per backend and TTL (in whole seconds),
//! shared by every lock taken with that TTL, as etcd's own
//! `concurrency.Session` does. Renewing any number of locks costs one
//! keepalive per renewal round (plus one ownership read per 128 keys), not
//! one per lock: concurrent renewals share a keepalive that was sent after
//! they started.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use etcd_client::{LeaseKeepAliveStream, LeaseKeeper};
use lock_core::{Error, Result};
use tokio::time::Instant;

use crate::error::{NAME, failed, is_lease_not_found};

/// One shared lease.
pub(crate) struct Session {
    /// The etcd lease id.
    pub(crate) lease: i64,
    /// The TTL the server granted, in seconds.
    pub(crate) granted_secs: i64,
    /// The keepalive stream (opened on first use, reopened after it fails).
    stream: tokio::sync::Mutex<Option<(LeaseKeeper, LeaseKeepAliveStream)>>,
    /// When the last keepalive the server answered alive was sent.
    refreshed: Mutex<Instant>,
}

/// What a keepalive learnt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeepAlive {
    /// The lease lives at least its TTL from a moment after the caller
    /// started.
    Alive,
    /// The server says the lease is gone: every key on it is gone.
    Gone,
}

impl Session {
    fn refreshed(&self) -> Instant {
        *self.refreshed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A lower bound of when the server ends the lease: the last keepalive
    /// it answered alive was sent before it reset the lease's TTL.
    pub(crate) fn covered_until(&self) -> Instant {
        self.refreshed() + std::time::Duration::from_secs(self.granted_secs.unsigned_abs())
    }

    /// Keep the lease alive with a keepalive sent no earlier than `since`
    /// (one already answered or in flight counts).
    pub(crate) async fn keep_alive(
        &self,
        client: &etcd_client::Client,
        since: Instant,
        sent: &AtomicU64,
    ) -> Result<KeepAlive> {
        let mut stream = self.stream.lock().await;
        if self.refreshed() >= since {
            return Ok(KeepAlive::Alive); // a keepalive sent after `since` was answered meanwhile
        }
        if stream.is_none() {
            match client.lease_client().keep_alive(self.lease).await {
                Ok(opened) => *stream = Some(opened),
                Err(e) if is_lease_not_found(&e) => return Ok(KeepAlive::Gone),
                Err(e) => return Err(failed("opening the lease keepalive stream", e)),
            }
        }
        // Out of the slot while a keepalive is in flight: if this future is
        // dropped before its answer (a caller's timeout), the stream goes
        // with it, so a late answer can never be read as the answer to a
        // later keepalive (it would date the lease from the later send).
        let Some((mut keeper, mut responses)) = stream.take() else {
            return Err(Error::backend(NAME, "the lease keepalive stream is not open"));
        };
        let sent_at = Instant::now();
        sent.fetch_add(1, Ordering::Relaxed);
        let answer = async {
            keeper.keep_alive().await?;
            responses.message().await
        }
        .await;
        match answer {
            Ok(Some(resp)) if resp.ttl() > 0 => {
                *stream = Some((keeper, responses));
                let mut refreshed = self.refreshed.lock().unwrap_or_else(|e| e.into_inner());
                *refreshed = (*refreshed).max(sent_at);
                Ok(KeepAlive::Alive)
            }
            Ok(Some(_)) => Ok(KeepAlive::Gone),
            // A stream that closes without an error: never a silent stop.
            Ok(None) => Err(Error::backend(NAME, "the lease keepalive stream closed")),
            Err(e) if is_lease_not_found(&e) => Ok(KeepAlive::Gone),
            Err(e) => Err(failed("lease keepalive", e)),
        }
    }
}

/// The shared leases of one backend, by TTL in seconds.
#[derive(Default)]
pub(crate) struct Sessions {
    by_ttl: Mutex<HashMap<i64, Arc<Session>>>,
    /// Serialises lease grants, so concurrent first acquires share one.
    granting: tokio::sync::Mutex<()>,
    /// Keepalive requests sent (diagnostics and tests).
    pub(crate) keepalives_sent: AtomicU64,
}

impl Sessions {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Arc<Session>>> {
        self.by_ttl.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live session for `secs`, if one was granted.
    pub(crate) fn get(&self, secs: i64) -> Option<Arc<Session>> {
        self.map().get(&secs).cloned()
    }

    /// The session for `secs`, granting a lease when there is none.
    pub(crate) async fn get_or_grant(&self, client: &etcd_client::Client, secs: i64) -> Result<Arc<Session>> {
        if let Some(s) = self.get(secs) {
            return Ok(s);
        }
        let _granting = self.granting.lock().await;
        if let Some(s) = self.get(secs) {
            return Ok(s);
        }
        let sent_at = Instant::now();
        let granted = client
            .lease_client()
            .grant(secs, None)
            .await
            .map_err(|e| failed("granting a lease", e))?;
        if granted.ttl() > secs {
            // The server raised the TTL to its minimum: a lock would outlive
            // its TTL after its holder died.
            let _ = client.lease_client().revoke(granted.id()).await;
            return Err(Error::invalid(format!(
                "this etcd server's minimum lease TTL is {} s, above the {secs} s asked for: \
                 use a TTL of at least {} s (or lower the server's election timeout)",
                granted.ttl(),
                granted.ttl()
            )));
        }
        let session = Arc::new(Session {
            lease: granted.id(),
            granted_secs: granted.ttl(),
            stream: tokio::sync::Mutex::new(None),
            refreshed: Mutex::new(sent_at),
        });
        self.map().insert(secs, session.clone());
        Ok(session)
    }

    /// Forget `session` (its lease is gone), unless it was replaced already.
    pub(crate) fn forget(&self, secs: i64, session: &Arc<Session>) {
        let mut map = self.map();
        if map.get(&secs).is_some_and(|s| Arc::ptr_eq(s, session)) {
            map.remove(&secs);
        }
    }

    /// Stop keeping `session`'s lease alive and use a new one from now on
    /// (unless it was replaced already). A write whose outcome is unknown
    /// may have left an entry on that lease that no guard knows of (an
    /// acquire that commits after its caller gave up, a release that may
    /// not have run); while the lease lives, so would that entry, kept
    /// alive by the renewals of every other lock on it. Retired, the lease
    /// ends within its TTL, and the entries that are held move to the new
    /// lease at their next renewal (same value, same create revision).
    pub(crate) fn retire(&self, secs: i64, session: &Arc<Session>) {
        tracing::debug!(
            lease = session.lease,
            "retiring a shared lease after a write of unknown outcome"
        );
        self.forget(secs, session);
    }

    /// [`Sessions::retire`] for every lease (a release of unknown outcome:
    /// which lease its key is on is not known).
    pub(crate) fn retire_all(&self) {
        let mut map = self.map();
        for session in map.values() {
            tracing::debug!(
                lease = session.lease,
                "retiring a shared lease after a release of unknown outcome"
            );
        }
        map.clear();
    }

    /// A guard for a write on `session`'s lease: unless settled, it retires
    /// the lease when dropped (the write failed with an unknown outcome, or
    /// its future was dropped in flight).
    pub(crate) fn unsettled(&self, secs: i64, session: &Arc<Session>) -> Unsettled<'_> {
        Unsettled {
            sessions: self,
            lease: Some((secs, session.clone())),
            armed: true,
        }
    }

    /// A guard for a release: unless settled, it retires every lease.
    pub(crate) fn unsettled_release(&self) -> Unsettled<'_> {
        Unsettled {
            sessions: self,
            lease: None,
            armed: true,
        }
    }

    /// Every session's lease id (revoked when the backend closes).
    pub(crate) fn leases(&self) -> Vec<i64> {
        self.map().values().map(|s| s.lease).collect()
    }
}

/// A write in flight that may leave an entry on a shared lease: see
/// [`Sessions::unsettled`].
#[must_use = "dropped unsettled, it retires the lease"]
pub(crate) struct Unsettled<'a> {
    sessions: &'a Sessions,
    /// The lease written to; `None`: any of them.
    lease: Option<(i64, Arc<Session>)>,
    armed: bool,
}

impl Unsettled<'_> {
    /// The write's outcome is known: nothing unknown is left on the lease.
    pub(crate) fn settle(mut self) {
        self.armed = false;
    }

    /// Settle when `result` is known (a reply, or an error the server
    /// answered with); a write error of unknown outcome retires.
    pub(crate) fn settle_if_known<T>(self, result: &Result<T>) {
        match result {
            Err(e) if e.is_outcome_unknown() => drop(self),
            _ => self.settle(),
        }
    }
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        match self.lease.take() {
            Some((secs, session)) => self.sessions.retire(secs, &session),
            None => self.sessions.retire_all(),
        }
    }
}
