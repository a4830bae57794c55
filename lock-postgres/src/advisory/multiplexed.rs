//! Multiplexed sessions: a few pooled connections kept for the backend's
//! life, each holding the advisory locks of many keys at once, their
//! statements pipelined (tokio-postgres sends every caller's statement on
//! the one socket without waiting for the previous reply).
//!
//! Advisory locks are re-entrant per session, so a session must never try
//! an id it already holds or is trying: each session keeps the ids it holds
//! or has a grant in flight for, and a key always goes to the same session
//! (chosen from its id). A second local try of such an id is answered
//! `Held` without a round trip: this process holds it, or is trying it
//! right now (the server would refuse every other session in the first
//! case, and the race with the try in flight is one the caller could have
//! lost anyway).
//!
//! An id leaves the table only once the server has answered for it: a try
//! refused, an unlock answered. A grant or an unlock whose reply never came
//! (cancelled, timed out, a statement error) leaves its id reserved and
//! hands an `pg_advisory_unlock` to the runtime (a [`Reservation`]'s drop):
//! statements of one session run in order, so that unlock runs after the
//! grant and frees whatever it took, and only its reply frees the id. A
//! session whose connection fails, or whose liveness check fails, is dead:
//! every lock on it ends with it (the server ends the session once the
//! last user lets go of the connection), and the next try opens another.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use deadpool_postgres::{ClientWrapper, Object, Pool};

/// Where an id stands on its session.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum IdState {
    /// A grant is in flight, or a reply never came and an unlock is.
    Pending,
    /// Granted: a lock of this backend holds it on the session.
    Held,
}

/// One connection holding many locks.
pub(crate) struct MuxSession {
    object: Option<Object>,
    /// The server process of the session, read when it was opened.
    pub(crate) pid: i32,
    ids: Mutex<HashMap<i64, IdState>>,
    dead: AtomicBool,
}

impl MuxSession {
    /// The connection.
    pub(crate) fn client(&self) -> Option<&ClientWrapper> {
        self.object.as_deref()
    }

    /// Whether the session can no longer be trusted to hold its locks.
    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire) || self.object.as_ref().is_none_or(|o| o.is_closed())
    }

    /// Ends the session's use: no try goes to it any more, every lock on it
    /// reads as lost, and the connection closes when the last user drops it.
    pub(crate) fn kill(&self) {
        self.dead.store(true, Ordering::Release);
    }

    fn ids(&self) -> std::sync::MutexGuard<'_, HashMap<i64, IdState>> {
        self.ids.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reserves `id` for a grant: `false` when the session holds it or has
    /// one in flight.
    pub(crate) fn reserve(&self, id: i64) -> bool {
        let mut ids = self.ids();
        if ids.contains_key(&id) {
            return false;
        }
        ids.insert(id, IdState::Pending);
        true
    }

    /// Whether the session holds `id` for one of the backend's locks.
    pub(crate) fn holds(&self, id: i64) -> bool {
        self.ids().get(&id) == Some(&IdState::Held)
    }
}

impl Drop for MuxSession {
    /// Out of the pool and closed, never pooled: the server ends the
    /// session and whatever it still holds.
    fn drop(&mut self) {
        if let Some(object) = self.object.take() {
            drop(Object::take(object));
        }
    }
}

/// An id reserved on a session, until the server's answer frees or keeps
/// it. Dropped armed, it hands an unlock of the id to the runtime.
#[must_use]
pub(crate) struct Reservation {
    session: Arc<MuxSession>,
    id: i64,
    timeout: Duration,
    armed: bool,
}

impl Reservation {
    /// A reservation already made with [`MuxSession::reserve`] (or a held
    /// id being released).
    pub(crate) fn new(session: Arc<MuxSession>, id: i64, timeout: Duration) -> Self {
        Reservation {
            session,
            id,
            timeout,
            armed: true,
        }
    }

    /// The server granted the lock: the id stays, held.
    pub(crate) fn granted(mut self) {
        self.session.ids().insert(self.id, IdState::Held);
        self.armed = false;
    }

    /// The server answered that the session does not hold the id (a try
    /// refused, an unlock answered): free for the next try.
    pub(crate) fn settled(mut self) {
        self.session.ids().remove(&self.id);
        self.armed = false;
    }

    /// The session is dead: nothing to undo on it.
    pub(crate) fn abandon(mut self) {
        self.session.kill();
        self.armed = false;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.armed || self.session.is_dead() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to send the unlock: the session ends instead.
            self.session.kill();
            return;
        };
        let (session, id, timeout) = (self.session.clone(), self.id, self.timeout);
        runtime.spawn(async move {
            match super::unlock(session.client(), id, timeout).await {
                Some(Ok(_)) => {
                    session.ids().remove(&id);
                }
                // No answer: whether the id is held is unknown, so the
                // session must not be trusted with it again.
                Some(Err(_)) | None => session.kill(),
            }
        });
    }
}

/// A slot: the session its keys go to, replaced when it dies.
struct Slot {
    current: RwLock<Option<Arc<MuxSession>>>,
    refill: tokio::sync::Mutex<()>,
}

impl Slot {
    fn live(&self) -> Option<Arc<MuxSession>> {
        let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
        current.as_ref().filter(|s| !s.is_dead()).cloned()
    }
}

/// The backend's multiplexed sessions.
pub(crate) struct Multiplexed {
    slots: Box<[Slot]>,
}

impl Multiplexed {
    /// `count` sessions (none: every lock keeps a session of its own).
    pub(crate) fn new(count: usize) -> Self {
        Multiplexed {
            slots: (0..count)
                .map(|_| Slot {
                    current: RwLock::new(None),
                    refill: tokio::sync::Mutex::new(()),
                })
                .collect(),
        }
    }

    /// Number of multiplexed sessions.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The live session `id` goes to, opened out of `pool` when missing or
    /// dead; `None` without multiplexed sessions or when none could be
    /// opened within `timeout` (the caller then uses a session of its own,
    /// which reports why).
    pub(crate) async fn session(&self, pool: &Pool, id: i64, timeout: Duration) -> Option<Arc<MuxSession>> {
        let count = u64::try_from(self.slots.len()).ok().filter(|&n| n > 0)?;
        let index = usize::try_from(u64::from_ne_bytes(id.to_ne_bytes()) % count).ok()?;
        let slot = self.slots.get(index)?;
        if let Some(live) = slot.live() {
            return Some(live);
        }
        let _refilling = tokio::time::timeout(timeout, slot.refill.lock()).await.ok()?;
        if let Some(live) = slot.live() {
            return Some(live);
        }
        let opened = tokio::time::timeout(timeout, open(pool)).await.ok()??;
        let opened = Arc::new(opened);
        *slot.current.write().unwrap_or_else(PoisonError::into_inner) = Some(opened.clone());
        Some(opened)
    }
}

/// A connection out of the pool, kept, with its server process id.
async fn open(pool: &Pool) -> Option<MuxSession> {
    let object = pool.get().await.ok()?;
    // A fresh session holds no lock: back to the pool if this fails.
    let row = object.query_one("SELECT pg_backend_pid()", &[]).await.ok()?;
    let pid = row.try_get::<_, i32>(0).ok()?;
    Some(MuxSession {
        object: Some(object),
        pid,
        ids: Mutex::new(HashMap::new()),
        dead: AtomicBool::new(false),
    })
}
