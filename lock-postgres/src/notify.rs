//! Release notifications: `LISTEN` on one dedicated connection, a local
//! wake-up per key.
//!
//! A backend with notifications on sends `pg_notify` in the same statement
//! as a release that freed a live lease someone waits for (and when a fair
//! waiter leaves a free key's queue), naming the key and the head of its
//! fair queue, if any (`wake_payload` in `sql/schema.sql`). A waiter's
//! failed attempt marks the lease as waited for (`acquire_marking`), a
//! grant to a process that waited for the key lately starts marked, and a
//! live entry in the key's fair queue counts too: a release nobody waits
//! for sends nothing, and costs what it costs with notifications off. Each listening process wakes
//! **one** of its waiters of that key (`Notify::notify_one`), the others
//! keep their timers, and the named fair waiter if it is one of its own:
//! only the head polls. A fair waiter's wake-up is kept from its attempt
//! on ([`Notifier::expect_fair`]), so a release between its attempt and
//! its wait still wakes it. A lost notification (the listening connection
//! down, or a release by a client with notifications off) costs the waiter
//! its timer, never correctness.
//!
//! `LISTEN` is session state: the listening connection must be a direct
//! one (or PgBouncer in *session* mode), never PgBouncer's transaction
//! mode, where the session changes under it. Name one with
//! [`PostgresBuilder::listen_url`](crate::PostgresBuilder::listen_url).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use lock_core::raw::FairWaiter;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;
use tokio_postgres::AsyncMessage;
pub(crate) use tokio_util_free::AbortOnDrop;

/// Time between two attempts to (re)open the listening connection.
const RECONNECT: Duration = Duration::from_secs(1);

/// Entries kept (fair waiters, keys waited for) before the expired ones are
/// looked for.
const KEPT: usize = 1024;

/// A payload's key and the fair waiter it names (`wake_payload` in
/// `sql/schema.sql`); a payload without the tag is a key alone.
fn parse(payload: &str) -> (&str, Option<[u8; 32]>) {
    if let Some(key) = payload.strip_prefix('k') {
        return (key, None);
    }
    if let Some(rest) = payload.strip_prefix('h')
        && let Some((id, key)) = rest.split_once(':')
        && let Ok(id) = <[u8; 32]>::try_from(id.as_bytes())
    {
        return (key, Some(id));
    }
    (payload, None)
}

/// A fair waiter's wake-up, kept until it is granted, leaves, or its claim
/// runs out.
struct FairEntry {
    notify: Arc<Notify>,
    until: Instant,
}

/// How long a key's plain waiters' entry outlives the last wait or refused
/// attempt of it in this process ([`Notifier::waited_lately`]).
const LATELY: Duration = Duration::from_secs(1);

/// A key's plain waiters in this process: they share one `Notify`, woken
/// one at a time. Kept for [`LATELY`] after a wait or a refused attempt
/// began, so that a release announced between a refused attempt and its
/// wait leaves its wake-up as a permit for that wait.
struct PlainEntry {
    notify: Arc<Notify>,
    at: Instant,
}

/// This process's waiters: plain ones by key, fair ones by key and waiter
/// id.
#[derive(Default)]
struct Waiters {
    plain: HashMap<String, PlainEntry>,
    fair: HashMap<(String, [u8; 32]), FairEntry>,
}

impl Waiters {
    /// The plain waiters' entry of `key`, touched at `now`.
    fn plain_entry(&mut self, key: &str, now: Instant) -> Arc<Notify> {
        if let Some(entry) = self.plain.get_mut(key) {
            entry.at = now;
            return entry.notify.clone();
        }
        if self.plain.len() >= KEPT {
            self.plain
                .retain(|_, e| now.duration_since(e.at) < LATELY || Arc::strong_count(&e.notify) > 1);
        }
        let notify = Arc::new(Notify::new());
        self.plain.insert(
            key.to_owned(),
            PlainEntry {
                notify: notify.clone(),
                at: now,
            },
        );
        notify
    }
}

type Shared = Mutex<Waiters>;

/// The local side: waiters per key, this process's inbox, and the task
/// that listens.
pub(crate) struct Notifier {
    waiters: Arc<Shared>,
    inbox: String,
    _listener: AbortOnDrop,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier").finish_non_exhaustive()
    }
}

impl Notifier {
    /// Starts listening on `channel` with `config`; reconnects forever (the
    /// task ends when the notifier is dropped).
    pub(crate) fn start(config: tokio_postgres::Config, channel: String) -> Notifier {
        let waiters: Arc<Shared> = Arc::default();
        let map = Arc::downgrade(&waiters);
        let inbox = inbox_of(&channel);
        let channels = [channel, inbox.clone()];
        let task = tokio::spawn(async move {
            loop {
                if let Err(e) = listen_once(&config, &channels, &map).await {
                    tracing::debug!(error = %e, "lock-postgres: the LISTEN connection failed; waiters use their timers");
                }
                if map.strong_count() == 0 {
                    return;
                }
                tokio::time::sleep(RECONNECT).await;
            }
        });
        Notifier {
            waiters,
            inbox,
            _listener: AbortOnDrop(task),
        }
    }

