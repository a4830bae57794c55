//! Running a program under a lease (a lock, a semaphore permit, a
//! leadership): spawn it, forward signals, and stop it so that it has ended
//! by the lease's local deadline.
//!
//! The kill sequence: SIGTERM goes out `grace` before the local deadline,
//! SIGKILL at it. In normal operation renewals keep moving the deadline
//! ahead of the SIGTERM point (they are sent every third of `ttl - drift -
//! grace`, see [`Plan`]), so the sequence starts only once renewals have
//! been failing long enough, or at once when the lease is lost (another
//! owner found: the deadline becomes the loss time). Signals go to the
//! program's process group, so its children stop with it.

use std::ffi::OsString;
use std::future::Future;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::terminal::Terminal;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;
use verrou::KindGuard;
use verrou::ReleaseOutcome;
use verrou::{Error, LeaseHandle, LockGuard, LockOptions, Renewal};

use crate::exit::{BUSY, CANNOT_EXECUTE, CONFIG, Failure, LOST, NOT_FOUND, SOFTWARE};

/// "Wait as long as it takes": a year, the longest lease verrou accepts.
pub const FOREVER: Duration = LockOptions::MAX_TTL;

/// The lease's timing for one run: its options, and the SIGTERM-to-deadline
/// grace.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The manager's options: the TTL, renewals every third of the time
    /// before the SIGTERM point, the acquire timeout.
    pub options: LockOptions,
    /// SIGTERM goes out this long before the local deadline.
    pub grace: Duration,
}

impl Plan {
    /// The plan for `ttl`, `--kill-grace` (default: a third of the TTL) and
    /// the acquire wait (`--no-wait`: zero; default: as long as it takes).
    ///
    /// # Errors
    /// A [`CONFIG`] failure for a grace that leaves too little of the TTL
    /// for renewals (a grace at or above the TTL in particular).
    pub fn new(ttl: Duration, grace: Option<Duration>, wait: Option<Duration>, no_wait: bool) -> Result<Plan, Failure> {
        let mut options = LockOptions::with_ttl(ttl);
        options.validate()?;
        let grace = grace.unwrap_or(ttl / 3);
        let drift = options.drift(ttl);
        let shown = |d: Duration| humantime::format_duration(d).to_string();
        if grace >= ttl {
            return Err(Failure::new(
                CONFIG,
                format!(
                    "--kill-grace {} must be shorter than --ttl {}: the program gets SIGTERM that long before \
                     the lease's deadline and SIGKILL at it (default: a third of the TTL)",
                    shown(grace),
                    shown(ttl)
                ),
            ));
        }
        // What is left for renewals after a renewal is sent: the SIGTERM
        // point comes this long after it if no later renewal succeeds.
        let window = ttl.saturating_sub(drift).saturating_sub(grace);
        if window < ttl / 10 {
            let most = ttl.saturating_sub(drift).saturating_sub(ttl / 10);
            return Err(Failure::new(
                CONFIG,
                format!(
                    "--kill-grace {} leaves too little of --ttl {} for renewals: keep it at most {}",
                    shown(grace),
                    shown(ttl),
                    shown(round_ms(most))
                ),
            ));
        }
        let interval = (window / 3).min(ttl / 3);
        options = options.renewal(Renewal::Auto { interval });
        let wait = if no_wait {
            Duration::ZERO
        } else {
            wait.unwrap_or(FOREVER)
        };
        Ok(Plan {
            options: options.acquire_timeout(wait),
            grace,
        })
    }
}

impl Plan {
    /// The same plan, holding the lease at least `min_hold` (`--hold-at-least`).
    #[must_use]
    pub fn min_hold(mut self, min_hold: Option<Duration>) -> Plan {
        self.options = self.options.min_hold(min_hold.unwrap_or_default());
        self
    }
}

/// Durations shown to a human, to the millisecond.
pub fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The signals forwarded to the program.
pub struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Start listening (before acquiring: a Ctrl-C while waiting must not
    /// leave a lease behind; dropping the acquire hands any grant back).
    pub fn install() -> Result<Self, Failure> {
        let listen = |kind| signal(kind).map_err(|e| Failure::new(SOFTWARE, format!("cannot listen for signals: {e}")));
        Ok(Signals {
            interrupt: listen(SignalKind::interrupt())?,
            terminate: listen(SignalKind::terminate())?,
            hangup: listen(SignalKind::hangup())?,
        })
    }

    /// The next signal received.
    async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
        }
    }

    /// Await `acquire`, or give up on a signal (`Ok(Err(128 + N))`, like a
    /// shell). `Ok(None)` and [`Error::Timeout`] mean busy (`busy` says how).
    ///
    /// # Errors
    /// A [`BUSY`] failure, or the acquire's error.
    pub async fn acquire<G>(
        &mut self,
        busy: &str,
        acquire: impl Future<Output = verrou::Result<Option<G>>>,
    ) -> Result<Result<G, u8>, Failure> {
        tokio::select! {
            acquired = acquire => match acquired {
                Ok(Some(guard)) => Ok(Ok(guard)),
                Ok(None) | Err(Error::Timeout { .. }) => Err(Failure::new(BUSY, busy)),
                Err(e) => Err(e.into()),
            },
            sig = self.next() => Ok(Err(128 + sig as u8)),
        }
    }
}

