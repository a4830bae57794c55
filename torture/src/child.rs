//! A client process: the torture binary re-executed as `verrou-torture
//! --client-process` by the process rows (`crate::process`). It reads what
//! to run from the first line of its stdin (a [`ChildSpec`], JSON), runs the
//! same client loop as a client thread ([`LockClient::run`] or
//! [`CounterClient::run`]) on its own current-thread runtime with its own
//! connections, and sends every record to its parent as one JSON line on
//! stdout ([`Up`]). The fenced resource is the parent's: a write is a
//! request on stdout answered on stdin ([`Down::Written`]), so every client
//! process writes to the one resource. The parent also moves the stop time
//! and asks for the stall on stdin.
//!
//! The records are on the parent's clock: the child starts its
//! [`crate::clock`] at the parent's base on the OS monotonic clock.
//!
//! The child dies with its parent: the parent spawns it with
//! `PR_SET_PDEATHSIG` (SIGKILL), and it exits when its stdin closes.

use std::io::{BufRead, BufReader, Write as _};
use std::process::ExitCode;
use std::sync::atomic::AtomicI64;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use lock_core::{LeaseHandle, LockOptions};
use serde::{Deserialize, Serialize};

use crate::BoxResult;
use crate::backends::Spec;
use crate::client::{CounterClient, LockClient, Stall};
use crate::clock;
use crate::record::{Body, Forward, Lag, Log, UpdateOp, Window};

/// The hidden command-line flag that makes the binary a client process.
pub const FLAG: &str = "--client-process";

/// How long a write waits for the parent's answer before it counts as
/// refused (the parent answers at once; only a dead parent takes longer).
const WRITE_ANSWER: Duration = Duration::from_secs(5);

/// How often a section's lease deadline is read for the parent (a renewal
/// moves it; the parent ends a killed holder's section there).
const WATCH_PERIOD: Duration = Duration::from_millis(2);

/// The backend a client process builds (no in-process or namespace specs).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum WireBackend {
    /// Lua scripts on Redis, fencing on.
    Lua {
        /// Server (or proxy) URL.
        url: String,
    },
    /// Tair commands, fencing on.
    Tair {
        /// Server (or proxy) URL.
        url: String,
    },
    /// Redlock over Lua nodes.
    Redlock {
        /// One URL per node.
        urls: Vec<String>,
    },
    /// PostgreSQL.
    Postgres {
        /// Server (or proxy) URL.
        url: String,
        /// The advisory mode for locks.
        advisory: bool,
    },
    /// etcd members, comma-separated.
    Etcd {
        /// Endpoints.
        endpoints: String,
    },
    /// A NATS URL.
    Nats {
        /// URL.
        url: String,
    },
}

impl WireBackend {
    /// The wire form of a thread client's spec; `None` for what a process
    /// cannot build (the in-process backend, namespace hosts, replica
    /// acknowledgement: no process row uses them).
    pub fn from_spec(spec: &Spec) -> Option<Self> {
        Some(match spec {
            Spec::Lua { url, ack: None } => WireBackend::Lua { url: url.clone() },
            Spec::Tair { url, ack: None } => WireBackend::Tair { url: url.clone() },
            Spec::Redlock { urls } => WireBackend::Redlock { urls: urls.clone() },
            Spec::Postgres { url, advisory } => WireBackend::Postgres {
                url: url.clone(),
                advisory: *advisory,
            },
            Spec::Etcd { endpoints } => WireBackend::Etcd {
                endpoints: endpoints.clone(),
            },
            Spec::Nats { url } => WireBackend::Nats { url: url.clone() },
            Spec::Lua { .. } | Spec::Tair { .. } | Spec::Memory(_) | Spec::Net(_) => return None,
        })
    }

    fn spec(&self) -> Spec {
        match self {
            WireBackend::Lua { url } => Spec::Lua {
                url: url.clone(),
                ack: None,
            },
            WireBackend::Tair { url } => Spec::Tair {
                url: url.clone(),
                ack: None,
            },
            WireBackend::Redlock { urls } => Spec::Redlock { urls: urls.clone() },
            WireBackend::Postgres { url, advisory } => Spec::Postgres {
                url: url.clone(),
                advisory: *advisory,
            },
            WireBackend::Etcd { endpoints } => Spec::Etcd {
                endpoints: endpoints.clone(),
            },
            WireBackend::Nats { url } => Spec::Nats { url: url.clone() },
        }
    }
}

/// What a client process runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Role {
    /// A lock client ([`LockClient`]).
    Lock {
        /// Contended keys.
        keys: Vec<String>,
        /// Lock TTL, µs.
        ttl_us: u64,
        /// Acquire timeout, µs.
        acquire_timeout_us: u64,
        /// Per-operation timeout, µs.
        op_timeout_us: u64,
        /// This client stops its own process inside its section when the
        /// parent asks ([`Down::Stall`]; in its next one if none is open);
        /// the parent resumes it.
        stall: bool,
    },
    /// A counter client ([`CounterClient`]).
    Counter {
        /// The counter's key.
        key: String,
        /// Bound on one `update`, µs.
        op_bound_us: u64,
    },
}

