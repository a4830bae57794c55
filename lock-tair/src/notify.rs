//! Release notifications, the client side (single server only): each
//! backend subscribes to a channel of its own (`verrou:wake:<process id>`,
//! the redis-lua backend's protocol) on a dedicated fred connection, opened
//! by the first wait; its waiters register their id (the process id
//! followed by the waiter's) in the key's wake set on the server (see
//! `wake`), and the release script `PUBLISH`es one waiter's id on that
//! waiter's process channel, so only that waiter wakes. Always a hint: a
//! message lost (before the subscription, across a reconnect) costs the
//! waiter its timer, never correctness.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
use fred::types::{Message, Value};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use lock_redis_family::board::{Boards, Listener, Subscriber, WaiterBoard};
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{Notify, oneshot};

use crate::conn::{NAME, OptionsClient};

pub(crate) use lock_redis_family::board::WaiterId;

/// How many times `PUBSUB NUMSUB` may count no subscriber before a
/// `SUBSCRIBE` counts as refused (see `Notifier::listed`).
const LISTED_CHECKS: u32 = 10;
/// The pause between two of those checks.
const LISTED_PAUSE: Duration = Duration::from_millis(20);

/// The subscription's state.
enum Link {
    /// Not subscribed: the next wait connects and subscribes.
    Idle,
    /// Subscribed; dropping the sender stops the reader task.
    Subscribed { _stop: oneshot::Sender<()> },
    /// The server refused SUBSCRIBE (NOPERM): waits use their timers only.
    Refused,
}

/// The pub/sub connection of one backend and its waiters.
pub(crate) struct Notifier {
    client: Client,
    /// A command connection, to check the subscription.
    checker: OptionsClient,
    /// This backend's id and whether the server refused SUBSCRIBE.
    listener: Listener,
    channel: String,
    timeout: Duration,
    waiters: Mutex<WaiterBoard>,
    link: tokio::sync::Mutex<Link>,
    /// Fast path of the waits once subscribed.
    subscribed: AtomicBool,
    /// Whether `client` was ever started (and so must be closed).
    started: AtomicBool,
    /// fred's connection task of `client`, once started: see `connect`.
    connection: Mutex<Option<fred::types::ConnectHandle>>,
    /// The subscription attempt under way (or the last one): see `subscribe`.
    attempt: Mutex<Option<Attempt>>,
}

/// A subscription attempt running on its own task, awaited by any number of
/// waiters.
type Attempt = Shared<BoxFuture<'static, Result<bool, String>>>;

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("subscribed", &self.subscribed.load(Ordering::Relaxed))
            .field("refused", &self.listener.is_refused())
            .finish_non_exhaustive()
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        if !self.started.load(Ordering::Relaxed) {
            return;
        }
        let connection = lock(&self.connection).take();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let client = self.client.clone();
            runtime.spawn(async move {
                let _ = client.quit().await;
                // A task still connecting (or reconnecting) would go on.
                if let Some(task) = connection {
                    task.abort();
                }
            });
        }
    }
}

impl Notifier {
    /// A notifier on `client` (not connected yet: the first wait connects).
    pub(crate) fn new(client: Client, checker: OptionsClient, timeout: Duration) -> Arc<Self> {
        let listener = Listener::default();
        Arc::new(Notifier {
            channel: listener.channel(),
            client,
            checker,
            listener,
            timeout,
            waiters: Mutex::new(WaiterBoard::default()),
            link: tokio::sync::Mutex::new(Link::Idle),
            subscribed: AtomicBool::new(false),
            started: AtomicBool::new(false),
            connection: Mutex::new(None),
            attempt: Mutex::new(None),
        })
    }