/// A held lease the program runs under: a [`LockGuard`] or a kind's guard.
pub trait Held: Send + Sized {
    /// A view of the lease.
    fn lease(&self) -> LeaseHandle;
    /// Release it (owner-checked).
    fn give_back(self) -> impl Future<Output = verrou::Result<ReleaseOutcome>> + Send;
}

impl Held for LockGuard {
    fn lease(&self) -> LeaseHandle {
        self.handle()
    }
    fn give_back(self) -> impl Future<Output = verrou::Result<ReleaseOutcome>> + Send {
        self.release()
    }
}

impl<K: Send + Sync + 'static> Held for KindGuard<K> {
    fn lease(&self) -> LeaseHandle {
        self.handle()
    }
    fn give_back(self) -> impl Future<Output = verrou::Result<ReleaseOutcome>> + Send {
        self.release()
    }
}

/// Run `program` under `held` (`what` names the lease in messages), then
/// release it; the exit code: the program's, or [`LOST`] when it was
/// stopped because of the lease.
///
/// # Errors
/// The program could not be run ([`NOT_FOUND`], [`CANNOT_EXECUTE`]) or
/// waited for.
pub async fn run_program<G: Held>(
    held: G,
    mut signals: Signals,
    what: &str,
    program: &[OsString],
    grace: Duration,
) -> Result<u8, Failure> {
    let lease = held.lease();
    // Orphans of the program's group become our children (not init's), so
    // that we can reap them and see the group empty.
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        eprintln!("verrou: cannot become the subreaper of the program's processes ({e})");
    }
    let terminal = Terminal::foreground();
    let child = match spawn(&lease, program, terminal.as_ref()) {
        Ok(child) => child,
        Err(failure) => {
            release(held, what).await;
            return Err(failure);
        }
    };
    let group = child.id().and_then(|id| i32::try_from(id).ok()).map(Pid::from_raw);
    if let (Some(terminal), Some(group)) = (&terminal, group) {
        terminal.give_to(group);
    }
    let (status, stopped) = supervise(child, group, &lease, &mut signals, what, grace, terminal.as_ref()).await;
    if let Some(terminal) = &terminal {
        terminal.take_back();
    }
    let status = status.map_err(|e| Failure::new(SOFTWARE, format!("cannot wait for the program: {e}")))?;
    if stopped {
        // It may still hold (renewals came back after SIGTERM): let the
        // next holder in now rather than at the TTL. Failing is expected
        // (the server is why the program was stopped): the TTL frees it.
        let _ = held.give_back().await;
        return Ok(LOST);
    }
    match held.give_back().await {
        Ok(ReleaseOutcome::Released) => Ok(code(status)),
        Ok(_) => {
            eprintln!("verrou: {what} was no longer held when the program exited (expired or taken over)");
            Ok(LOST)
        }
        Err(e) => {
            // The program ran under the lease; only the release failed, and
            // the TTL frees it.
            eprintln!("verrou: release of {what} failed ({e}); it expires after its TTL");
            Ok(code(status))
        }
    }
}

fn spawn(lease: &LeaseHandle, program: &[OsString], terminal: Option<&Terminal>) -> Result<Child, Failure> {
    let (name, rest) = program
        .split_first()
        .ok_or_else(|| Failure::new(CONFIG, "no PROGRAM after --"))?;
    let mut command = Command::new(name);
    // Its own process group: the kill sequence reaches its children too.
    command.args(rest).env("VERROU_KEY", lease.key()).process_group(0);
    #[cfg(target_os = "linux")]
    die_with_verrou(&mut command);
    if let Some(terminal) = terminal {
        // Also from the child, before it runs anything: it must not read
        // the terminal before the parent hands it over.
        terminal.take_in_child(&mut command);
    }
    match lease.fencing_token() {
        Some(token) => command.env("VERROU_FENCING_TOKEN", token.0.to_string()),
        None => command.env_remove("VERROU_FENCING_TOKEN"),
    };
    command.spawn().map_err(|e| {
        let shown = name.to_string_lossy();
        match e.kind() {
            std::io::ErrorKind::NotFound => Failure::new(NOT_FOUND, format!("{shown}: program not found")),
            std::io::ErrorKind::PermissionDenied => {
                Failure::new(CANNOT_EXECUTE, format!("{shown}: cannot execute: {e}"))
            }
            _ => Failure::new(CANNOT_EXECUTE, format!("{shown}: cannot start: {e}")),
        }
    })
}

