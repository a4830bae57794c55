//! Held lock keys, and the one watch that tells when one changed under its
//! holder: a renewal of a key this backend created (or read) on a lease of
//! its own sends that lease's keepalive and reads nothing, trusting the
//! lease for the key, while one watch over the lock prefix tells which
//! keys someone else deleted or rewrote (an operator's delete or put, a
//! revision change). A key the watch names, or one it cannot vouch for
//! (no watch open, a watch opened after the key was last known, a watch
//! that did not report the keepalive's revision in time), is read as
//! before.
//!
//! The rules, per key: the entry is written *pending* before the write or
//! read that learns the key's state, so every event of the key after that
//! state is seen; it is *confirmed* with the revision that state is from;
//! any later event that is not the holder's own (a delete, or a put of
//! another value or on another lease) marks it changed. A renewal trusts a
//! confirmed, unchanged entry when the open watch reports every event from
//! just after its revision, and once the watch has reported every event up
//! to the revision the keepalive's answer carries (one progress request on
//! the watch stream per round), the entry is checked again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use etcd_client::{EventType, WatchOptions, WatchRequestSender, WatchResponseStream};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::session::Session;

/// Prune the entries when the map reaches this size (then twice the size
/// left).
const MIN_PRUNE: usize = 1024;

/// A progress request unanswered this long is sent again (etcd drops one
/// that comes while the watch is catching up).
const RESEND: Duration = Duration::from_millis(50);

/// A pending entry is dropped by a prune after this long (its write or
/// read was abandoned).
const PENDING_FOR: Duration = Duration::from_secs(60);

/// What this backend knows of one lock key.
struct Entry {
    /// The value prefix of its holder (the lock token).
    owner: Vec<u8>,
    /// Confirmed: the lease, create revision and revision it was known at.
    known: Option<Known>,
    /// The revision of the last event that was not the holder's own.
    changed_at: i64,
    /// When it was written pending.
    since: Instant,
}

#[derive(Clone)]
struct Known {
    session: Arc<Session>,
    create_revision: i64,
    at: i64,
}

/// The open watch: it reports every event of the prefix from `from` on;
/// every event up to `seen` was reported.
#[derive(Clone, Copy)]
struct Watching {
    id: u64,
    from: i64,
    seen: i64,
}

#[derive(Default)]
struct State {
    keys: HashMap<Vec<u8>, Entry>,
    watching: Option<Watching>,
    /// Entries an event marked changed, ever (a round that saw no change
    /// checks no entry again).
    changes: u64,
    prune_at: usize,
}

struct Shared {
    state: Mutex<State>,
    /// A progress answer came (or the watch ended).
    progress: Notify,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A renewal's trust in one key: its lease, and what to check once the
/// keepalive is answered ([`HeldKeys::still`]).
#[derive(Clone)]
pub(crate) struct Trust {
    pub(crate) session: Arc<Session>,
    at: i64,
    watch: u64,
    changes: u64,
}

/// The held lock keys of one backend and their watch.
pub(crate) struct HeldKeys {
    prefix: Vec<u8>,
    shared: Arc<Shared>,
    /// The open watch's request half (progress requests); held while
    /// opening, so that one task opens it.
    sender: tokio::sync::Mutex<Option<WatchRequestSender>>,
    timeout: Duration,
    next_id: AtomicU64,
    /// Watches opened (diagnostics and tests).
    pub(crate) opened: AtomicU64,
}

impl HeldKeys {
    pub(crate) fn new(prefix: Vec<u8>, timeout: Duration) -> HeldKeys {
        HeldKeys {
            prefix,
            shared: Arc::new(Shared {
                state: Mutex::default(),
                progress: Notify::new(),
            }),
            sender: tokio::sync::Mutex::new(None),
            timeout,
            next_id: AtomicU64::new(1),
            opened: AtomicU64::new(0),
        }
    }

