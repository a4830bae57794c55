//! Rows whose clients are OS processes: the torture binary re-executed as
//! `verrou-torture --client-process` ([`crate::child`]), one process per
//! client, each with its own runtime and connections. A child sends its
//! records as JSON lines on its stdout; a thread of this process per child
//! reads them into the row's one [`Log`] and answers the child's writes to
//! the fenced resource, which lives here (one resource for every process).
//! The checks are the thread rows' ([`check::measure`], [`run::judge`]).
//!
//! Faults:
//! - [`Fault::ProcessKilled`]: the process holding the hot key (a section
//!   whose lease was renewed at least once, if one comes within 4 × TTL) is
//!   killed with SIGKILL. Its unfinished section ends, for the checks, at
//!   its lease's local deadline as last reported (the child reports it when
//!   the section starts and every time a renewal moves it, read every 2 ms),
//!   and a dead process writes nothing more. The other clients must take
//!   the key again (after the lease expires on the server) within 20 × TTL
//!   of that deadline; nothing may hang.
//! - [`Fault::ProcessStopped`]: the process holding the hot key stops
//!   itself (SIGSTOP, raised inside that section when this process asks it
//!   to: see [`stop_holder`]) and this process resumes it (SIGCONT) 3 × TTL
//!   later; the resumed section writes at once, before anything else runs,
//!   as a program resuming from a pause would. Like the thread rows' stall:
//!   claimed safe with fencing.
//!
//! Children never outlive this process: each is spawned from the thread
//! that reads it (alive until the child is reaped) with `PR_SET_PDEATHSIG`
//! (SIGKILL); a child exits when its stdin closes; the row kills whatever
//! is left when it ends or fails.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write as _};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::BoxResult;
use crate::check;
use crate::child::{ChildSpec, Down, FLAG, Role, Up, WireBackend};
use crate::clock;
use crate::plan::{Backend, Claim, Fault, Scenario, Topology};
use crate::record::{Body, Log, Snapshot};
use crate::run::{self, Outcome, Params};

/// Whether a fault is a process row's (run by [`run()`], not the thread driver).
pub fn handles(fault: Fault) -> bool {
    matches!(fault, Fault::ProcessKilled | Fault::ProcessStopped)
}

fn row(backend: Backend, topology: Topology, fault: Fault, claim: Claim, why: &'static str) -> Scenario {
    Scenario {
        backend,
        topology,
        fault,
        claim,
        why,
    }
}

/// Both faults on one backend: the kill claimed safe; the stop claimed
/// safe with fencing, documented unsafe without fencing (Redlock).
fn both(backend: Backend, topology: Topology) -> Vec<Scenario> {
    let stop = if backend == Backend::Redlock {
        row(
            backend,
            topology,
            Fault::ProcessStopped,
            Claim::Unsafe,
            "Redlock issues no fencing token: a stopped holder's writes reach the resource",
        )
    } else {
        row(backend, topology, Fault::ProcessStopped, Claim::Fenced, "")
    };
    vec![row(backend, topology, Fault::ProcessKilled, Claim::Safe, ""), stop]
}

/// The full run's process rows: every backend the thread rows cover
/// except the in-process one, on one server (etcd: its 3-member cluster;
/// Redlock: its 5 servers).
pub fn rows() -> Vec<Scenario> {
    let mut plan = both(Backend::Lua, Topology::Single);
    plan.extend(both(Backend::Tair, Topology::Single));
    plan.extend(both(Backend::Postgres, Topology::Single));
    plan.extend(both(Backend::Etcd, Topology::Three));
    plan.extend(both(Backend::Nats, Topology::NatsR3));
    plan.extend(both(Backend::Redlock, Topology::Five));
    plan
}

/// The quick run's process rows: one per backend, both faults among them
/// (etcd's on request: [`quick_on_request`]).
pub fn quick_rows() -> Vec<Scenario> {
    vec![
        row(Backend::Lua, Topology::Single, Fault::ProcessKilled, Claim::Safe, ""),
        row(
            Backend::Tair,
            Topology::Single,
            Fault::ProcessStopped,
            Claim::Fenced,
            "",
        ),
        row(
            Backend::Postgres,
            Topology::Single,
            Fault::ProcessKilled,
            Claim::Safe,
            "",
        ),
        row(Backend::Redlock, Topology::Five, Fault::ProcessKilled, Claim::Safe, ""),
    ]
}