/// Linux: the kernel sends the program SIGKILL when verrou dies (`kill -9`,
/// the OOM killer), so that only a *stopped* verrou can leave it running.
/// The signal fires when the thread that forked it ends: the main thread,
/// which runs the whole command (`main`'s `block_on`) and ends last.
#[cfg(target_os = "linux")]
fn die_with_verrou(command: &mut Command) {
    let verrou = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec; it makes two
    // async-signal-safe system calls (prctl, getppid) and allocates nothing
    // (an `io::Error` from an errno is not boxed).
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            // verrou died between the fork and prctl: no signal would come.
            if nix::unistd::getppid() != verrou {
                return Err(nix::errno::Errno::ESRCH.into());
            }
            Ok(())
        });
    }
}

/// Wait for the program, forwarding signals, and run the kill sequence;
/// once it exited, stop and wait for whatever is left of its process group
/// (background children), so that none of it runs once the lease is given
/// back. Returns its status and whether the kill sequence started.
async fn supervise(
    mut child: Child,
    group: Option<Pid>,
    lease: &LeaseHandle,
    signals: &mut Signals,
    what: &str,
    grace: Duration,
    terminal: Option<&Terminal>,
) -> (std::io::Result<ExitStatus>, bool) {
    // Renewals move the deadline later (the timers below then wake early
    // and are armed again) and a loss is signalled by `lost`; looking again
    // now and then also covers a deadline moved earlier by other means, a
    // stopped program, and the group emptying once the program exited.
    let recheck = (grace / 4).clamp(Duration::from_millis(5), Duration::from_millis(250));
    let drain_poll = recheck.min(Duration::from_millis(20));
    let lost = lease.lost();
    tokio::pin!(lost);
    let mut lost_at: Option<Instant> = None;
    // SIGKILL comes no later than this without the lease being the reason
    // (a program stopped by the terminal).
    let mut kill_by: Option<Instant> = None;
    let (mut termed, mut killed) = (false, false);
    // The program's status once it exited; then the rest of its group is
    // stopped (SIGTERM now, SIGKILL at `drain_kill_at`) and waited for.
    let mut exited: Option<std::io::Result<ExitStatus>> = None;
    let mut drain_kill_at: Option<Instant> = None;
    let mut drain_given_up_at: Option<Instant> = None;
    loop {
        let now = Instant::now();
        let deadline = match lost_at {
            Some(at) => lease.deadline().min(at),
            None => lease.deadline(),
        };
        // Stopped because of the lease (not a terminal stop): exit 79.
        let for_lease = lost_at.is_some() || (termed && kill_by.is_none());
        let deadline = kill_by.map_or(deadline, |at| deadline.min(at));
        if exited.is_some() {
            if group_is_empty(group) {
                let status = exited.take().unwrap_or_else(|| Err(std::io::Error::other("no status")));
                return (status, for_lease);
            }
            // A loss during the drain moves the deadline, and SIGKILL with it.
            let kill_at = deadline.min(*drain_kill_at.get_or_insert_with(|| {
                eprintln!(
                    "verrou: {what}: the program exited; stopping what is left of its process group \
                     (SIGTERM, SIGKILL in {:?}) before giving the lease back",
                    round_ms(grace.min(deadline.saturating_duration_since(now)))
                );
                send(group, Signal::SIGTERM);
                send(group, Signal::SIGCONT);
                now + grace
            }));
            if !killed && now >= kill_at {
                send(group, Signal::SIGKILL);
                killed = true;
            }
            if killed {
                // Only processes nobody can reap (zombies whose parent left
                // the group and never waits) can keep it from emptying.
                let give_up = *drain_given_up_at.get_or_insert(now + Duration::from_secs(5));
                if now >= give_up {
                    eprintln!(
                        "verrou: {what}: the program's process group is not empty after SIGKILL; giving the lease back"
                    );
                    let status = exited.take().unwrap_or_else(|| Err(std::io::Error::other("no status")));
                    return (status, for_lease);
                }
            }
            tokio::select! {
                () = tokio::time::sleep(drain_poll) => {}
                sig = signals.next() => {
                    send(group, sig);
                    send(group, Signal::SIGCONT);
                }
            }
            continue;
        }
        let term_at = deadline.checked_sub(grace).unwrap_or(deadline);
        if !termed && now >= term_at {
            if lost_at.is_some() {
                eprintln!("verrou: {what}: lease lost: sending SIGTERM, then SIGKILL, to the program");
            } else {
                eprintln!(
                    "verrou: {what}: renewals failing: sending SIGTERM to the program, SIGKILL in {:?} (at the \
                     lease's local deadline)",
                    round_ms(deadline.saturating_duration_since(now))
                );
            }
            send(group, Signal::SIGTERM);
            send(group, Signal::SIGCONT);
            termed = true;
        }
        if !killed && now >= deadline {
            if lost_at.is_none() {
                eprintln!("verrou: {what}: the lease's local deadline: sending SIGKILL to the program");
            }
            send(group, Signal::SIGKILL);
            killed = true;
        }
        if let Some(stop) = stopped_by(&child) {
            match stop {
                // Ctrl-Z on the terminal we handed over: suspend verrou with
                // it, as a shell's job would be, and carry on when resumed.
                Signal::SIGTSTP if terminal.is_some() => {
                    if let Some(terminal) = terminal {
                        terminal.take_back();
                        suspend_self();
                        if !lease.is_lost()
                            && let Some(group) = group
                        {
                            terminal.give_to(group);
                        }
                    }
                    send(group, Signal::SIGCONT);
                }
                // It touched a terminal it does not own (verrou runs in the
                // background, or stdin is another terminal): it cannot go on,
                // and would hold the lease stopped forever.
                Signal::SIGTTIN | Signal::SIGTTOU if !termed => {
                    eprintln!(
                        "verrou: {what}: the program was stopped by {stop} (it used a terminal it does not \
                         own): sending SIGTERM, SIGKILL in {:?}",
                        round_ms(grace)
                    );
                    send(group, Signal::SIGTERM);
                    send(group, Signal::SIGCONT);
                    termed = true;
                    kill_by = Some(now + grace);
                }
                _ => {}
            }
            continue;
        }
        let next = if !termed {
            term_at
        } else if !killed {
            deadline
        } else {
            now + Duration::from_secs(3600)
        };
        tokio::select! {
            status = child.wait() => exited = Some(status),
            reason = &mut lost, if lost_at.is_none() => {
                eprintln!("verrou: {what}: lease lost ({reason})");
                lost_at = Some(Instant::now());
            }
            () = tokio::time::sleep_until(next.min(now + recheck)) => {}
            sig = signals.next() => {
                send(group, sig);
                // A stopped program acts on it only once continued.
                send(group, Signal::SIGCONT);
            }
        }
    }
}

