//! Release notifications (standalone only): each backend subscribes to a
//! channel of its own (`verrou:wake:<process id>`) on a dedicated pub/sub
//! connection; its waiters then register their id (the process id followed by
//! the waiter's) on the server (a barging waiter in the key's wake set, a fair
//! one in its queue) and leave a marker key; the release script, finding the
//! marker, PUBLISHes one waiter's id on that waiter's process channel, so only
//! that process hears it and only that waiter wakes. Always a
//! hint: a message lost before the subscription is in place, or with the
//! connection, costs the waiter its timed fallback (the holder's PTTL, the
//! backoff or a third of the fair claim), never correctness.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use deadpool_redis::redis::{self, aio::PubSubSink};
use futures::StreamExt;
use lock_redis_family::board::{Boards, Listener, Subscriber, WaiterBoard};
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use crate::error::BACKEND;
use crate::sentinel::Discovery;

pub(crate) use lock_redis_family::board::{WaiterId, waiter_id};
/// A channel nobody waited on for this long is unsubscribed.
const LINGER: Duration = Duration::from_secs(5);
/// How often the reader looks for idle channels (and for its owner).
const TICK: Duration = Duration::from_secs(1);

/// Channel prefix of a leader key's announcements (an election's wins and
/// resignations, published as `1`: every observer wakes); the key follows.
pub(crate) const LEADER_PREFIX: &str = "verrou:leader:";

/// The channel on which `lead` (an election's leader key) announces changes.
pub(crate) fn leader_channel(lead: &str) -> String {
    format!("{LEADER_PREFIX}{lead}")
}

struct Entry {
    /// This process's waiters on the channel.
    board: WaiterBoard,
    subscribed: bool,
    idle_since: Instant,
}

/// The live pub/sub connection of one generation.
struct Live {
    generation: u64,
    sink: PubSubSink,
    /// Through Sentinel: the discovery's epoch when the connection's
    /// primary was found (see [`Notifier::left_behind`]).
    epoch: Option<u64>,
    /// Dropped with this value: stops the generation's reader task, which
    /// holds the other half of the connection.
    _stop: oneshot::Sender<()>,
}

/// The waiters' channels, and the connection they are subscribed on. An
/// entry lives while it has waiters, then for [`LINGER`] if subscribed (so
/// a busy key is not re-subscribed on every wait); without a connection
/// nothing is kept for idle channels, so the map stays bounded by the
/// waiters during an outage.
#[derive(Default)]
struct State {
    live: Option<Live>,
    generation: u64,
    channels: HashMap<String, Entry>,
}

/// Where the pub/sub connection goes.
pub(crate) enum PubSubSource {
    /// The server of a URL.
    Client(Box<redis::Client>),
    /// The primary found through Sentinel: a connection lost with a
    /// failover is opened again on the new primary by the next
    /// subscription.
    Sentinel(Arc<Discovery>),
}

/// Subscriptions of one backend.
pub(crate) struct Notifier {
    client: PubSubSource,
    /// This backend's id and whether the server refused SUBSCRIBE.
    listener: Listener,
    timeout: Duration,
    state: Mutex<State>,
    /// Serialises SUBSCRIBE / UNSUBSCRIBE with the bookkeeping, so an
    /// unsubscribe of an idle channel cannot overtake a new subscribe.
    subscriptions: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state();
        f.debug_struct("Notifier")
            .field("connected", &s.live.is_some())
            .field("refused", &self.listener.is_refused())
            .field("channels", &s.channels.len())
            .finish_non_exhaustive()
    }
}

impl Notifier {
    pub(crate) fn new(client: PubSubSource, timeout: Duration) -> Arc<Self> {
        Arc::new(Notifier {
            client,
            listener: Listener::default(),
            timeout,
            state: Mutex::new(State::default()),
            subscriptions: tokio::sync::Mutex::new(()),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Each update leaves the state consistent: a poisoned lock is usable.
        match self.state.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Through Sentinel, whether the pub/sub connection is to a primary the
    /// sentinels have since replaced (the discovery's epoch moved): one
    /// paused or cut off past a failover keeps its connections open, and
    /// releases now publish on the new primary. Dropped then, so that the
    /// next wait subscribes again there.
    fn left_behind(&self, s: &mut State) {
        let (PubSubSource::Sentinel(discovery), Some(live)) = (&self.client, s.live.as_ref()) else {
            return;
        };
        if live.epoch != Some(discovery.epoch()) {
            let generation = live.generation;
            forget_connection(s, generation);
        }
    }

    /// Subscribes to `channel` if needed: true when it just did.
    async fn subscribe_channel(self: &Arc<Self>, channel: &str) -> redis::RedisResult<bool> {
        let subscribed = {
            let mut s = self.state();
            self.left_behind(&mut s);
            s.channels.get(channel).is_some_and(|e| e.subscribed)
        };
        if subscribed {
            return Ok(false);
        }
        let _serial = self.subscriptions.lock().await;
        if self.state().channels.get(channel).is_some_and(|e| e.subscribed) {
            return Ok(false);
        }
        let (generation, mut sink) = self.connection().await?;
        let reply = tokio::time::timeout(self.timeout, sink.subscribe(channel)).await;
        let mut s = self.state();
        match reply {
            Ok(Ok(())) => {
                if s.live.as_ref().is_some_and(|l| l.generation == generation)
                    && let Some(e) = s.channels.get_mut(channel)
                {
                    e.subscribed = true;
                }
                Ok(true)
            }
            Ok(Err(e)) => {
                forget_connection(&mut s, generation);
                if e.code() == Some("NOPERM") {
                    self.listener.refuse(BACKEND, &e);
                }
                Err(e)
            }
            Err(_) => {
                forget_connection(&mut s, generation);
                Err(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "SUBSCRIBE timed out",
                )))
            }
        }
    }

    /// The pub/sub connection, opened (with its reader task) if needed.
    /// Called with `subscriptions` held, so only one caller connects.
    async fn connection(self: &Arc<Self>) -> redis::RedisResult<(u64, PubSubSink)> {
        if let Some(live) = &self.state().live {
            return Ok((live.generation, live.sink.clone()));
        }
        let (client, epoch) = match &self.client {
            PubSubSource::Client(client) => ((**client).clone(), None),
            PubSubSource::Sentinel(discovery) => match discovery.primary().await {
                Ok(primary) => (primary.client.clone(), Some(primary.epoch)),
                Err(e) => return Err(redis::RedisError::from(std::io::Error::other(e.to_string()))),
            },
        };
        let pubsub = tokio::time::timeout(self.timeout, client.get_async_pubsub())
            .await
            .map_err(|_| {
                redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "pub/sub connect timed out",
                ))
            })??;
        let (sink, stream) = pubsub.split();
        let (stop, stopped) = oneshot::channel();
        let generation = {
            let mut s = self.state();
            s.generation += 1;
            s.live = Some(Live {
                generation: s.generation,
                sink: sink.clone(),
                epoch,
                _stop: stop,
            });
            s.generation
        };
        tokio::spawn(read(Arc::downgrade(self), generation, sink.clone(), stream, stopped));
        Ok((generation, sink))
    }
}

