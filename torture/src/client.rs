//! Independent clients, each on its own OS thread with its own
//! current-thread tokio runtime, its own `LockManager` and its own backend
//! connections: a stall of one client's runtime (the GC-pause fault) stalls
//! its renewer too, exactly as it would in a separate process. The process
//! rows run the same loops in real separate processes (`crate::child`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, Ordering};
use std::time::Duration;

use lock_core::{Error, LeaseHandle, LockManager, LockOptions, UpdateOptions, VersionedStoreExt};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::backends::{Spec, build};
use crate::clock;
use crate::probe;
use crate::record::{Body, Log, UpdateOp, UpdateOutcome};

/// A request to stall one client's whole runtime inside its next critical
/// section (a stop-the-world pause: `std::thread::sleep` on
/// the runtime's only thread).
#[derive(Debug)]
pub struct Stall {
    state: AtomicU8,
    duration: Duration,
    /// How the world stops: the thread sleeps (the default), or a client
    /// process stops itself (`crate::child`).
    pause: fn(Duration),
}

const IDLE: u8 = 0;
const REQUESTED: u8 = 1;
const RUNNING: u8 = 2;
const DONE: u8 = 3;

impl Stall {
    /// A stall of `duration`, not yet requested.
    pub fn new(duration: Duration) -> Arc<Self> {
        Stall::with_pause(duration, std::thread::sleep)
    }

    /// A stall of `duration` performed by `pause` (a client process stops
    /// itself and its parent resumes it; see `crate::child`).
    pub fn with_pause(duration: Duration, pause: fn(Duration)) -> Arc<Self> {
        Arc::new(Stall {
            state: AtomicU8::new(IDLE),
            duration,
            pause,
        })
    }

    /// Ask for the stall: the client performs it in its next body (it goes
    /// for the hot key meanwhile, but a barging client can keep it off that
    /// key for seconds on a backend without wake-ups, so any key will do).
    pub fn request(&self) {
        self.state.store(REQUESTED, Ordering::SeqCst);
    }

    /// Whether the stall is asked for and not yet started.
    pub fn is_requested(&self) -> bool {
        self.state.load(Ordering::SeqCst) == REQUESTED
    }