    /// Whether `key` is one this backend tracks (under the lock prefix).
    pub(crate) fn tracks(&self, key: &[u8]) -> bool {
        key.starts_with(&self.prefix)
    }

    /// Before a write or read that learns `key`'s state for `owner`: the
    /// entry is pending (not while another holder of this backend holds
    /// the key).
    pub(crate) fn expect(&self, key: &[u8], owner: &[u8]) {
        if !self.tracks(key) {
            return;
        }
        let mut st = self.shared.state();
        if let Some(e) = st.keys.get(key)
            && e.owner != owner
            && e.known.is_some()
        {
            return;
        }
        st.keys.insert(
            key.to_vec(),
            Entry {
                owner: owner.to_vec(),
                known: None,
                changed_at: 0,
                since: Instant::now(),
            },
        );
        if st.keys.len() >= st.prune_at {
            prune(&mut st);
        }
    }

    /// `owner` holds `key` on `lease` as of revision `at` (the write or read
    /// that [`HeldKeys::expect`] announced).
    pub(crate) fn confirm(&self, key: &[u8], owner: &[u8], session: &Arc<Session>, create_revision: i64, at: i64) {
        let mut st = self.shared.state();
        if let Some(e) = st.keys.get_mut(key)
            && e.owner == owner
            && e.known.is_none()
        {
            e.known = Some(Known {
                session: session.clone(),
                create_revision,
                at,
            });
        }
    }

    /// `key` is `owner`'s no more (or was never confirmed).
    pub(crate) fn forget(&self, key: &[u8], owner: &[u8]) {
        let mut st = self.shared.state();
        if st.keys.get(key).is_some_and(|e| e.owner == owner) {
            st.keys.remove(key);
        }
    }

    /// `key` was deleted by this backend (whoever held it).
    pub(crate) fn deleted(&self, key: &[u8]) {
        if self.tracks(key) {
            self.shared.state().keys.remove(key);
        }
    }

    /// What renewals of `items` (each a key and its owner) may trust
    /// without reading them (one lock of the map for the batch).
    pub(crate) fn trust(&self, items: &[(&[u8], &[u8])]) -> Vec<Option<Trust>> {
        let st = self.shared.state();
        let Some(w) = st.watching else {
            return items.iter().map(|_| None).collect();
        };
        items
            .iter()
            .map(|(key, owner)| {
                let e = st.keys.get(*key)?;
                let k = e.known.as_ref()?;
                (e.owner == *owner && e.changed_at <= k.at && w.from <= k.at + 1).then(|| Trust {
                    session: k.session.clone(),
                    at: k.at,
                    watch: w.id,
                    changes: st.changes,
                })
            })
            .collect()
    }

    /// After the keepalives of a batch were answered: whether each key is
    /// still as trusted (the same watch, no change since; no lookup when no
    /// entry changed at all).
    pub(crate) fn still(&self, items: &[(&[u8], &Trust)]) -> Vec<bool> {
        let st = self.shared.state();
        items
            .iter()
            .map(|(key, t)| {
                st.watching.is_some_and(|w| w.id == t.watch)
                    && (st.changes == t.changes || st.keys.get(*key).is_some_and(|e| e.changed_at <= t.at))
            })
            .collect()
    }