/// A waiter's channel is this backend's own or an election's leader key's.
impl Subscriber for Notifier {
    type Error = redis::RedisError;

    fn listener(&self) -> &Listener {
        &self.listener
    }

    fn subscribe(self: &Arc<Self>, channel: &str) -> impl Future<Output = redis::RedisResult<bool>> + Send {
        self.subscribe_channel(channel)
    }
}

impl Boards for Notifier {
    fn join(&self, channel: &str, id: WaiterId) -> Option<Arc<Notify>> {
        let mut s = self.state();
        let entry = s.channels.entry(channel.to_owned()).or_insert_with(|| Entry {
            board: WaiterBoard::default(),
            subscribed: false,
            idle_since: Instant::now(),
        });
        entry.board.join(id)
    }

    fn leave(&self, channel: &str, id: &WaiterId) {
        let mut s = self.state();
        if let Some(e) = s.channels.get_mut(channel) {
            e.board.leave(id);
            if e.board.is_empty() {
                if e.subscribed {
                    // Lingers; the reader unsubscribes it when idle.
                    e.idle_since = Instant::now();
                } else {
                    s.channels.remove(channel);
                }
            }
        }
    }
}

/// Drops the connection of `generation` (stopping its reader, which closes
/// it) and forgets its subscriptions and idle channels.
fn forget_connection(s: &mut State, generation: u64) {
    if s.live.as_ref().is_some_and(|l| l.generation == generation) {
        s.live = None;
        s.channels.retain(|_, e| !e.board.is_empty());
        for e in s.channels.values_mut() {
            e.subscribed = false;
        }
    }
}

/// Delivers messages to waiters; unsubscribes idle channels; ends with the
/// connection, when its generation is forgotten (`stopped`), or when the
/// backend is gone.
async fn read(
    notifier: Weak<Notifier>,
    generation: u64,
    mut sink: PubSubSink,
    mut stream: redis::aio::PubSubStream,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            msg = stream.next() => {
                let Some(msg) = msg else { break };
                let Some(n) = notifier.upgrade() else { return };
                if let Some(e) = n.state().channels.get_mut(msg.get_channel_name()) {
                    e.board.wake(msg.get_payload_bytes());
                }
            }
            _ = tick.tick() => {
                let Some(n) = notifier.upgrade() else { return };
                let _serial = n.subscriptions.lock().await;
                let idle: Vec<String> = {
                    let mut s = n.state();
                    let now = Instant::now();
                    let idle: Vec<String> = s
                        .channels
                        .iter()
                        .filter(|(_, e)| e.board.is_empty() && now.duration_since(e.idle_since) >= LINGER)
                        .map(|(c, _)| c.clone())
                        .collect();
                    for c in &idle {
                        s.channels.remove(c);
                    }
                    idle
                };
                if !idle.is_empty()
                    && !matches!(tokio::time::timeout(n.timeout, sink.unsubscribe(&idle)).await, Ok(Ok(())))
                {
                    break;
                }
            }
        }
    }
    if let Some(n) = notifier.upgrade() {
        forget_connection(&mut n.state(), generation);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 11 item 16: with no pub/sub connection (an outage), every
    /// waited-on key used to leave its channel entry behind for good.
    #[tokio::test]
    async fn an_outage_keeps_no_idle_channels() {
        // Nothing listens on port 1: every connect is refused at once.
        let client = redis::Client::open("redis://127.0.0.1:1/").unwrap_or_else(|e| panic!("{e}"));
        let notifier = Notifier::new(PubSubSource::Client(Box::new(client)), Duration::from_millis(200));
        for i in 0..200 {
            notifier
                .wait([b'0'; 64], Duration::from_millis(2 + i % 2), Some(async { true }))
                .await;
        }
        let s = notifier.state();
        assert!(s.live.is_none());
        assert_eq!(s.channels.len(), 0);
    }
}