/// The first line of a client process's stdin.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChildSpec {
    /// The parent's run clock start on the OS monotonic clock, ns.
    pub clock_base_ns: i64,
    /// The parent's pid (the child exits if it has another parent).
    pub parent: i32,
    /// Client index (also the row in the timeline).
    pub client: usize,
    /// Seed of the client's random choices.
    pub seed: u64,
    /// Stop time (run clock, µs; moved later by [`Down::Stop`]).
    pub stop: i64,
    /// Until then (run clock, µs) client 0 keeps long holds (see
    /// `LockClient::long_until`).
    #[serde(default)]
    pub long_until: i64,
    /// How to reach the backend.
    pub backend: WireBackend,
    /// Lock or counter client.
    pub role: Role,
}

/// A line from a client process to its parent.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "t")]
pub enum Up {
    /// A section is open with this local deadline (sent when it starts and
    /// whenever a renewal or a loss moves the deadline).
    Section {
        /// Client index.
        client: usize,
        /// Key index.
        key: usize,
        /// The body's start.
        start: i64,
        /// The lease's local deadline now.
        deadline: i64,
        /// The grant's fencing token.
        fence: Option<u64>,
    },
    /// A write to the fenced resource (answered with [`Down::Written`]).
    Write {
        /// Client index.
        client: usize,
        /// Key index.
        key: usize,
        /// Start of the writer's body.
        body_start: i64,
        /// The fencing token presented.
        fence: Option<u64>,
    },
    /// A finished or cancelled body.
    Body(Body),
    /// An `update`.
    Update(UpdateOp),
    /// A fault window (the stop, as the child saw it).
    Window(Window),
    /// A late probe wake-up.
    Lag(Lag),
    /// An error, by kind.
    Error {
        /// Its kind.
        kind: String,
    },
    /// The child is about to stop itself (SIGSTOP) inside a section; the
    /// parent resumes it (SIGCONT) after the stall's length.
    Stopping,
    /// The answer to [`Down::Withdraw`].
    Withdrawn {
        /// True: the request was withdrawn before it started; false: the
        /// stall is running or done (or none was requested).
        withdrawn: bool,
    },
    /// The client's loop finished.
    Done,
}

/// A line from the parent to a client process.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "t")]
pub enum Down {
    /// Stop starting bodies after this (run clock, µs).
    Stop {
        /// The new stop time.
        at: i64,
    },
    /// Perform the stall in the next section.
    Stall,
    /// Withdraw a stall request not yet started.
    Withdraw,
    /// The answer to the oldest unanswered [`Up::Write`].
    Written {
        /// Whether the resource took the write.
        accepted: bool,
    },
}

/// The child's line to its parent, and the parent's answers to its writes.
#[derive(Debug)]
pub(crate) struct Sink {
    answers: Mutex<mpsc::Receiver<bool>>,
}

static SINK: OnceLock<Arc<Sink>> = OnceLock::new();

impl Sink {
    /// Send one line; a parent that stopped reading is gone: exit.
    fn send(&self, up: &Up) {
        let Ok(line) = serde_json::to_string(up) else {
            return;
        };
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            std::process::exit(3);
        }
    }
}

impl Forward for Sink {
    fn body(&self, b: &Body) {
        self.send(&Up::Body(b.clone()));
    }

    fn write(&self, client: usize, key: usize, body_start: i64, fence: Option<u64>) -> bool {
        let answers = match self.answers.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        self.send(&Up::Write {
            client,
            key,
            body_start,
            fence,
        });
        answers.recv_timeout(WRITE_ANSWER).unwrap_or(false)
    }

    fn update(&self, op: &UpdateOp) {
        self.send(&Up::Update(*op));
    }

    fn window(&self, from: i64, to: i64) {
        self.send(&Up::Window(Window { from, to }));
    }

    fn lag(&self, l: &Lag) {
        self.send(&Up::Lag(*l));
    }

    fn error(&self, kind: &str) {
        self.send(&Up::Error { kind: kind.to_owned() });
    }
}

/// Reports a section's lease deadline to the parent while the section
/// runs (in a client process only; elsewhere it does nothing). The first
/// report goes out before the section's first write, so the parent knows
/// the section is open before anything else of it.
pub struct DeadlineWatch(Option<tokio::task::JoinHandle<()>>);

impl DeadlineWatch {
    /// Start watching `lease` (none: control mode, nothing to watch).
    pub fn start(client: usize, key: usize, start: i64, lease: Option<&LeaseHandle>) -> Self {
        let (Some(sink), Some(lease)) = (SINK.get(), lease) else {
            return DeadlineWatch(None);
        };
        let fence = lease.fencing_token().map(|f| f.0);
        let section = move |deadline| Up::Section {
            client,
            key,
            start,
            deadline,
            fence,
        };
        let mut last = clock::at(lease.deadline());
        sink.send(&section(last));
        let (sink, lease) = (sink.clone(), lease.clone());
        // Ends when the section ends (the guard aborts it).
        DeadlineWatch(Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(WATCH_PERIOD).await;
                let now = clock::at(lease.deadline());
                if now != last {
                    last = now;
                    sink.send(&section(now));
                }
            }
        })))
    }
}