    /// Withdraw a request not yet started; false if the stall is running or done.
    pub fn withdraw(&self) -> bool {
        self.state
            .compare_exchange(REQUESTED, IDLE, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// Start a requested stall (false when none is requested).
    pub(crate) fn start(&self) -> bool {
        self.state
            .compare_exchange(REQUESTED, RUNNING, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// The stall is over.
    pub(crate) fn finish(&self) {
        self.state.store(DONE, Ordering::SeqCst);
    }

    /// How long the stall lasts.
    pub(crate) fn duration(&self) -> Duration {
        self.duration
    }
}

/// Hold time and pause of a volume client (every client but client 0, the
/// one the faults aim at, until the fault is over): mostly short sections
/// of 2–30 ms, whatever the TTL, so that a row sees hundreds of
/// hand-overs; one in twenty of 1–2.5 TTL, which need the renewer.
pub fn volume_timing(rng: &mut fastrand::Rng, ttl: Duration) -> (Duration, Duration) {
    let hold = if rng.f64() < 0.05 {
        ttl.mul_f64(1.0 + rng.f64() * 1.5)
    } else {
        Duration::from_micros(rng.u64(2_000..30_000))
    };
    (hold, Duration::from_micros(rng.u64(0..5_000)))
}

/// What a lock client does.
#[derive(Clone)]
pub struct LockClient {
    /// Index (also the row in the timeline).
    pub id: usize,
    /// How to reach the backend.
    pub spec: Spec,
    /// Contended keys (names on the server).
    pub keys: Arc<Vec<String>>,
    /// Lock options (TTL, timeouts).
    pub options: LockOptions,
    /// Seed of this client's random choices.
    pub seed: u64,
    /// Stop starting bodies after this (run clock, µs; the driver moves it
    /// later when a fault heals late, so that recovery can be seen).
    pub stop: Arc<AtomicI64>,
    /// The stall this client performs, if it is the stalled one.
    pub stall: Option<Arc<Stall>>,
    /// Run the bodies without the lock (control mode).
    pub control: bool,
    /// Set while this client is inside a body (the driver starts most
    /// faults while client 0 holds a lock, so that they hit a holder).
    pub in_body: Arc<AtomicBool>,
    /// Until then (run clock, µs) client 0 holds for 0.1–2.5 TTL, mostly
    /// on the hot key, so that the fault meets a long hold; after, and
    /// always for the others, [`volume_timing`].
    pub long_until: i64,
    /// Where to record.
    pub log: Arc<Log>,
}

/// What a counter client does.
#[derive(Clone)]
pub struct CounterClient {
    /// How to reach the backend.
    pub spec: Spec,
    /// The counter's key.
    pub key: String,
    /// Bound on one `update` call (a timeout counts as outcome unknown).
    pub op_bound: Duration,
    /// Seed of this client's random choices.
    pub seed: u64,
    /// Stop invoking after this (run clock, µs).
    pub stop: Arc<AtomicI64>,
    /// Where to record.
    pub log: Arc<Log>,
}

/// Run `work` on a new thread with its own current-thread runtime; the
/// receiver fires when it finished.
///
/// # Errors
/// The thread or the runtime could not be created.
pub fn spawn<F, Fut>(name: String, work: F) -> std::io::Result<oneshot::Receiver<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let (tx, rx) = oneshot::channel();
    std::thread::Builder::new().name(name).spawn(move || {
        match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt.block_on(work()),
            Err(e) => eprintln!("client runtime: {e}"),
        }
        let _ = tx.send(());
    })?;
    Ok(rx)
}

/// Short name of an error, for the per-scenario error counts.
pub fn error_kind(e: &Error) -> String {
    match e {
        Error::Timeout { .. } => "acquire timeout".into(),
        Error::Lost { reason, .. } => format!("lost ({reason})"),
        Error::Conflict { .. } => "update gave up (conflicts)".into(),
        Error::QuorumUnreachable { .. } => "quorum unreachable".into(),
        Error::Backend {
            outcome_unknown,
            message,
            ..
        } => {
            let message: String = message.chars().take(60).collect();
            if *outcome_unknown {
                format!("backend, outcome unknown: {message}")
            } else {
                format!("backend: {message}")
            }
        }
        other => format!("{other}").chars().take(60).collect(),
    }
}

impl LockClient {
    /// The client's loop: pick a key, run a body under `with_lock`, repeat
    /// until `stop`.
    pub async fn run(self) {
        let ttl = self.options.ttl;
        let built = loop {
            match build(&self.spec, ttl).await {
                Ok(b) => break b,
                Err(e) => {
                    self.log.error(format!("connect: {}", error_kind(&e)));
                    if clock::now() >= self.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    tokio::time::sleep(ttl / 4).await;
                }
            }
        };
        let locks = match LockManager::from_arc(built.lock, self.options.clone()) {
            Ok(m) => m,
            Err(e) => {
                self.log.error(format!("options: {e}"));
                return;
            }
        };
        let _probe = probe::Running::start(self.id, self.log.clone());
        let mut rng = fastrand::Rng::with_seed(self.seed);
        let mut missed = false;
        while clock::now() < self.stop.load(Ordering::SeqCst) {
            // Key 0 is the hot one (two thirds of the picks): a fault on its
            // holder then meets waiters.
            // The stalled client goes for the hot key once its stall is asked for.
            // After a failed try it goes for any key: a barging client can
            // keep it off the hot key for seconds on a loaded machine.
            let stall_pending = self.stall.as_ref().is_some_and(|s| s.is_requested());
            let victim = self.id == 0 && (clock::now() < self.long_until || stall_pending);
            let (key, hold, gap) = if victim {
                let key = if (stall_pending && !missed) || rng.f64() < 0.66 {
                    0
                } else {
                    rng.usize(..self.keys.len())
                };
                // Hold times from 0.1 to 2.5 TTL: many outlive the TTL and
                // need the renewer.
                (key, ttl.mul_f64(0.1 + rng.f64() * 2.4), ttl.mul_f64(rng.f64() * 0.2))
            } else {
                let (hold, gap) = volume_timing(&mut rng, ttl);
                (rng.usize(..self.keys.len()), hold, gap)
            };
            if self.control {
                // No lease: the whole body counts as its window.
                let deadline = Instant::now() + hold + ttl;
                self.body(key, None, None, deadline, hold).await;
            } else {
                let name = self.keys[key].clone();
                let result = locks
                    .with_lock(&name, |lease| {
                        let fence = lease.fencing_token().map(|f| f.0);
                        let deadline = lease.deadline();
                        self.body(key, fence, Some(lease), deadline, hold)
                    })
                    .await;
                missed = result.is_err();
                if let Err(e) = result {
                    self.log.error(error_kind(&e));
                }
            }
            tokio::time::sleep(gap).await;
        }
        locks.shutdown();
    }

    async fn body(
        &self,
        key: usize,
        fence: Option<u64>,
        lease: Option<LeaseHandle>,
        deadline: Instant,
        hold: Duration,
    ) {
        let mut open = Open {
            log: &self.log,
            body: Body {
                client: self.id,
                key,
                start: clock::now(),
                end: 0,
                deadline: clock::at(deadline),
                fence,
                cancelled: true,
                stalled: false,
            },
            lease,
        };
        let start = open.body.start;
        let _inside = InBody::enter(&self.in_body);
        // In a client process: the run's process follows this lease's
        // deadline (a killed holder's section ends there).
        let _watch = crate::child::DeadlineWatch::start(self.id, key, start, open.lease.as_ref());
        self.log.write(self.id, key, start, fence);
        let until = Instant::now() + hold;
        loop {
            if let Some(stall) = &self.stall
                && stall.start()
            {
                // Stop the world: the renewer and the loss timer of this
                // runtime are frozen too. Then write at once, with no await
                // in between, as a program resuming from a GC pause would.
                let from = clock::now();
                (stall.pause)(stall.duration);
                self.log.window(from, clock::now());
                stall.finish();
                open.body.stalled = true;
                self.log.write(self.id, key, start, fence);
            }
            let now = Instant::now();
            if now >= until {
                break;
            }
            // Short steps, so that a requested stall lands inside this body.
            tokio::time::sleep((until - now).min(self.options.ttl / 10)).await;
        }
        self.log.write(self.id, key, start, fence);
        open.body.cancelled = false;
    }
}

/// Clears the in-body flag however the body ends.
pub(crate) struct InBody<'a>(&'a AtomicBool);

impl<'a> InBody<'a> {
    pub(crate) fn enter(flag: &'a AtomicBool) -> Self {
        flag.store(true, Ordering::SeqCst);
        InBody(flag)
    }
}

impl Drop for InBody<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// Records the body when it ends, normally or by being dropped (cancelled
/// by `with_lock` on loss).
struct Open<'a> {
    log: &'a Log,
    body: Body,
    lease: Option<LeaseHandle>,
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.body.end = clock::now();
        if let Some(lease) = &self.lease {
            self.body.deadline = clock::at(lease.deadline());
        }
        self.log.body(self.body.clone());
    }
}

