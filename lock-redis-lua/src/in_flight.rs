//! Acquires whose outcome is unknown (our timeout, or the caller gave up)
//! and the connection each went out on, so that their clean-up release goes
//! out on that same connection, after them.
//!
//! A timed-out acquire may still be queued (a paused or slow server). If its
//! clean-up went out on another connection (the shared one was replaced
//! meanwhile, or a dedicated one was closed), the server could run the
//! clean-up first (answer `Missing`) and then the acquire: a key held by a
//! token nobody owns for a whole TTL. On one connection the server runs
//! commands in order, so the release cannot overtake the acquire.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use lock_core::LockToken;
use tokio::time::Instant;

use crate::connection::Conn;

/// Most acquires remembered at once; beyond, the oldest are forgotten (their
/// clean-up then uses the shared connection, as before).
const MAX_ENTRIES: usize = 1024;

struct Entry {
    conn: Conn,
    /// After this, forget it: nobody cleaned it up within its TTL.
    until: Instant,
}

/// The registry of one backend.
#[derive(Default)]
pub(crate) struct InFlight {
    entries: Mutex<HashMap<LockToken, Entry>>,
}

impl InFlight {
    fn entries(&self) -> MutexGuard<'_, HashMap<LockToken, Entry>> {
        // Single inserts and removals: a poisoned map is consistent.
        match self.entries.lock() {
            Ok(e) => e,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Before sending an acquire with `token` (fresh per attempt, so it names
    /// the attempt) on `conn`: remembered until [`InFlight::settled`] (a
    /// reply came) or [`InFlight::take`].
    pub(crate) fn start(&self, token: &LockToken, conn: Conn, ttl: Duration) {
        let now = Instant::now();
        let mut entries = self.entries();
        if entries.len() >= MAX_ENTRIES {
            entries.retain(|_, e| e.until > now);
            if entries.len() >= MAX_ENTRIES
                && let Some(oldest) = entries.iter().min_by_key(|(_, e)| e.until).map(|(t, _)| *t)
            {
                entries.remove(&oldest);
            }
        }
        entries.insert(*token, Entry { conn, until: now + ttl });
    }

    /// The acquire got a reply: its outcome is known, nothing to order.
    /// (For [`InFlight::start`]; [`Unanswered`] needs no settling.)
    pub(crate) fn settled(&self, token: &LockToken) {
        self.entries().remove(token);
    }

    /// The connection an unsettled acquire with `token` went out on.
    pub(crate) fn take(&self, token: &LockToken) -> Option<Conn> {
        let mut entries = self.entries();
        if entries.is_empty() {
            return None;
        }
        entries.remove(token).map(|e| e.conn)
    }
}

/// An acquire with `token` sent on `conn`: recorded with [`InFlight::start`]
/// when dropped without [`Unanswered::answered`] (timed out, cancelled, or
/// no answer), so that the common answered acquire never touches the
/// registry. The drop runs before any clean-up release of the token can
/// look it up: that release is spawned after the acquire future is gone.
pub(crate) struct Unanswered<'a> {
    registry: &'a InFlight,
    token: LockToken,
    conn: Option<Conn>,
    ttl: Duration,
}

impl<'a> Unanswered<'a> {
    pub(crate) fn new(registry: &'a InFlight, token: LockToken, conn: Conn, ttl: Duration) -> Self {
        Unanswered {
            registry,
            token,
            conn: Some(conn),
            ttl,
        }
    }

    /// The acquire got a reply: nothing to record.
    pub(crate) fn answered(&mut self) {
        self.conn = None;
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.registry.start(&self.token, conn, self.ttl);
        }
    }
}
