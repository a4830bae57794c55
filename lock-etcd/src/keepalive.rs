//! The backend's one lease keepalive stream ([`KeepAlives`]): a renewal
//! round of many leases sends one keepalive message per lease on it, and
//! waits once for the round's answers (no channel or timer per message):
//! the stream's reader writes each answer into its round, matched to the
//! lease it was sent for, in the order sent (the server answers a stream's
//! keepalives in order).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use etcd_client::LeaseKeeper;
use lock_core::{Error, Result};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::{NAME, failed, is_lease_not_found};
use crate::session::KeepAlive;

/// One keepalive's answer: the TTL left and the answering member's
/// revision, or why the stream failed.
type Answer = std::result::Result<(i64, i64), String>;

/// The keepalives of one round, in the order sent, and their answers.
struct Round {
    leases: Vec<i64>,
    answers: Mutex<Answers>,
    /// Every sent keepalive was answered, or the stream failed.
    done: Notify,
}

struct Answers {
    got: Vec<Option<Answer>>,
    /// The next keepalive to be answered.
    next: usize,
    /// How many were sent (the round is answered when `next` reaches it).
    sent: usize,
    /// The stream failed before every keepalive was answered.
    failed: Option<String>,
}

impl Round {
    fn answers(&self) -> MutexGuard<'_, Answers> {
        self.answers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The backend's one keepalive stream, while it is open.
struct Open {
    keeper: LeaseKeeper,
    /// Rounds with keepalives sent and not answered yet, in the order sent.
    pending: Arc<Mutex<VecDeque<Arc<Round>>>>,
    closed: Arc<AtomicBool>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Release);
        self.reader.abort();
        fail_all(&self.pending, "the lease keepalive stream was closed");
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn fail_all(pending: &Mutex<VecDeque<Arc<Round>>>, why: &str) {
    let drained: Vec<Arc<Round>> = lock(pending).drain(..).collect();
    for round in drained {
        round.answers().failed = Some(why.to_owned());
        round.done.notify_one();
    }
}

/// One keepalive stream for every lease of a backend: each keepalive is one
/// message on it, a round's answers awaited at most the response timeout.
/// The stream is opened on first use and again after it fails or an answer
/// is late (a late answer can then never be taken for a later keepalive's).
pub(crate) struct KeepAlives {
    slot: tokio::sync::Mutex<Option<Open>>,
    timeout: Duration,
    /// Keepalive messages sent (diagnostics and tests).
    pub(crate) sent: AtomicU64,
    /// Keepalive streams opened (diagnostics and tests).
    pub(crate) opened: AtomicU64,
}

impl KeepAlives {
    pub(crate) fn new(timeout: Duration) -> KeepAlives {
        KeepAlives {
            slot: tokio::sync::Mutex::new(None),
            timeout,
            sent: AtomicU64::new(0),
            opened: AtomicU64::new(0),
        }
    }

    /// Keep `lease` alive: one keepalive.
    pub(crate) async fn keep_alive(&self, client: &etcd_client::Client, lease: i64) -> Result<KeepAlive> {
        self.keep_alive_many(client, &[lease])
            .await
            .pop()
            .unwrap_or_else(|| Err(Error::backend(NAME, "the keepalive returned no outcome")))
    }

    /// Keep each of `leases` alive: one keepalive message each on the
    /// backend's one stream, answered in order; the round's answers awaited
    /// at most the response timeout.
    pub(crate) async fn keep_alive_many(&self, client: &etcd_client::Client, leases: &[i64]) -> Vec<Result<KeepAlive>> {
        let round = Arc::new(Round {
            leases: leases.to_vec(),
            answers: Mutex::new(Answers {
                got: vec![None; leases.len()],
                next: 0,
                sent: 0,
                failed: None,
            }),
            done: Notify::new(),
        });
        let sent_at = Instant::now();
        let deadline = sent_at + self.timeout;
        if let Err(e) = self.send(client, &round, deadline).await {
            let mut a = round.answers();
            if a.failed.is_none() {
                a.failed = Some(e.to_string());
            }
        }
        let late = {
            let waited = tokio::time::timeout_at(deadline, async {
                loop {
                    let done = round.done.notified();
                    {
                        let a = round.answers();
                        if a.failed.is_some() || a.next >= a.sent {
                            return;
                        }
                    }
                    done.await;
                }
            })
            .await;
            waited.is_err()
        };
        if late {
            // Reopen on the next use (maybe on another member); what was
            // sent on this stream fails now.
            if let Ok(mut slot) = self.slot.try_lock() {
                *slot = None;
            }
        }
        let a = round.answers();
        a.got
            .iter()
            .map(|got| match got {
                Some(Ok((ttl, revision))) if *ttl > 0 => Ok(KeepAlive::Alive {
                    ttl: *ttl,
                    sent_at,
                    revision: *revision,
                }),
                Some(Ok(_)) => Ok(KeepAlive::Gone),
                Some(Err(why)) => Err(Error::backend(NAME, format!("lease keepalive: {why}"))),
                None if late => Err(timed_out("the lease keepalive's answer")),
                None => Err(Error::backend(
                    NAME,
                    format!(
                        "lease keepalive: {}",
                        a.failed.as_deref().unwrap_or("the stream closed")
                    ),
                )),
            })
            .collect()
    }