/// etcd's and NATS's process rows, for `--quick --only etcd` and
/// `--quick --only nats`.
pub fn quick_on_request() -> Vec<Scenario> {
    let mut plan = both(Backend::Etcd, Topology::Three);
    plan.extend(both(Backend::Nats, Topology::NatsR3));
    plan
}

/// How to start a client process.
#[derive(Debug, Clone)]
pub struct Launcher {
    exe: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl Launcher {
    /// This binary with [`FLAG`].
    ///
    /// # Errors
    /// The path of the running binary is unknown.
    pub fn this_binary() -> std::io::Result<Self> {
        Ok(Launcher {
            exe: std::env::current_exe()?,
            args: vec![FLAG.to_owned()],
            env: Vec::new(),
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A section a child reported open and has not ended.
#[derive(Debug, Clone, Copy)]
struct OpenSection {
    key: usize,
    start: i64,
    deadline: i64,
    fence: Option<u64>,
    /// Times a later deadline was reported (renewals).
    renewed: u32,
}

/// What the readers share with the driver.
#[derive(Debug)]
struct Shared {
    log: Arc<Log>,
    /// Open sections by client.
    open: Mutex<HashMap<usize, OpenSection>>,
    /// How long a stopped child stays stopped.
    stop_len: Duration,
    /// A child announced its stop.
    stopping: AtomicBool,
    /// The last answer to a withdrawal: (client, withdrawn).
    withdrawn: Mutex<Option<(usize, bool)>>,
}

/// One client process.
struct Proc {
    client: usize,
    pid: Pid,
    stdin: Arc<Mutex<Option<ChildStdin>>>,
    /// Set once the child has exited (before it is reaped): no signal may
    /// be sent to its pid after that.
    exited: Arc<Mutex<bool>>,
    killed: Arc<AtomicBool>,
    /// What the reader saw when the child's output ended.
    done: Option<oneshot::Receiver<Ended>>,
}

/// How a child's output ended.
#[derive(Debug, Clone, Copy, Default)]
struct Ended {
    /// The child reported its loop finished.
    finished: bool,
    /// The section it had open, closed at its last reported deadline.
    closed: Option<OpenSection>,
}

impl Proc {
    /// Send `sig` unless the child has exited.
    fn signal(&self, sig: Signal) -> bool {
        let exited = lock(&self.exited);
        !*exited && nix::sys::signal::kill(self.pid, sig).is_ok()
    }

    fn send(&self, down: &Down) {
        send(&self.stdin, down);
    }
}

fn send(stdin: &Mutex<Option<ChildStdin>>, down: &Down) {
    let Ok(line) = serde_json::to_string(down) else {
        return;
    };
    let mut guard = lock(stdin);
    if let Some(w) = guard.as_mut()
        && writeln!(w, "{line}").and_then(|()| w.flush()).is_err()
    {
        // The child is gone: later sends go nowhere.
        *guard = None;
    }
}

/// Every client process of a row; kills what is left when dropped.
struct Procs(Vec<Proc>);

impl Drop for Procs {
    fn drop(&mut self) {
        for p in &self.0 {
            p.signal(Signal::SIGKILL);
        }
    }
}

impl Procs {
    fn send_all(&self, down: &Down) {
        for p in &self.0 {
            p.send(down);
        }
    }
}

/// The process's state letter from `/proc/PID/stat` ('T': stopped).
fn proc_state(pid: Pid) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Start one client process; a thread reads its lines until it exits.
async fn spawn(launcher: &Launcher, spec: &ChildSpec, shared: Arc<Shared>) -> BoxResult<Proc> {
    let first = serde_json::to_string(spec)?;
    let client = spec.client;
    let mut cmd = Command::new(&launcher.exe);
    cmd.args(&launcher.args)
        .envs(launcher.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    die_with_parent(&mut cmd);
    let (ready_tx, ready_rx) = oneshot::channel::<std::io::Result<Pid>>();
    let (done_tx, done_rx) = oneshot::channel();
    let exited = Arc::new(Mutex::new(false));
    let stdin = Arc::new(Mutex::new(None));
    {
        let (exited, stdin) = (exited.clone(), stdin.clone());
        // The child is spawned from this thread, which lives until the
        // child is reaped: PR_SET_PDEATHSIG follows the spawning thread.
        std::thread::Builder::new()
            .name(format!("client-process-{client}"))
            .spawn(move || {
                let mut child = match cmd.spawn() {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let io = (child.stdin.take(), child.stdout.take());
                let (Some(mut input), Some(output)) = io else {
                    let _ = child.kill();
                    let _ = child.wait();
                    let _ = ready_tx.send(Err(std::io::Error::other("no pipes to the client process")));
                    return;
                };
                if let Err(e) = writeln!(input, "{first}").and_then(|()| input.flush()) {
                    let _ = child.kill();
                    let _ = child.wait();
                    let _ = ready_tx.send(Err(e));
                    return;
                }
                *lock(&stdin) = Some(input);
                let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
                let _ = ready_tx.send(Ok(pid));
                let _ = done_tx.send(read_child(client, pid, &mut child, output, &shared, &stdin, &exited));
            })?;
    }
    let pid = ready_rx.await.map_err(|_| "the client process reader thread ended")??;
    Ok(Proc {
        client,
        pid,
        stdin,
        exited,
        killed: Arc::new(AtomicBool::new(false)),
        done: Some(done_rx),
    })
}

/// The child gets SIGKILL when the thread that spawned it ends (with this
/// process at the latest).
fn die_with_parent(cmd: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        let parent = nix::unistd::getpid();
        // SAFETY: the closure runs in the forked child before exec and only
        // calls async-signal-safe functions (prctl, getppid).
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
                // The parent may have died between fork and prctl.
                if nix::unistd::getppid() != parent {
                    return Err(std::io::Error::other("parent process exited"));
                }
                Ok(())
            });
        }
    }
}

/// Read a child's lines into the row's log until its output ends, then
/// wait for it to exit (marking it exited before reaping it).
fn read_child(
    client: usize,
    pid: Pid,
    child: &mut Child,
    output: std::process::ChildStdout,
    shared: &Shared,
    stdin: &Mutex<Option<ChildStdin>>,
    exited: &Mutex<bool>,
) -> Ended {
    let log = &shared.log;
    let mut ended = Ended::default();
    for line in BufReader::new(output).lines() {
        let Ok(line) = line else { break };
        if !line.starts_with('{') {
            // Not ours (a test harness's banner when the child is a test binary).
            continue;
        }
        let up = match serde_json::from_str::<Up>(&line) {
            Ok(up) => up,
            Err(_) => {
                log.error(format!("client process {client}: unreadable line"));
                continue;
            }
        };
        match up {
            Up::Section {
                client: c,
                key,
                start,
                deadline,
                fence,
            } => {
                let mut open = lock(&shared.open);
                match open.get_mut(&c) {
                    Some(o) if o.start == start => {
                        if deadline > o.deadline {
                            o.renewed += 1;
                        }
                        o.deadline = deadline;
                    }
                    _ => {
                        open.insert(
                            c,
                            OpenSection {
                                key,
                                start,
                                deadline,
                                fence,
                                renewed: 0,
                            },
                        );
                    }
                }
            }
            Up::Write {
                client: c,
                key,
                body_start,
                fence,
            } => {
                let accepted = log.write(c, key, body_start, fence);
                send(stdin, &Down::Written { accepted });
            }
            Up::Body(b) => {
                let mut open = lock(&shared.open);
                if open.get(&b.client).is_some_and(|o| o.start == b.start) {
                    open.remove(&b.client);
                }
                drop(open);
                log.body(b);
            }
            Up::Update(op) => log.update(op),
            Up::Window(w) => log.window(w.from, w.to),
            Up::Lag(l) => log.lag(l),
            Up::Error { kind } => log.error(kind),
            Up::Stopping => resume_later(client, pid, shared, exited),
            Up::Withdrawn { withdrawn } => *lock(&shared.withdrawn) = Some((client, withdrawn)),
            Up::Done => ended.finished = true,
        }
    }
    // Exited (or about to): wait without reaping, mark, then reap, so that
    // no signal can reach a reused pid.
    for _ in 0..100 {
        let flags = nix::sys::wait::WaitPidFlag::WEXITED | nix::sys::wait::WaitPidFlag::WNOWAIT;
        match nix::sys::wait::waitid(nix::sys::wait::Id::Pid(pid), flags) {
            Err(nix::errno::Errno::EINTR) => continue,
            _ => break,
        }
    }
    *lock(exited) = true;
    let _ = child.wait();
    *lock(stdin) = None;
    // A section still open: the process died inside it (it can write no
    // more); for the checks it ends at its lease's last reported deadline.
    if let Some(o) = lock(&shared.open).remove(&client) {
        log.body(Body {
            client,
            key: o.key,
            start: o.start,
            end: o.deadline.max(o.start),
            deadline: o.deadline,
            fence: o.fence,
            cancelled: false,
            stalled: false,
        });
        ended.closed = Some(o);
    }
    ended
}

/// A child announced it stops itself: wait until it is stopped, keep it
/// stopped for the stall's length, resume it.
fn resume_later(client: usize, pid: Pid, shared: &Shared, exited: &Mutex<bool>) {
    shared.stopping.store(true, Ordering::SeqCst);
    let give_up = std::time::Instant::now() + Duration::from_secs(2);
    while proc_state(pid) != Some('T') && std::time::Instant::now() < give_up {
        std::thread::sleep(Duration::from_micros(200));
    }
    if proc_state(pid) != Some('T') {
        shared
            .log
            .error(format!("client process {client} did not stop within 2 s"));
    }
    std::thread::sleep(shared.stop_len);
    let exited = lock(exited);
    if !*exited && nix::sys::signal::kill(pid, Signal::SIGCONT).is_err() {
        shared.log.error(format!("SIGCONT to client process {client} failed"));
    }
}

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn us_i(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// Notes on the process rows for SAFETY.md (what was killed or stopped, and
/// when the others took the key again), in the order the rows ran.
static NOTES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The process rows' notes as a SAFETY.md section (empty when none ran).
pub fn markdown() -> String {
    let notes = lock(&NOTES);
    if notes.is_empty() {
        return String::new();
    }
    let mut md = String::from("\n## Client processes\n\n");
    md.push_str(
        "Rows whose fault starts with *client processes*: each client is its own OS process (the torture binary \
         re-executed with its own runtime and connections, running the same client loop as a thread client), \
         reporting its sections, its lease deadlines (when a section starts, and every time a renewal moves the \
         deadline: read every 2 ms), its writes and its counter operations as lines on a pipe to the torture \
         process, which holds the fenced resource (a write waits for its answer), keeps every record on one clock \
         (the OS monotonic clock, shared by the processes) and runs the same checks. *Killed*: the process holding \
         the hot key is sent SIGKILL inside its section (one whose lease was renewed at least once, when one comes \
         within 4 × TTL): its renewals stop, its sockets close with it; its section ends at its lease's last \
         reported local deadline, and the other clients must take the key within 20 × TTL of that deadline. \
         *Stopped*: the client holding the hot key stops its own process (SIGSTOP: every thread, its renewer and \
         loss timer too) inside that section, asked by the torture process (if the section ends first, the next \
         holder is asked), and the torture process resumes it (SIGCONT) 3 × TTL later; it then writes at once, as a \
         program resuming from a pause would. What each fault hit:\n\n",
    );
    for n in notes.iter() {
        let _ = writeln!(md, "- {n}");
    }
    md
}

/// Run one process row with this binary as the client processes.
///
/// # Errors
/// Setting up its servers or clients failed.
pub async fn run(sc: Scenario, idx: usize, seed: u64, p: &Params) -> BoxResult<Outcome> {
    run_with(&Launcher::this_binary()?, sc, idx, seed, p).await
}

/// Run one process row, starting the clients with `launcher`; its note
/// goes to SAFETY.md's *Client processes* section.
///
/// # Errors
/// Setting up its servers or clients failed.
pub async fn run_with(launcher: &Launcher, sc: Scenario, idx: usize, seed: u64, p: &Params) -> BoxResult<Outcome> {
    let (outcome, note) = run_row(launcher, sc, idx, seed, p).await?;
    let row = format!("{} · {} · {}", sc.backend.label(), sc.topology.label(), sc.fault);
    lock(&NOTES).push(format!("{row}: {note}"));
    Ok(outcome)
}

/// Run one process row: its outcome, and what the fault hit (the note).
async fn run_row(launcher: &Launcher, sc: Scenario, idx: usize, seed: u64, p: &Params) -> BoxResult<(Outcome, String)> {
    let scaled = p.for_backend(sc.backend);
    let p = &scaled;
    let log = Arc::new(Log::default());
    let has_store = matches!(
        sc.backend,
        Backend::Lua | Backend::Tair | Backend::Postgres | Backend::Etcd | Backend::Nats
    );
    let counters = if has_store { p.counter_clients } else { 0 };
    let clients = p.lock_clients + counters;
    let env = run::setup(&sc, clients, None).await?;
    let prefix = format!("verrou-torture:{seed:016x}:{idx}");
    let keys: Vec<String> = (0..p.keys).map(|k| format!("{prefix}:lock{k}")).collect();
    let counter = format!("{prefix}:counter");
    let base = clock::base_monotonic_ns()
        .and_then(|b| i64::try_from(b).ok())
        .ok_or("cannot read the OS monotonic clock")?;
    let parent = nix::unistd::getpid().as_raw();
    let shared = Arc::new(Shared {
        log: log.clone(),
        open: Mutex::new(HashMap::new()),
        stop_len: p.fault_len(),
        stopping: AtomicBool::new(false),
        withdrawn: Mutex::new(None),
    });
    let begin = Instant::now();
    let span_start = clock::at(begin);
    let planned_stop = begin + p.duration;
    let mut stop = Stop {
        at: clock::at(planned_stop),
        ttl: us_i(p.ttl),
    };
    let mut procs = Procs(Vec::with_capacity(clients));
    for i in 0..clients {
        let wire = WireBackend::from_spec(&env.spec(sc.backend, env.url(i), None))
            .ok_or("this backend cannot run in a client process")?;
        let (role, seed) = if i < p.lock_clients {
            let role = Role::Lock {
                keys: keys.clone(),
                ttl_us: us(p.ttl),
                acquire_timeout_us: us(p.ttl * 6),
                op_timeout_us: us(p.ttl / 2),
                stall: sc.fault == Fault::ProcessStopped,
            };
            (role, seed ^ (0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(i as u64 + 1)))
        } else {
            let role = Role::Counter {
                key: counter.clone(),
                op_bound_us: us(p.ttl * 4),
            };
            (role, seed ^ (0xbf58_476d_1ce4_e5b9_u64.wrapping_mul(i as u64 + 1)))
        };
        let spec = ChildSpec {
            clock_base_ns: base,
            parent,
            client: i,
            seed,
            stop: stop.at,
            long_until: clock::at(begin + p.fault_at + p.ttl * 2 + p.fault_len()),
            backend: wire,
            role,
        };
        procs.0.push(spawn(launcher, &spec, shared.clone()).await?);
    }
    tokio::time::sleep_until(begin + p.fault_at).await;
    let mut note = None;
    match sc.fault {
        Fault::ProcessKilled => note = kill_holder(&procs, &shared, p, &mut stop).await,
        Fault::ProcessStopped => {
            // The stop lands in the hot key's holder's section (asked while
            // it holds the key; if that section ends first the request is
            // withdrawn after 2 × TTL and the next holder asked), up to the
            // recovery bound past the planned end; a stop in progress is
            // waited for (it ends within its length).
            let withdraw_at = planned_stop + p.recovery_bound();
            stop_holder(&procs, &shared, p, &mut stop, withdraw_at).await;
            let give_up = withdraw_at + p.fault_len() * 2;
            while log.healed_at().is_none() && Instant::now() < give_up {
                if shared.stopping.load(Ordering::SeqCst) {
                    stop.keep_ahead(&procs);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        _ => return Err(format!("fault {} is not a process row's", sc.fault).into()),
    }
    // Run on for a while after the fault healed, so that recovery is seen.
    if let Some(healed) = log.healed_at() {
        stop.at_least(healed.saturating_add(us_i(p.ttl * 6)), &procs);
    }
    // Then on until the row has its critical sections (see
    // `Params::run_on_for_power`).
    let until = begin + p.max_duration;
    while log.bodies() < p.min_sections && Instant::now() < until {
        // In steps of 2 × TTL: few messages on the pipes.
        if stop.at < clock::now().saturating_add(us_i(p.ttl)) {
            stop.at_least(clock::now().saturating_add(us_i(p.ttl * 2)), &procs);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stop_at = begin + Duration::from_micros(u64::try_from(stop.at - span_start).unwrap_or(0));
    tokio::time::sleep_until(stop_at).await;
    let mut hangs = 0;
    let mut killed_ended = None;
    for proc in &mut procs.0 {
        let Some(done) = proc.done.take() else { continue };
        match tokio::time::timeout_at(stop_at + p.hang_bound, done).await {
            Ok(Ok(ended)) => {
                if proc.killed.load(Ordering::SeqCst) {
                    killed_ended = Some(ended);
                } else if !ended.finished {
                    log.error(format!(
                        "client process {} exited before its loop finished",
                        proc.client
                    ));
                }
            }
            Ok(Err(_)) => log.error(format!("client process {}: reader thread ended", proc.client)),
            Err(_) => {
                hangs += 1;
                proc.signal(Signal::SIGKILL);
            }
        }
    }
    let span_end = clock::now();
    let final_value = if has_store {
        let spec = env.spec(sc.backend, env.direct_url(), None);
        Some(run::read_counter(&spec, &counter, p.ttl, &log).await)
    } else {
        None
    };
    let snapshot = log.snapshot();
    let measured = check::measure(&snapshot, p.bounds(), true, final_value, hangs);
    let mut violations = run::judge(&sc, &measured);
    let text = match (sc.fault, note) {
        (Fault::ProcessKilled, Some(k)) => {
            let (text, late) = kill_note(&k, killed_ended, &snapshot.bodies, p);
            violations.extend(late);
            text
        }
        (Fault::ProcessStopped, _) => stop_note(&snapshot),
        _ => "no holder of the hot key to kill".to_owned(),
    };
    let outcome = Outcome {
        scenario: sc,
        seed,
        measured,
        violations,
        snapshot,
        span: (span_start, span_end),
    };
    Ok((outcome, text))
}

/// What the stop hit: where, how long, whether another client took the key
/// meanwhile, and what became of the writes after it.
fn stop_note(s: &Snapshot) -> String {
    let (Some(b), Some(w)) = (s.bodies.iter().find(|b| b.stalled), s.windows.first()) else {
        return "the stop was not injected (no holder of the hot key stopped)".to_owned();
    };
    let writes: Vec<_> = s
        .writes
        .iter()
        .filter(|x| x.client == b.client && x.body_start == b.start && x.at >= w.to)
        .collect();
    let rejected = writes.iter().filter(|x| !x.accepted).count();
    let taken = s
        .bodies
        .iter()
        .filter(|x| x.key == b.key && x.client != b.client && x.start > b.start && x.start < w.to)
        .map(|x| (x.start, x.client))
        .min();
    let taken = match taken {
        Some((start, client)) => format!(
            "client {client} took key {} {} into the stop",
            b.key,
            ms(start - w.from)
        ),
        None => format!(
            "no other client took key {} meanwhile (nothing it wrote was stale)",
            b.key
        ),
    };
    format!(
        "client {}'s process stopped {} into its section on key {} for {} (SIGSTOP to SIGCONT); its lease's local \
         deadline passed {} into the stop; {taken}; after resuming it wrote {} time(s), {rejected} rejected by the \
         fenced resource",
        b.client,
        ms(w.from - b.start),
        b.key,
        ms(w.to - w.from),
        ms(b.deadline - w.from),
        writes.len()
    )
}

fn ms(us: i64) -> String {
    format!("{:.0} ms", us as f64 / 1000.0)
}

/// The clients' stop time (run clock, µs), moved later while a fault is
/// under way and sent to every child when it moves (a few lines per TTL:
/// a stopped child's pipe never fills).
struct Stop {
    at: i64,
    ttl: i64,
}

impl Stop {
    /// Keep the stop at least a TTL ahead of now (moved two TTLs at a time).
    fn keep_ahead(&mut self, procs: &Procs) {
        let now = clock::now();
        if self.at < now.saturating_add(self.ttl) {
            self.at_least(now.saturating_add(self.ttl.saturating_mul(2)), procs);
        }
    }

    /// Move the stop to `at` if that is later.
    fn at_least(&mut self, at: i64, procs: &Procs) {
        if at > self.at {
            self.at = at;
            procs.send_all(&Down::Stop { at });
        }
    }
}

/// What the kill hit.
#[derive(Debug, Clone, Copy)]
struct Killed {
    client: usize,
    at: i64,
    section: OpenSection,
}

/// Kill a process holding the hot key: preferably one whose lease was
/// renewed (its renewals stop mid-lease), else any holder of key 0, else
/// any holder; gives up after 10 × TTL (the fault is then missing). The
/// clients run on meanwhile.
async fn kill_holder(procs: &Procs, shared: &Shared, p: &Params, stop: &mut Stop) -> Option<Killed> {
    let t0 = Instant::now();
    let (prefer_renewed, prefer_hot, give_up) = (t0 + p.ttl * 4, t0 + p.ttl * 8, t0 + p.ttl * 10);
    let lock_clients = p.lock_clients;
    loop {
        let now = Instant::now();
        let pick = {
            let open = lock(&shared.open);
            let mut held: Vec<(usize, OpenSection)> = open
                .iter()
                .filter(|(c, _)| **c < lock_clients)
                .map(|(c, o)| (*c, *o))
                .collect();
            held.sort_by_key(|(c, o)| (o.key != 0, o.renewed == 0, *c));
            held.into_iter()
                .find(|(_, o)| (o.key == 0 && (o.renewed > 0 || now >= prefer_renewed)) || now >= prefer_hot)
        };
        if let Some((client, section)) = pick
            && let Some(proc) = procs.0.iter().find(|x| x.client == client)
        {
            proc.killed.store(true, Ordering::SeqCst);
            let at = clock::now();
            if proc.signal(Signal::SIGKILL) {
                shared.log.window(at, at);
                return Some(Killed { client, at, section });
            }
            proc.killed.store(false, Ordering::SeqCst);
        }
        if now >= give_up {
            return None;
        }
        stop.keep_ahead(procs);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Ask the hot key's holder to stop its process, until one does (or
/// `until`): a holder that has not stopped within 2 × TTL (its section ended
/// first) is withdrawn, and the next holder asked. The clients run on
/// meanwhile.
async fn stop_holder(procs: &Procs, shared: &Shared, p: &Params, stop: &mut Stop, until: Instant) {
    let stopping = || shared.stopping.load(Ordering::SeqCst);
    while !stopping() && Instant::now() < until {
        let holder = lock(&shared.open)
            .iter()
            .find(|(c, o)| **c < p.lock_clients && o.key == 0)
            .map(|(c, _)| *c);
        let Some(proc) = holder.and_then(|c| procs.0.iter().find(|x| x.client == c)) else {
            stop.keep_ahead(procs);
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        };
        *lock(&shared.withdrawn) = None;
        proc.send(&Down::Stall);
        let asked = Instant::now();
        while !stopping() && Instant::now() < asked + p.ttl * 2 {
            stop.keep_ahead(procs);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        if stopping() {
            return;
        }
        proc.send(&Down::Withdraw);
        let asked = Instant::now();
        let answer = loop {
            let answer = *lock(&shared.withdrawn);
            match answer {
                Some((c, withdrawn)) if c == proc.client => break Some(withdrawn),
                _ if Instant::now() >= asked + p.ttl * 5 => break None,
                _ => {}
            }
            stop.keep_ahead(procs);
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        if answer != Some(true) {
            // Started after all (its stop is announced), or no answer (its
            // process is gone or stuck): ask no one else.
            return;
        }
    }
}

/// The kill's note, and its violation: no other client took the killed
/// section's key within 20 × TTL of its deadline.
fn kill_note(k: &Killed, ended: Option<Ended>, bodies: &[Body], p: &Params) -> (String, Option<String>) {
    let s = &k.section;
    let closed = ended.and_then(|e| e.closed);
    let mut text = format!(
        "killed client {}'s process {} into its section on key {} (lease renewed {}×); ",
        k.client,
        ms(k.at - s.start),
        s.key,
        s.renewed
    );
    let deadline = match closed {
        Some(c) => {
            let _ = write!(
                text,
                "its section closed at its lease's local deadline, {} after the kill",
                ms(c.deadline - k.at)
            );
            c.deadline
        }
        None => {
            text.push_str("its section had ended just before the kill landed");
            k.at
        }
    };
    let next = bodies
        .iter()
        .filter(|b| b.key == s.key && b.client != k.client && b.start >= k.at)
        .map(|b| (b.start, b.client))
        .min();
    let bound = us_i(p.recovery_bound());
    match next {
        Some((start, client)) => {
            let _ = write!(
                text,
                "; key {} next taken by client {client} {} after the kill ({} after that deadline)",
                s.key,
                ms(start - k.at),
                ms(start - deadline)
            );
            let late = (start - deadline > bound).then(|| {
                format!(
                    "key {} was taken again only {} after the killed holder's deadline",
                    s.key,
                    ms(start - deadline)
                )
            });
            (text, late)
        }
        None => {
            let _ = write!(text, "; key {} was not taken again", s.key);
            (
                text,
                Some(format!(
                    "no other client took key {} after its holder was killed",
                    s.key
                )),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Makes the test binary a client process (see [`launcher`]).
    const CHILD_ENV: &str = "VERROU_TORTURE_CLIENT_PROCESS";

    /// The test binary re-executed to run only [`client_process`], which
    /// becomes the client process when [`CHILD_ENV`] is set.
    fn launcher() -> Launcher {
        Launcher {
            exe: std::env::current_exe().expect("test binary path"),
            args: [
                "--exact",
                "process::tests::client_process",
                "--nocapture",
                "--test-threads=1",
            ]
            .map(str::to_owned)
            .to_vec(),
            env: vec![(CHILD_ENV.to_owned(), "1".to_owned())],
        }
    }

    #[test]
    fn client_process() {
        if std::env::var_os(CHILD_ENV).is_some() {
            std::process::exit(i32::from(crate::child::exit_code()));
        }
    }

    fn outcome(fault: Fault) -> Outcome {
        Outcome {
            scenario: row(Backend::Lua, Topology::Single, fault, Claim::Safe, ""),
            seed: 0,
            measured: check::Measured::default(),
            violations: Vec::new(),
            snapshot: Snapshot::default(),
            span: (0, 0),
        }
    }

    #[test]
    fn safety_md_says_where_the_clients_run() {
        let p = Params::quick();
        let threads = crate::report::markdown(&[outcome(Fault::Pause)], &p, 1, "cmd", &[]);
        assert!(threads.contains("all in the torture process, contend"), "{threads}");
        assert!(!threads.contains("client process"), "{threads}");
        let both = [outcome(Fault::Pause), outcome(Fault::ProcessKilled)];
        let md = crate::report::markdown(&both, &p, 1, "cmd", &[]);
        assert!(md.contains("each client is instead its own OS process"), "{md}");
        assert!(md.contains("A client process killed inside its section"), "{md}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn killing_the_holder_process_keeps_exclusion_and_the_others_take_the_key() {
        clock::init();
        let sc = row(Backend::Lua, Topology::Single, Fault::ProcessKilled, Claim::Safe, "");
        let (o, note) = run_row(&launcher(), sc, 0, 7, &Params::quick()).await.expect("row ran");
        assert!(o.violations.is_empty(), "violations: {:?}; {note}", o.violations);
        assert_eq!(o.measured.overlaps, 0);
        assert_eq!(o.measured.hangs, 0);
        assert!(o.measured.acquisitions > 0);
        assert_eq!(o.snapshot.windows.len(), 1, "the kill was injected");
        // One clock: the run's process decides each write after the child
        // started the section it belongs to.
        assert!(o.snapshot.writes.iter().all(|w| w.at >= w.body_start));
        assert!(o.snapshot.bodies.iter().any(|b| b.client != 0) && o.snapshot.updates.len() > 10);
        assert!(note.contains("killed client"), "{note}");
        assert!(note.contains("next taken by client"), "{note}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stopped_holder_process_is_resumed_and_fencing_holds() {
        clock::init();
        let sc = row(Backend::Lua, Topology::Single, Fault::ProcessStopped, Claim::Fenced, "");
        let (o, note) = run_row(&launcher(), sc, 1, 11, &Params::quick())
            .await
            .expect("row ran");
        assert!(o.violations.is_empty(), "violations: {:?}; {note}", o.violations);
        assert_eq!((o.measured.stale_accepted, o.measured.hangs), (0, 0));
        assert!(
            o.snapshot.bodies.iter().any(|b| b.stalled),
            "the stop was injected: {note}"
        );
        assert!(note.contains("(SIGSTOP to SIGCONT)"), "{note}");
    }
}
