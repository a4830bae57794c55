//! Release notifications: `LISTEN` on one dedicated connection, a local
//! wake-up per key.
//!
//! A backend with notifications on sends `pg_notify(channel, key)` in the
//! same statement as a release that freed a live lease (and when a fair
//! waiter leaves its queue). Each listening process wakes **one** of its
//! waiters of that key (`Notify::notify_one`); the others keep their
//! timers. A lost notification (the listening connection down, or a
//! release by a client with notifications off) costs the waiter its timer,
//! never correctness.
//!
//! `LISTEN` is session state: the listening connection must be a direct
//! one (or PgBouncer in *session* mode), never PgBouncer's transaction
//! mode, where the session changes under it. Name one with
//! [`PostgresBuilder::listen_url`](crate::PostgresBuilder::listen_url).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_postgres::AsyncMessage;
pub(crate) use tokio_util_free::AbortOnDrop;

/// Time between two attempts to (re)open the listening connection.
const RECONNECT: Duration = Duration::from_secs(1);

/// The local side: waiters per key, and the task that listens.
pub(crate) struct Notifier {
    waiters: Arc<Mutex<HashMap<String, Weak<Notify>>>>,
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
        let waiters: Arc<Mutex<HashMap<String, Weak<Notify>>>> = Arc::default();
        let map = Arc::downgrade(&waiters);
        let task = tokio::spawn(async move {
            loop {
                if let Err(e) = listen_once(&config, &channel, &map).await {
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
            _listener: AbortOnDrop(task),
        }
    }

    /// Wait until a release of `key` is announced or `max_wait` passes.
    /// A plain waiter is one of those woken one at a time; a `fair` one is
    /// woken with every other fair waiter of the key.
    pub(crate) async fn wait(&self, key: &str, max_wait: Duration, fair: bool) {
        // Keys hold no NUL: the fair entry cannot be another key's.
        let key = if fair { format!("{key}\0fair") } else { key.to_owned() };
        let notify = {
            let mut map = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
            map.retain(|_, w| w.strong_count() > 0);
            match map.get(&key).and_then(Weak::upgrade) {
                Some(n) => n,
                None => {
                    let n = Arc::new(Notify::new());
                    map.insert(key.clone(), Arc::downgrade(&n));
                    n
                }
            }
        };
        let _ = tokio::time::timeout(max_wait, notify.notified()).await;
    }
}

fn wake(map: &Weak<Mutex<HashMap<String, Weak<Notify>>>>, key: &str) {
    let Some(map) = map.upgrade() else { return };
    let (one, all) = {
        let map = map.lock().unwrap_or_else(|e| e.into_inner());
        let fair = format!("{key}\0fair");
        (
            map.get(key).and_then(Weak::upgrade),
            map.get(&fair).and_then(Weak::upgrade),
        )
    };
    if let Some(n) = one {
        n.notify_one();
    }
    if let Some(n) = all {
        n.notify_waiters();
    }
}

async fn listen_once(
    config: &tokio_postgres::Config,
    channel: &str,
    map: &Weak<Mutex<HashMap<String, Weak<Notify>>>>,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut keys, _pump) = crate::builder::connect_listener(config).await?;
    client.batch_execute(&format!("LISTEN \"{channel}\"")).await?;
    while let Some(key) = keys.recv().await {
        wake(map, &key);
        if map.strong_count() == 0 {
            break;
        }
    }
    Ok(())
}

/// Drives a listening connection, sending each notification's payload (a
/// key) to the receiver; the receiver ends when the connection does.
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