impl Drop for DeadlineWatch {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

/// The stall of a client process: tell the parent, stop the whole process
/// (every thread, the runtime's timers and renewer included); the parent
/// sends SIGCONT after the stall's length (`_duration` is the parent's to
/// keep). Returns when resumed.
fn stop_self(_duration: Duration) {
    if let Some(sink) = SINK.get() {
        sink.send(&Up::Stopping);
    }
    if nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP).is_err() {
        // Could not stop: the stall did not happen; the window recorded
        // after this shows how long it (did not) last.
        eprintln!("verrou-torture client process: SIGSTOP failed");
    }
}

/// The client process's `main`.
pub fn main() -> ExitCode {
    ExitCode::from(exit_code())
}

/// Run the client process; its exit status (0, or 2 when it could not start).
pub fn exit_code() -> u8 {
    match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("verrou-torture client process: {e}");
            2
        }
    }
}

fn run() -> BoxResult<()> {
    let mut input = BufReader::new(std::io::stdin());
    let mut first = String::new();
    input.read_line(&mut first)?;
    let spec: ChildSpec = serde_json::from_str(&first)?;
    if nix::unistd::getppid().as_raw() != spec.parent {
        return Err("the parent process is gone".into());
    }
    if !clock::init_at(i128::from(spec.clock_base_ns)) {
        return Err("cannot start the clock at the parent's base".into());
    }
    let (answer_tx, answer_rx) = mpsc::channel();
    let sink = Arc::new(Sink {
        answers: Mutex::new(answer_rx),
    });
    SINK.set(sink.clone()).map_err(|_| "client process started twice")?;
    // Start on a fresh line (a test harness re-executed as the client
    // process has printed half a line of its own).
    {
        let mut out = std::io::stdout().lock();
        writeln!(out).and_then(|()| out.flush())?;
    }
    let stop = Arc::new(AtomicI64::new(spec.stop));
    let stall = match &spec.role {
        Role::Lock {
            stall: true, ttl_us, ..
        } => Some(Stall::with_pause(
            Duration::from_micros(ttl_us.saturating_mul(3)),
            stop_self,
        )),
        _ => None,
    };
    {
        let (stop, stall) = (stop.clone(), stall.clone());
        std::thread::Builder::new()
            .name("parent-reader".into())
            .spawn(move || read_parent(input, &stop, stall.as_deref(), &answer_tx))?;
    }
    let log = Arc::new(Log::forwarding(sink.clone()));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let backend = spec.backend.spec();
    match spec.role {
        Role::Lock {
            keys,
            ttl_us,
            acquire_timeout_us,
            op_timeout_us,
            ..
        } => {
            let options = LockOptions::with_ttl(Duration::from_micros(ttl_us))
                .acquire_timeout(Duration::from_micros(acquire_timeout_us))
                .op_timeout(Duration::from_micros(op_timeout_us));
            let c = LockClient {
                id: spec.client,
                spec: backend,
                keys: Arc::new(keys),
                options,
                seed: spec.seed,
                stop,
                stall,
                control: false,
                in_body: Arc::default(),
                long_until: spec.long_until,
                log,
            };
            rt.block_on(c.run());
        }
        Role::Counter { key, op_bound_us } => {
            let c = CounterClient {
                spec: backend,
                key,
                op_bound: Duration::from_micros(op_bound_us),
                seed: spec.seed,
                stop,
                log,
            };
            rt.block_on(c.run());
        }
    }
    sink.send(&Up::Done);
    Ok(())
}

/// The parent's lines: stop times, stall requests, write answers. The
/// parent closing stdin (it exited) ends the process.
fn read_parent(
    input: BufReader<std::io::Stdin>,
    stop: &AtomicI64,
    stall: Option<&Stall>,
    answers: &mpsc::Sender<bool>,
) {
    for line in input.lines() {
        let Ok(line) = line else { break };
        match serde_json::from_str::<Down>(&line) {
            Ok(Down::Stop { at }) => stop.store(at, std::sync::atomic::Ordering::SeqCst),
            Ok(Down::Stall) => {
                if let Some(s) = stall {
                    s.request();
                }
            }
            Ok(Down::Withdraw) => {
                let withdrawn = stall.is_some_and(Stall::withdraw);
                if let Some(sink) = SINK.get() {
                    sink.send(&Up::Withdrawn { withdrawn });
                }
            }
            Ok(Down::Written { accepted }) => {
                let _ = answers.send(accepted);
            }
            Err(e) => eprintln!("verrou-torture client process: unreadable line from the parent: {e}"),
        }
    }
    std::process::exit(3);
}