    /// Open the watch unless it is open, from the current revision (a
    /// watch from a past one is not synced at first, and etcd holds a
    /// progress request back until it is): entries known before it are
    /// read once more. Best effort: renewals read while it is not open.
    pub(crate) async fn open(&self, client: &etcd_client::Client) {
        if self.shared.state().watching.is_some() {
            return;
        }
        let Ok(mut sender) = tokio::time::timeout(self.timeout, self.sender.lock()).await else {
            return;
        };
        if self.shared.state().watching.is_some() {
            return;
        }
        let mut watch = client.watch_client();
        let opened = tokio::time::timeout(self.timeout, async {
            let mut stream = watch
                .watch(self.prefix.clone(), Some(WatchOptions::new().with_prefix()))
                .await?;
            let created = stream.message().await?;
            Ok::<_, etcd_client::Error>((stream, created))
        })
        .await;
        let Ok(Ok((stream, Some(created)))) = opened else {
            return;
        };
        if !created.created() || created.canceled() {
            return;
        }
        let Some(current) = created.header().map(|h| h.revision()) else {
            return;
        };
        let from = current + 1;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (requests, responses) = stream.split();
        self.shared.state().watching = Some(Watching {
            id,
            from,
            seen: from - 1,
        });
        self.opened.fetch_add(1, Ordering::Relaxed);
        *sender = Some(requests);
        tokio::spawn(read_events(Arc::downgrade(&self.shared), id, responses));
    }

    /// Until the watch `trust` counts on has reported every event up to
    /// `revision` (progress requests on its stream, sent again every
    /// [`RESEND`]): false when it ended, or did not within a quarter of the
    /// response timeout (it is then closed, and opened again by a later
    /// renewal; the renewal reads meanwhile, well before the lock's
    /// deadline).
    pub(crate) async fn reported(&self, trust: &Trust, revision: i64) -> bool {
        let watch = trust.watch;
        let deadline = Instant::now() + self.timeout / 4;
        // Bounded: each turn waits at most RESEND, until the deadline.
        loop {
            let answered = self.shared.progress.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            match self.shared.state().watching {
                Some(w) if w.id == watch => {
                    if w.seen >= revision {
                        return true;
                    }
                }
                _ => return false,
            }
            if Instant::now() >= deadline {
                self.close(watch);
                return false;
            }
            let sent = match tokio::time::timeout_at(deadline, self.sender.lock()).await {
                Ok(mut sender) => match sender.as_mut() {
                    Some(s) => tokio::time::timeout_at(deadline, s.request_progress())
                        .await
                        .is_ok_and(|r| r.is_ok()),
                    None => false,
                },
                Err(_) => false,
            };
            if !sent {
                self.close(watch);
                return false;
            }
            let _ = tokio::time::timeout_at(deadline.min(Instant::now() + RESEND), answered).await;
        }
    }

    /// Close the watch `watch` if it is still the open one.
    fn close(&self, watch: u64) {
        let mut st = self.shared.state();
        if st.watching.is_some_and(|w| w.id == watch) {
            st.watching = None;
            drop(st);
            if let Ok(mut sender) = self.sender.try_lock() {
                *sender = None; // ends the stream: its reader stops
            }
        }
    }

    /// Tracked keys (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shared.state().keys.len()
    }
}

/// Drop what no renewal will trust again: changed entries (a lost lock's
/// key ends with its lease: its delete marks it) and pending ones whose
/// write or read was abandoned.
fn prune(st: &mut State) {
    let now = Instant::now();
    st.keys.retain(|_, e| match &e.known {
        Some(k) => e.changed_at <= k.at,
        None => now.duration_since(e.since) < PENDING_FOR,
    });
    st.prune_at = (st.keys.len() * 2).max(MIN_PRUNE);
}