    fn waiters(&self) -> MutexGuard<'_, WaiterBoard> {
        lock(&self.waiters)
    }

    /// Connects `client` unless it is, within the timeout, starting fred's
    /// connection task only when none is running. A wait's timer can cut
    /// this short anywhere: calling fred's `init` again then would start a
    /// second connection task, and the replaced one, ending, leaves fred
    /// believing the client stopped, so a later QUIT is never sent and the
    /// connection stays open for good (seen as one extra connection per
    /// backend after a refused SUBSCRIBE; see
    /// `waits_cut_short_while_connecting_leave_no_connection_after_a_refusal`).
    async fn connect(&self) -> Result<(), String> {
        if self.client.is_connected() {
            return Ok(());
        }
        {
            let mut connection = lock(&self.connection);
            if connection.as_ref().is_none_or(|task| task.is_finished()) {
                *connection = Some(self.client.connect());
            }
        }
        match tokio::time::timeout(self.timeout, self.client.wait_for_connect()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("cannot connect: {}", e.details())),
            Err(_) => Err(format!("cannot connect within {:?}", self.timeout)),
        }
    }

    /// The pub/sub client, if its connection was ever opened and is up (a
    /// client never started must not be connected from outside: nothing
    /// would close it).
    pub(crate) fn open_client(&self) -> Option<&Client> {
        (self.started.load(Ordering::Relaxed) && self.client.is_connected()).then_some(&self.client)
    }

    /// A fresh waiter id of this backend.
    pub(crate) fn waiter_id(&self) -> WaiterId {
        self.listener.fresh_waiter_id()
    }

    /// This backend's id for the waiter whose own id is `own`.
    pub(crate) fn named_waiter_id(&self, own: &lock_core::LockToken) -> WaiterId {
        lock_redis_family::board::waiter_id(self.listener.process(), &own.hex_bytes())
    }

    /// Connects and subscribes to this backend's channel, once: true when
    /// it just did. The attempt runs on its own task, which waits whose
    /// timers end first do not cut short: cut short after SUBSCRIBE, the
    /// check that tells a refusal would never finish, and the connection
    /// would stay open for nothing (see
    /// `waits_cut_short_while_connecting_leave_no_connection_after_a_refusal`).
    async fn subscribe_once(self: &Arc<Self>) -> Result<bool, String> {
        if self.subscribed.load(Ordering::Acquire) {
            return Ok(false);
        }
        let attempt = {
            let mut slot = lock(&self.attempt);
            match slot.as_ref() {
                Some(running) if running.peek().is_none() => running.clone(),
                _ => {
                    let notifier = self.clone();
                    let task = tokio::spawn(async move { notifier.subscribe_now().await });
                    let attempt = async move {
                        task.await
                            .unwrap_or_else(|e| Err(format!("the subscription task failed: {e}")))
                    }
                    .boxed()
                    .shared();
                    *slot = Some(attempt.clone());
                    attempt
                }
            }
        };
        attempt.await
    }

    /// One subscription attempt (see `subscribe`).
    async fn subscribe_now(self: &Arc<Self>) -> Result<bool, String> {
        let mut link = self.link.lock().await;
        match *link {
            Link::Subscribed { .. } => return Ok(false),
            Link::Refused => return Err("SUBSCRIBE refused".to_owned()),
            Link::Idle => {}
        }
        self.started.store(true, Ordering::Relaxed);
        self.connect().await?;
        // Listening before SUBSCRIBE: no message is missed in between.
        let messages = self.client.message_rx();
        let reconnects = self.client.reconnect_rx();
        let reply = tokio::time::timeout(self.timeout, self.client.subscribe(self.channel.as_str())).await;
        let failure = match reply {
            Ok(Ok(())) if !self.listed().await => {
                // fred reports a SUBSCRIBE refused with NOPERM (RESP2) as done:
                // the channel is not on the server's list, so it was refused.
                self.refuse("SUBSCRIBE refused (the channel has no subscriber after it)", &mut link);
                "SUBSCRIBE refused".to_owned()
            }
            Ok(Ok(())) => {
                let (stop, stopped) = oneshot::channel();
                tokio::spawn(read(
                    Arc::downgrade(self),
                    self.client.clone(),
                    self.channel.clone(),
                    self.timeout,
                    messages,
                    reconnects,
                    stopped,
                ));
                *link = Link::Subscribed { _stop: stop };
                self.subscribed.store(true, Ordering::Release);
                return Ok(true);
            }
            Ok(Err(e)) => {
                if e.details().starts_with("NOPERM") {
                    self.refuse(e.details(), &mut link);
                }
                format!("SUBSCRIBE: {}", e.details())
            }
            Err(_) => "SUBSCRIBE timed out".to_owned(),
        };
        // No connection is kept for a subscription that failed. The QUIT
        // runs on its own task: cut short by a timeout here, it could leave
        // the connection open (a loaded machine, once, in the test below).
        let client = self.client.clone();
        let bound = self.timeout.saturating_mul(10);
        tokio::spawn(async move {
            let _ = tokio::time::timeout(bound, client.quit()).await;
        });
        Err(failure)
    }

    /// Whether the server lists this backend's channel as subscribed
    /// (`PUBSUB NUMSUB` on a command connection); true when it cannot tell.
    /// fred can report the `SUBSCRIBE` done before the server ran it (the
    /// reply of RESP2's subscribe mode is a push message), so `NUMSUB` on
    /// another connection can come first and count none: a 0 is asked
    /// again, [`LISTED_CHECKS`] times at most, [`LISTED_PAUSE`] apart,
    /// before it counts as a refusal. Taken as refused at once, it turned
    /// the notifications off for good on a loaded machine.
    async fn listed(&self) -> bool {
        for check in 1..=LISTED_CHECKS {
            let reply: Result<Vec<Value>, _> = self.checker.pubsub_numsub(self.channel.as_str()).await;
            match reply {
                Ok(reply) => match reply.get(1).and_then(Value::as_i64) {
                    Some(0) if check < LISTED_CHECKS => tokio::time::sleep(LISTED_PAUSE).await,
                    Some(n) => return n > 0,
                    None => return true,
                },
                Err(e) => {
                    tracing::debug!(error = %e, "PUBSUB NUMSUB failed; the subscription is taken as made");
                    return true;
                }
            }
        }
        false
    }

    /// Turns the notifications off for good, with one warning.
    fn refuse(&self, why: &str, link: &mut Link) {
        *link = Link::Refused;
        self.listener.refuse(NAME, &why);
    }

    /// Wakes the waiter `payload` names, or remembers the id for a moment
    /// (its waiter may be on its way).
    fn wake(&self, payload: &[u8]) {
        self.waiters().wake(payload);
    }
}

