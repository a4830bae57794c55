//! The client side of release notifications, without a client: waiter ids,
//! the channel a process listens on, and the board that hands a published
//! id to the waiter it names. Each backend keeps one board per channel and
//! feeds it the messages its own pub/sub connection reads.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// Channel prefix; a process id follows. The scripts of [`crate::wake`]
/// publish on `CHANNEL_PREFIX` and the first half of a waiter's id.
pub const CHANNEL_PREFIX: &str = "verrou:wake:";

/// A waiter's id as published: its process id and its own, 32 hex digits
/// each (the scripts publish on the channel the first half names).
pub type WaiterId = [u8; 64];

/// Ids announced for no waiter that a board remembers, so a waiter
/// announced between its registration and its wait still wakes.
const ANNOUNCED: usize = 64;

/// A fresh process id (32 hex digits). A failed draw only risks sharing a
/// channel: wakes then reach another process too, which ignores the ids it
/// does not know.
#[must_use]
pub fn process_id() -> [u8; 32] {
    lock_core::LockToken::generate().map_or([b'0'; 32], |t| t.hex_bytes())
}

/// The channel of the process whose waiter ids start with `process`.
#[must_use]
pub fn channel(process: &[u8; 32]) -> String {
    format!("{CHANNEL_PREFIX}{}", String::from_utf8_lossy(process))
}

/// `process`'s id for a waiter whose own id is `own`.
#[must_use]
pub fn waiter_id(process: &[u8; 32], own: &[u8; 32]) -> WaiterId {
    let mut id = [0u8; 64];
    id[..32].copy_from_slice(process);
    id[32..].copy_from_slice(own);
    id
}

/// A fair waiter's id in its queue: the process id of the backend's
/// notifications (`None`, without them: zeros, nobody listens) followed by
/// the waiter's own.
#[must_use]
pub fn queue_waiter_id(process: Option<&[u8; 32]>, waiter: &lock_core::raw::FairWaiter) -> WaiterId {
    waiter_id(process.unwrap_or(&[b'0'; 32]), &waiter.id.hex_bytes())
}

/// A fresh waiter id of `process`.
#[must_use]
pub fn fresh_waiter_id(process: &[u8; 32]) -> WaiterId {
    waiter_id(process, &process_id())
}

/// The waiters of one channel in this process, and the ids announced there
/// while no waiter had them.
#[derive(Debug, Default)]
pub struct WaiterBoard {
    waiters: Vec<(WaiterId, Arc<Notify>)>,
    /// Recent ids announced while no waiter had them, newest last.
    announced: VecDeque<WaiterId>,
}

impl WaiterBoard {
    /// Puts waiter `id` on the board: what wakes it, or `None` when its id
    /// was announced before it got here (it need not wait).
    pub fn join(&mut self, id: WaiterId) -> Option<Arc<Notify>> {
        if let Some(at) = self.announced.iter().position(|a| *a == id) {
            self.announced.remove(at);
            return None;
        }
        let notify = Arc::new(Notify::new());
        self.waiters.push((id, notify.clone()));
        Some(notify)
    }

    /// Takes waiter `id` off the board (its wait ended or was cancelled).
    pub fn leave(&mut self, id: &WaiterId) {
        if let Some(at) = self.waiters.iter().position(|(w, _)| w == id) {
            self.waiters.swap_remove(at);
        }
    }

    /// Whether no waiter is on the board.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    /// Wakes the waiter a message names, or remembers the id for a moment
    /// (its waiter may be on its way); `1` wakes every waiter (an
    /// election's announcement: every observer looks).
    pub fn wake(&mut self, payload: &[u8]) {
        if let Some((_, notify)) = self.waiters.iter().find(|(w, _)| w[..] == *payload) {
            notify.notify_one();
        } else if payload == b"1" {
            for (_, notify) in &self.waiters {
                notify.notify_one();
            }
        } else if let Ok(id) = WaiterId::try_from(payload) {
            if self.announced.len() == ANNOUNCED {
                self.announced.pop_front();
            }
            self.announced.push_back(id);
        }
    }
}

/// Where a backend keeps its waiters: a [`WaiterBoard`] per channel it
/// listens on (one, or one per election's leader key too).
pub trait Boards {
    /// Puts waiter `id` on `channel`'s board ([`WaiterBoard::join`]).
    fn join(&self, channel: &str, id: WaiterId) -> Option<Arc<Notify>>;