impl CounterClient {
    /// The client's loop: increment the counter with `update` until `stop`.
    pub async fn run(self) {
        let built = loop {
            match build(&self.spec, self.op_bound / 4).await {
                Ok(b) => break b,
                Err(e) => {
                    self.log.error(format!("connect: {}", error_kind(&e)));
                    if clock::now() >= self.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    tokio::time::sleep(self.op_bound / 8).await;
                }
            }
        };
        let Some(store) = built.store else { return };
        let mut rng = fastrand::Rng::with_seed(self.seed);
        let opts = UpdateOptions::default().max_attempts(32);
        while clock::now() < self.stop.load(Ordering::SeqCst) {
            let inv = clock::now();
            let call = store.update_opts(&self.key, &opts, increment);
            let outcome = match tokio::time::timeout(self.op_bound, call).await {
                Ok(Ok(Some(v))) => match parse(Some(&v.value)) {
                    Some(n) => UpdateOutcome::Ok(n),
                    None => {
                        self.log.error("counter holds a non-number");
                        UpdateOutcome::Unknown
                    }
                },
                Ok(Ok(None)) => {
                    // `increment` declined: nothing was written.
                    self.log.error("counter holds a non-number");
                    UpdateOutcome::Failed
                }
                Ok(Err(e)) => {
                    self.log.error(format!("update: {}", error_kind(&e)));
                    if e.is_outcome_unknown() {
                        UpdateOutcome::Unknown
                    } else {
                        UpdateOutcome::Failed
                    }
                }
                Err(_) => {
                    self.log.error("update: call timed out");
                    UpdateOutcome::Unknown
                }
            };
            self.log.update(UpdateOp {
                inv,
                resp: clock::now(),
                outcome,
            });
            tokio::time::sleep(Duration::from_micros(rng.u64(0..20_000))).await;
        }
    }
}

/// The counter's value (absent: 0).
pub fn parse(value: Option<&[u8]>) -> Option<u64> {
    match value {
        None => Some(0),
        Some(b) => std::str::from_utf8(b).ok()?.parse().ok(),
    }
}

fn increment(old: Option<&[u8]>) -> Option<Vec<u8>> {
    // A non-number is left alone (the client reports the decline above).
    parse(old).map(|n| (n + 1).to_string().into_bytes())
}