/// The signal that stopped `child` since the last look, if it stopped
/// (each stop is reported once; its exit is left to `Child::wait`).
fn stopped_by(child: &Child) -> Option<Signal> {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    let pid = child.id().and_then(|id| i32::try_from(id).ok()).map(Pid::from_raw)?;
    match waitid(Id::Pid(pid), WaitPidFlag::WSTOPPED | WaitPidFlag::WNOHANG) {
        Ok(WaitStatus::Stopped(_, sig)) => Some(sig),
        _ => None,
    }
}

/// Stop verrou itself (SIGTSTP), as the shell's job it is; returns once
/// continued (`fg`, `bg`, SIGCONT).
fn suspend_self() {
    if let Err(e) = nix::sys::signal::kill(nix::unistd::getpid(), Signal::SIGTSTP) {
        eprintln!("verrou: cannot suspend: {e}");
    }
}

/// Whether no process is left in `group`, reaping those of its members that
/// became our children (orphans, with verrou their subreaper) and died.
fn group_is_empty(group: Option<Pid>) -> bool {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let Some(group) = group else {
        return true;
    };
    loop {
        match waitpid(Pid::from_raw(-group.as_raw()), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => break,
            Ok(_) => {}
        }
    }
    matches!(killpg(group, None::<Signal>), Err(nix::errno::Errno::ESRCH))
}

/// Signal the program's process group.
fn send(group: Option<Pid>, sig: Signal) {
    if let Some(group) = group
        && let Err(e) = killpg(group, sig)
    {
        // ESRCH: it exited meanwhile; the wait reports it.
        if e != nix::errno::Errno::ESRCH {
            eprintln!("verrou: cannot send {sig} to the program: {e}");
        }
    }
}

/// The shell's convention: the exit code, or 128 + the signal that killed it.
fn code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => u8::try_from(c & 0xff).unwrap_or(SOFTWARE),
        (None, Some(sig)) => u8::try_from(128 + (sig & 0x7f)).unwrap_or(SOFTWARE),
        (None, None) => SOFTWARE,
    }
}

async fn release<G: Held>(held: G, what: &str) {
    if let Err(e) = held.give_back().await {
        eprintln!("verrou: release of {what} failed ({e}); it expires after its TTL");
    }
}