    /// Takes waiter `id` off `channel`'s board ([`WaiterBoard::leave`]).
    fn leave(&self, channel: &str, id: &WaiterId);
}

/// The client-agnostic half of a backend's release notifications: the
/// backend's process id (its channel, the first half of its waiters' ids),
/// whether the server refused `SUBSCRIBE`, and the wait itself. The
/// backend keeps the connection and the boards.
#[derive(Debug)]
pub struct Listener {
    process: [u8; 32],
    /// Set when the server refused `SUBSCRIBE` for lack of rights
    /// (`NOPERM`): waits then use their timers only, without trying again.
    refused: AtomicBool,
}

impl Default for Listener {
    fn default() -> Self {
        Listener {
            process: process_id(),
            refused: AtomicBool::new(false),
        }
    }
}

impl Listener {
    /// This backend's id, the first half of its waiters' ids.
    #[must_use]
    pub fn process(&self) -> &[u8; 32] {
        &self.process
    }

    /// This backend's channel ([`channel`]).
    #[must_use]
    pub fn channel(&self) -> String {
        channel(&self.process)
    }

    /// A fresh waiter id of this backend.
    #[must_use]
    pub fn fresh_waiter_id(&self) -> WaiterId {
        fresh_waiter_id(&self.process)
    }

    /// Whether the server refused `SUBSCRIBE`.
    #[must_use]
    pub fn is_refused(&self) -> bool {
        self.refused.load(Ordering::Relaxed)
    }

    /// Turns the notifications off for good (the server refused
    /// `SUBSCRIBE`: `why`), with one warning.
    pub fn refuse(&self, backend: &str, why: &dyn std::fmt::Display) {
        if !self.refused.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                backend,
                error = %why,
                "the server refuses SUBSCRIBE to this ACL user (no channel rights, e.g. Redis 7's \
                 acl-pubsub-default resetchannels): release notifications are off for this backend; waiters use \
                 their timers"
            );
        }
    }

    /// Waits until waiter `id` on `channel` (a board of `boards`) is woken
    /// or `max_wait` passes: `subscribe` (true when it just subscribed),
    /// then `mark` (registers the waiter on the server once subscribed, so
    /// no release after it goes unheard; false when the lock is already
    /// free: no point waiting), then the wake. Without `mark` (the waiter
    /// registered itself before: a fair waiter), a wait that had to
    /// subscribe first returns at once: a wake may have gone by unheard.
    /// Refused, or with a failed subscription, the wait is the timer, but
    /// the waiter still registers (`mark`): a release then reserves the key
    /// for it once it has waited the starvation bound
    /// ([`crate::wake::STARVING_MS`]), and its next look claims it
    /// (`mark` answers false, or the backend's recheck), where a waiter
    /// unknown to the server would only win by chance against barging
    /// holders. The waiter leaves its board when the wait ends or is
    /// cancelled.
    pub async fn wait<E: std::fmt::Display>(
        &self,
        boards: &impl Boards,
        channel: &str,
        id: WaiterId,
        max_wait: Duration,
        subscribe: impl Future<Output = Result<bool, E>>,
        mark: Option<impl Future<Output = bool>>,
    ) {
        if self.is_refused() {
            let registered = async {
                if let Some(mark) = mark
                    && !mark.await
                {
                    return;
                }
                std::future::pending::<()>().await;
            };
            let _ = tokio::time::timeout(max_wait, registered).await;
            return;
        }
        let Some(woken) = boards.join(channel, id) else {
            // Woken before it got here.
            return;
        };
        let _waiting = Waiting { boards, channel, id };
        let _ = tokio::time::timeout(max_wait, async {
            match subscribe.await {
                Ok(newly) => {
                    let worth_waiting = match mark {
                        Some(mark) => mark.await,
                        None => !newly,
                    };
                    if !worth_waiting {
                        return;
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "release notifications unavailable; waiting on the timer");
                    if let Some(mark) = mark
                        && !mark.await
                    {
                        return;
                    }
                }
            }
            woken.notified().await;
        })
        .await;
    }
}

/// A backend's release notifications as its waiters use them: its boards,
/// its [`Listener`], and how it subscribes to a channel; the waits are
/// written here once.
pub trait Subscriber: Boards + Send + Sync + Sized {
    /// What a failed subscription says.
    type Error: std::fmt::Display + Send;

