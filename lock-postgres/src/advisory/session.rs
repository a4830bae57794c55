//! The sessions that hold advisory locks: a connection checked out of the
//! pool for as long as its lock is held, and the table of held locks by
//! token.
//!
//! A [`Session`] goes back to the pool only through [`Session::finish`],
//! called when its session is known to hold no lock (the try was refused,
//! or `pg_advisory_unlock` answered true). Dropped any other way (a
//! cancelled acquire or release, an error, a timeout, a liveness check
//! that failed), its connection leaves the pool and is closed: the
//! server ends the session, and with it every advisory lock the session
//! held. So a session that may hold a lock is never handed to another
//! caller.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use deadpool_postgres::{ClientWrapper, Object};
use lock_core::LockToken;

/// A pooled connection held by one acquire, then by the lock it took.
pub(crate) struct Session {
    object: Option<Object>,
}

impl Session {
    pub(crate) fn new(object: Object) -> Self {
        Session { object: Some(object) }
    }

    /// The connection (always there until `finish` or the drop).
    pub(crate) fn client(&self) -> Option<&ClientWrapper> {
        self.object.as_deref()
    }

    /// The session holds no lock: back to the pool (closed if it broke).
    pub(crate) fn finish(mut self) {
        if let Some(object) = self.object.take() {
            if object.is_closed() {
                drop(Object::take(object));
            } else {
                drop(object);
            }
        }
    }
}

impl Drop for Session {
    /// Out of the pool and closed: the server ends the session and every
    /// lock it held (deadpool's wrapper stops the connection's task).
    fn drop(&mut self) {
        if let Some(object) = self.object.take() {
            drop(Object::take(object));
        }
    }
}

/// One held lock: its key, the session holding it and what the grant said.
pub(crate) struct Held {
    pub(crate) key: String,
    /// The advisory lock's id ([`crate::advisory_key`]).
    pub(crate) id: i64,
    /// The server process of the session (`pg_backend_pid()` at the grant):
    /// a liveness check answered by another process means the connection
    /// no longer reaches that session (a transaction pooler in between).
    pub(crate) pid: i32,
    /// The grant's fencing token, when fencing is on.
    pub(crate) fence: Option<u64>,
    /// The session holding it.
    pub(crate) holding: Holding,
}

/// The session a lock is held on.
pub(crate) enum Holding {
    /// A session of its own, taken out when the lock ends (its release, or
    /// a failed liveness check); a lock mutex so a release waits for a
    /// renewal in flight on the same session.
    Own(Box<tokio::sync::Mutex<Option<Session>>>),
    /// A multiplexed session, shared with locks of other keys.
    Multiplexed(Arc<super::multiplexed::MuxSession>),
}

/// The locks held through one backend, by token and key (one token may
/// hold several keys: a raw caller's).
#[derive(Default)]
pub(crate) struct HeldLocks {
    map: Mutex<HashMap<(LockToken, String), Arc<Held>>>,
}

impl HeldLocks {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<(LockToken, String), Arc<Held>>> {
        self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The lock `token` holds on `key` here, if any.
    pub(crate) fn get(&self, key: &str, token: &LockToken) -> Option<Arc<Held>> {
        self.map().get(&(*token, key.to_owned())).cloned()
    }

    /// Records a grant. Called with no await between the grant's reply and
    /// this call, so a cancelled acquire either dropped its session (and
    /// its lock) or left it here for the manager's clean-up release.
    pub(crate) fn insert(&self, token: LockToken, held: Arc<Held>) {
        // A grant is recorded only when the table has none for the token
        // and key (`try_acquire` answers from it first).
        self.map().insert((token, held.key.clone()), held);
    }

    /// Takes `token`'s lock on `key` out of the table.
    pub(crate) fn remove(&self, key: &str, token: &LockToken) -> Option<Arc<Held>> {
        self.map().remove(&(*token, key.to_owned()))
    }

    /// Forgets `held` if it is still `token`'s entry for its key.
    pub(crate) fn forget(&self, token: &LockToken, held: &Arc<Held>) {
        let mut map = self.map();
        let entry = (*token, held.key.clone());
        if map.get(&entry).is_some_and(|h| Arc::ptr_eq(h, held)) {
            map.remove(&entry);
        }
    }

    /// Number of locks held.
    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }
}