    /// This process's own channel: a release that names one of its fair
    /// waiters the head of a queue is sent there alone.
    pub(crate) fn inbox(&self) -> &str {
        &self.inbox
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiters> {
        // Each update leaves the maps consistent: a poisoned lock is usable.
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait until a release of `key` is announced or `max_wait` passes
    /// (one of the key's plain waiters wakes per release; a release
    /// announced since this process's last refused attempt of the key ends
    /// the wait at once).
    pub(crate) async fn wait(&self, key: &str, max_wait: Duration) {
        let notify = self.lock().plain_entry(key, Instant::now());
        let _ = tokio::time::timeout(max_wait, notify.notified()).await;
    }

    /// An attempt of `key` was refused: a release announced from now on is
    /// kept for the next [`Notifier::wait`] of it (within [`LATELY`]).
    pub(crate) fn expect_plain(&self, key: &str) {
        self.lock().plain_entry(key, Instant::now());
    }

    /// Whether this process waited for `key`, or was refused it, within
    /// [`LATELY`]: a grant to such a waiter starts marked as waited for,
    /// so that its release wakes the others (one is woken per release).
    pub(crate) fn waited_lately(&self, key: &str) -> bool {
        let w = self.lock();
        w.plain.get(key).is_some_and(|e| e.at.elapsed() < LATELY)
    }

    /// `waiter` is about to try `key`: from now on, a release naming it as
    /// the queue's head is kept for its next [`Notifier::wait_fair`] (for
    /// its claim, unless granted or gone before).
    pub(crate) fn expect_fair(&self, key: &str, waiter: &FairWaiter) -> Arc<Notify> {
        let now = Instant::now();
        let mut w = self.lock();
        let id = (key.to_owned(), waiter.id.hex_bytes());
        if w.fair.len() >= KEPT && !w.fair.contains_key(&id) {
            w.fair.retain(|_, e| e.until > now);
        }
        let entry = w.fair.entry(id).or_insert_with(|| FairEntry {
            notify: Arc::new(Notify::new()),
            until: now,
        });
        entry.until = now + waiter.claim;
        entry.notify.clone()
    }

    /// Wait until a release names `waiter` as `key`'s head (since its last
    /// attempt) or `max_wait` passes.
    pub(crate) async fn wait_fair(&self, key: &str, waiter: &FairWaiter, max_wait: Duration) {
        let notify = self.expect_fair(key, waiter);
        let _ = tokio::time::timeout(max_wait, notify.notified()).await;
    }

    /// `waiter` no longer waits for `key` (granted, or it left).
    pub(crate) fn forget_fair(&self, key: &str, waiter: &FairWaiter) {
        self.lock().fair.remove(&(key.to_owned(), waiter.id.hex_bytes()));
    }
}

/// Wakes one plain waiter of the payload's key and the fair waiter it names.
fn wake(map: &Weak<Shared>, payload: &str) {
    let Some(map) = map.upgrade() else { return };
    let (key, head) = parse(payload);
    let (one, fair) = {
        let w = map.lock().unwrap_or_else(|e| e.into_inner());
        (
            w.plain.get(key).map(|e| e.notify.clone()),
            head.and_then(|id| w.fair.get(&(key.to_owned(), id)).map(|e| e.notify.clone())),
        )
    };
    if let Some(n) = one {
        n.notify_one();
    }
    if let Some(n) = fair {
        // Kept as a permit when it is not waiting yet (between attempts).
        n.notify_one();
    }
}

/// A channel of this process alone: the schema's channel (cut to leave
/// room within PostgreSQL's 63 bytes), '_' and 16 random hex digits.
fn inbox_of(channel: &str) -> String {
    let mut inbox: String = channel.chars().take(40).collect();
    inbox.push('_');
    inbox.push_str(&format!("{:016x}", fastrand::u64(..)));
    inbox
}

async fn listen_once(
    config: &tokio_postgres::Config,
    channels: &[String; 2],
    map: &Weak<Shared>,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut keys, _pump) = crate::builder::connect_listener(config).await?;
    let [channel, inbox] = channels;
    client
        .batch_execute(&format!("LISTEN \"{channel}\"; LISTEN \"{inbox}\""))
        .await?;
    while let Some(payload) = keys.recv().await {
        wake(map, &payload);
        if map.strong_count() == 0 {
            break;
        }
    }
    Ok(())
}

/// Drives a listening connection, sending each notification's payload
/// (see [`parse`]) to the receiver; the receiver ends when the connection does.
pub(crate) fn pump<S, T>(mut connection: tokio_postgres::Connection<S, T>) -> (UnboundedReceiver<String>, AbortOnDrop)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if tx.send(n.payload().to_owned()).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
    });
    (rx, AbortOnDrop(task))
}

mod tokio_util_free {
    /// Aborts the task when dropped.
    pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_payload_names_its_key_and_maybe_the_fair_head() {
        let id = [b'a'; 32];
        let tagged = format!("h{}:some:key", "a".repeat(32));
        assert_eq!(parse(&tagged), ("some:key", Some(id)));
        assert_eq!(parse("khello"), ("hello", None));
        assert_eq!(parse("k"), ("", None));
        // Untagged, or a malformed head: the whole payload, or its key.
        assert_eq!(parse("plain"), ("plain", None));
        assert_eq!(parse("hshort:key"), ("hshort:key", None));
    }
}