    /// The backend's id and whether the server refused `SUBSCRIBE`.
    fn listener(&self) -> &Listener;

    /// Subscribes to `channel` if needed (connecting first): true when it
    /// just did.
    fn subscribe(self: &Arc<Self>, channel: &str) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// This backend's id, the first half of its waiters' ids.
    fn process(&self) -> &[u8; 32] {
        self.listener().process()
    }

    /// Waits on this backend's own channel until waiter `id` is woken or
    /// `max_wait` passes ([`Listener::wait`]).
    fn wait(
        self: &Arc<Self>,
        id: WaiterId,
        max_wait: Duration,
        mark: Option<impl Future<Output = bool> + Send>,
    ) -> impl Future<Output = ()> + Send {
        self.wait_on(self.listener().channel(), id, max_wait, mark)
    }

    /// As [`Subscriber::wait`], on `channel`: a `1` published there wakes
    /// every waiter of this process on it (an election's observers).
    fn wait_on(
        self: &Arc<Self>,
        channel: String,
        id: WaiterId,
        max_wait: Duration,
        mark: Option<impl Future<Output = bool> + Send>,
    ) -> impl Future<Output = ()> + Send {
        async move {
            self.listener()
                .wait(&**self, &channel, id, max_wait, self.subscribe(&channel), mark)
                .await;
        }
    }
}

/// Takes a waiter off its board when its wait ends (or is cancelled).
struct Waiting<'a, B: Boards> {
    boards: &'a B,
    channel: &'a str,
    id: WaiterId,
}

impl<B: Boards> Drop for Waiting<'_, B> {
    fn drop(&mut self) {
        self.boards.leave(self.channel, &self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_announced_before_its_waiter_arrives_is_not_waited_for() {
        let mut board = WaiterBoard::default();
        let id = waiter_id(&[b'a'; 32], &[b'b'; 32]);
        board.wake(&id);
        assert!(board.join(id).is_none());
        assert!(board.join(id).is_some(), "remembered once");
    }

    #[test]
    fn the_ring_of_announced_ids_is_bounded() {
        let mut board = WaiterBoard::default();
        for i in 0..1000u32 {
            let mut own = [b'0'; 32];
            own[..4].copy_from_slice(&i.to_be_bytes());
            board.wake(&waiter_id(&[b'p'; 32], &own));
        }
        assert_eq!(board.announced.len(), ANNOUNCED);
    }

    struct OneBoard(std::sync::Mutex<WaiterBoard>);

    impl Boards for OneBoard {
        fn join(&self, _channel: &str, id: WaiterId) -> Option<Arc<Notify>> {
            self.0.lock().ok()?.join(id)
        }
        fn leave(&self, _channel: &str, id: &WaiterId) {
            if let Ok(mut b) = self.0.lock() {
                b.leave(id);
            }
        }
    }

    /// Without notifications (refused, or a failed subscription) a waiter
    /// still registers, so that a release can reserve the key for it.
    #[tokio::test]
    async fn a_waiter_without_notifications_still_registers() {
        let boards = OneBoard(std::sync::Mutex::new(WaiterBoard::default()));
        let id = waiter_id(&[b'a'; 32], &[b'b'; 32]);
        let marked = std::sync::atomic::AtomicU32::new(0);
        let mark = || async {
            marked.fetch_add(1, Ordering::SeqCst);
            false // the key is free: the wait ends at once
        };
        let long = Duration::from_secs(60);
        let failed = async { Err::<bool, String>("no pub/sub connection".to_owned()) };
        Listener::default()
            .wait(&boards, "c", id, long, failed, Some(mark()))
            .await;
        assert_eq!(
            marked.load(Ordering::SeqCst),
            1,
            "registered despite the failed subscription"
        );
        let refused = Listener::default();
        refused.refuse("test", &"SUBSCRIBE refused");
        let unused = async { Ok::<bool, String>(false) };
        refused.wait(&boards, "c", id, long, unused, Some(mark())).await;
        assert_eq!(marked.load(Ordering::SeqCst), 2, "registered though refused");
    }

    #[test]
    fn channel_and_ids_share_the_process_half() {
        let process = process_id();
        let id = fresh_waiter_id(&process);
        assert_eq!(&id[..32], &process[..]);
        assert_eq!(
            channel(&process),
            format!("verrou:wake:{}", String::from_utf8_lossy(&process))
        );
    }
}