/// The watch's reader: marks the entries that an event changed, records
/// progress answers; when the stream fails, closes or is cancelled (a
/// compaction), the watch is no longer open.
async fn read_events(shared: Weak<Shared>, id: u64, mut responses: WatchResponseStream) {
    loop {
        let msg = responses.message().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let mut st = shared.state();
        if st.watching.is_none_or(|w| w.id != id) {
            return;
        }
        let resp = match msg {
            Ok(Some(resp)) if !resp.canceled() => resp,
            Ok(Some(_cancelled)) => {
                st.watching = None;
                drop(st);
                shared.progress.notify_waiters();
                return;
            }
            Ok(None) | Err(_) => {
                st.watching = None;
                drop(st);
                shared.progress.notify_waiters();
                return;
            }
        };
        if resp.created() {
            continue;
        }
        if resp.events().is_empty() {
            // A progress answer: every event up to its revision was sent
            // before it.
            if let (Some(w), Some(h)) = (st.watching.as_mut(), resp.header()) {
                w.seen = w.seen.max(h.revision());
            }
            drop(st);
            shared.progress.notify_waiters();
            continue;
        }
        let mut marked = 0;
        for event in resp.events() {
            let Some(kv) = event.kv() else { continue };
            let Some(e) = st.keys.get_mut(kv.key()) else {
                continue;
            };
            let own = event.event_type() == EventType::Put
                && kv.value().starts_with(&e.owner)
                && e.known
                    .as_ref()
                    .is_none_or(|k| k.session.lease == kv.lease() && k.create_revision == kv.create_revision());
            if !own {
                e.changed_at = e.changed_at.max(kv.mod_revision());
                marked += 1;
            }
        }
        st.changes += marked;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> HeldKeys {
        let held = HeldKeys::new(b"p/".to_vec(), Duration::from_secs(1));
        held.shared.state().watching = Some(Watching {
            id: 1,
            from: 10,
            seen: 9,
        });
        held
    }

    fn session(lease: i64) -> Arc<Session> {
        Arc::new(Session::new(lease, 2, Instant::now()))
    }

    fn trust(held: &HeldKeys, key: &[u8], owner: &[u8]) -> Option<Trust> {
        held.trust(&[(key, owner)]).pop().flatten()
    }

    #[test]
    fn only_a_confirmed_key_of_its_owner_known_since_the_watch_opened_is_trusted() {
        let held = keys();
        held.expect(b"other/k", b"a");
        assert_eq!(held.len(), 0, "outside the prefix");
        held.expect(b"p/k", b"a");
        assert!(trust(&held, b"p/k", b"a").is_none(), "pending");
        held.confirm(b"p/k", b"a", &session(7), 12, 12);
        assert!(trust(&held, b"p/k", b"b").is_none(), "another owner");
        let t = trust(&held, b"p/k", b"a").expect("trusted");
        assert_eq!(t.session.lease, 7);
        assert_eq!(held.still(&[(b"p/k", &t)]), [true]);
        // Changed since: checked again.
        {
            let mut st = held.shared.state();
            st.changes += 1;
            if let Some(e) = st.keys.get_mut(b"p/k".as_slice()) {
                e.changed_at = 13;
            }
        }
        assert_eq!(held.still(&[(b"p/k", &t)]), [false]);
        assert!(trust(&held, b"p/k", b"a").is_none());
        // Known before the watch reports events.
        held.expect(b"p/old", b"a");
        held.confirm(b"p/old", b"a", &session(8), 5, 5);
        assert!(trust(&held, b"p/old", b"a").is_none());
        // Another holder's entry is left alone.
        held.expect(b"p/new", b"a");
        held.confirm(b"p/new", b"a", &session(9), 14, 14);
        held.expect(b"p/new", b"b");
        assert!(trust(&held, b"p/new", b"a").is_some());
        held.forget(b"p/new", b"b");
        assert!(trust(&held, b"p/new", b"a").is_some());
        held.forget(b"p/new", b"a");
        assert!(trust(&held, b"p/new", b"a").is_none());
    }

    #[test]
    fn a_prune_keeps_trusted_and_recent_pending_entries() {
        let held = keys();
        held.expect(b"p/trusted", b"a");
        held.confirm(b"p/trusted", b"a", &session(1), 10, 10);
        held.expect(b"p/changed", b"a");
        held.confirm(b"p/changed", b"a", &session(2), 10, 10);
        held.expect(b"p/pending", b"a");
        {
            let mut st = held.shared.state();
            if let Some(e) = st.keys.get_mut(b"p/changed".as_slice()) {
                e.changed_at = 11;
            }
            prune(&mut st);
        }
        assert_eq!(held.len(), 2);
        assert!(trust(&held, b"p/trusted", b"a").is_some());
    }
}