/// One channel, this backend's own.
impl Subscriber for Notifier {
    type Error = String;

    fn listener(&self) -> &Listener {
        &self.listener
    }

    fn subscribe(self: &Arc<Self>, _channel: &str) -> impl Future<Output = Result<bool, String>> + Send {
        self.subscribe_once()
    }
}

/// One board: this backend listens on its own channel only.
impl Boards for Notifier {
    fn join(&self, _channel: &str, id: WaiterId) -> Option<Arc<Notify>> {
        self.waiters().join(id)
    }

    fn leave(&self, _channel: &str, id: &WaiterId) {
        self.waiters().leave(id);
    }
}

/// Each update under these locks leaves the state consistent: a poisoned
/// lock is usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Delivers messages to waiters and subscribes again after each reconnect
/// (fred reconnects by itself); ends when the notifier stops it or is gone.
async fn read(
    notifier: Weak<Notifier>,
    client: Client,
    channel: String,
    timeout: Duration,
    mut messages: Receiver<Message>,
    mut reconnects: Receiver<fred::types::config::Server>,
    mut stopped: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            message = messages.recv() => match message {
                Ok(message) => {
                    if *message.channel != *channel {
                        continue;
                    }
                    let Some(n) = notifier.upgrade() else { return };
                    if let Some(payload) = message.value.as_bytes() {
                        n.wake(payload);
                    }
                }
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            },
            reconnected = reconnects.recv() => match reconnected {
                Ok(_) | Err(RecvError::Lagged(_)) => {
                    if let Err(e) = tokio::time::timeout(timeout, client.subscribe(channel.as_str()))
                        .await
                        .map_err(|_| "timed out".to_owned())
                        .and_then(|r| r.map_err(|e| e.details().to_owned()))
                    {
                        tracing::debug!(error = %e, "SUBSCRIBE after a reconnect failed; waiters use their timers");
                    }
                }
                Err(RecvError::Closed) => return,
            },
        }
    }
}