    /// Send the round's keepalives, opening the stream first if needed
    /// (opening it sends a keepalive for the round's first lease: a lease
    /// the server no longer knows is answered there, and the next one is
    /// tried).
    async fn send(&self, client: &etcd_client::Client, round: &Arc<Round>, deadline: Instant) -> Result<()> {
        let Ok(mut slot) = tokio::time::timeout_at(deadline, self.slot.lock()).await else {
            return Err(timed_out("sending a lease keepalive"));
        };
        let mut first = 0;
        if slot.as_ref().is_none_or(|o| o.closed.load(Ordering::Acquire)) {
            *slot = None;
            loop {
                let Some(&lease) = round.leases.get(first) else {
                    let mut a = round.answers();
                    (a.next, a.sent) = (first, first);
                    return Ok(()); // each was answered gone
                };
                match tokio::time::timeout_at(deadline, client.lease_client().keep_alive(lease)).await {
                    Err(_) => return Err(timed_out("opening the lease keepalive stream")),
                    Ok(Err(e)) if is_lease_not_found(&e) => {
                        round.answers().got[first] = Some(Ok((0, 0)));
                        first += 1;
                    }
                    Ok(Err(e)) => return Err(failed("opening the lease keepalive stream", e)),
                    Ok(Ok((keeper, responses))) => {
                        self.opened.fetch_add(1, Ordering::Relaxed);
                        let pending = Arc::new(Mutex::new(VecDeque::new()));
                        let closed = Arc::new(AtomicBool::new(false));
                        let reader = tokio::spawn(read_answers(responses, pending.clone(), closed.clone()));
                        *slot = Some(Open {
                            keeper,
                            pending,
                            closed,
                            reader,
                        });
                        break;
                    }
                }
            }
        }
        let Some(open) = slot.as_mut() else {
            return Err(Error::backend(NAME, "the lease keepalive stream is not open"));
        };
        {
            let mut a = round.answers();
            (a.next, a.sent) = (first, round.leases.len());
        }
        lock(&open.pending).push_back(round.clone());
        let sending = async {
            for &lease in &round.leases[first..] {
                open.keeper.id = lease;
                open.keeper.keep_alive().await?;
            }
            Ok::<(), etcd_client::Error>(())
        };
        let outcome = tokio::time::timeout_at(deadline, sending).await;
        let count = (round.leases.len() - first) as u64;
        self.sent.fetch_add(count, Ordering::Relaxed);
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                *slot = None; // fails what is pending
                Err(failed("sending a lease keepalive", e))
            }
            Err(_) => {
                *slot = None;
                Err(timed_out("sending a lease keepalive"))
            }
        }
    }
}

/// The stream's reader: each answer goes to the oldest round's next
/// keepalive (which must be for the same lease); an error, a close or a
/// mismatch fails every pending round and closes the stream.
async fn read_answers(
    mut responses: etcd_client::LeaseKeepAliveStream,
    pending: Arc<Mutex<VecDeque<Arc<Round>>>>,
    closed: Arc<AtomicBool>,
) {
    let why = loop {
        match responses.message().await {
            Ok(Some(resp)) => {
                let revision = resp.header().map_or(0, |h| h.revision());
                let mut queue = lock(&pending);
                let Some(round) = queue.front() else {
                    break "an answer nobody asked for".to_owned();
                };
                let mut a = round.answers();
                let i = a.next;
                if round.leases.get(i) != Some(&resp.id()) {
                    break "the keepalive answers came out of order".to_owned();
                }
                a.got[i] = Some(Ok((resp.ttl(), revision)));
                a.next += 1;
                if a.next >= round.leases.len() {
                    drop(a);
                    if let Some(round) = queue.pop_front() {
                        round.done.notify_one();
                    }
                }
            }
            Ok(None) => break "the lease keepalive stream closed".to_owned(),
            Err(e) if is_lease_not_found(&e) => break "lease not found".to_owned(),
            Err(e) => break format!("lease keepalive: {e}"),
        }
    };
    tracing::debug!(why, "the lease keepalive stream ended");
    closed.store(true, Ordering::Release);
    fail_all(&pending, &why);
}

fn timed_out(what: &str) -> Error {
    Error::backend(NAME, format!("{what}: no answer within the response timeout"))
}
