//! `verrou lock` (hold a lock around a program) and `verrou status`.

use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;
use verrou::{AcquireOutcome, Backend, Error, LockGuard, LockOptions, LockToken, ReleaseOutcome};

use crate::args::LockArgs;
use crate::exit::{BUSY, CANNOT_EXECUTE, Failure, LOST, NO, NOT_FOUND, OK, SOFTWARE};

/// "Wait as long as it takes": a year, the longest lease verrou accepts.
const FOREVER: Duration = verrou::MAX_TTL;

/// The signals forwarded to the program.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Self, Failure> {
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
}

/// `verrou lock NAME -- PROGRAM ARGS…`.
pub async fn run(backend: &Backend, args: LockArgs) -> Result<u8, Failure> {
    // Listen before acquiring: a Ctrl-C while waiting must not leave a lock
    // behind (dropping the acquire hands any grant back to the runtime).
    let mut signals = Signals::install()?;
    let wait = if args.no_wait {
        Duration::ZERO
    } else {
        args.wait.unwrap_or(FOREVER)
    };
    let locks = backend.manager(LockOptions::with_ttl(args.ttl).acquire_timeout(wait))?;
    let acquire = async {
        if args.no_wait {
            locks.try_lock(&args.name).await
        } else {
            locks.lock(&args.name).await.map(Some)
        }
    };
    let guard = tokio::select! {
        acquired = acquire => match acquired {
            Ok(Some(guard)) => guard,
            Ok(None) | Err(Error::Timeout { .. }) => {
                return Err(Failure::new(BUSY, format!("lock {:?} is held by another client", args.name)));
            }
            Err(e) => return Err(e.into()),
        },
        sig = signals.next() => return Ok(128 + sig as u8),
    };
    let child = match spawn(&args, &guard) {
        Ok(child) => child,
        Err(failure) => {
            release(guard, &args.name).await;
            return Err(failure);
        }
    };
    supervise(child, guard, signals, &args).await
}

fn spawn(args: &LockArgs, guard: &LockGuard) -> Result<Child, Failure> {
    let (program, rest) = args
        .program
        .split_first()
        .ok_or_else(|| Failure::new(crate::exit::CONFIG, "no PROGRAM after --"))?;
    let mut command = Command::new(program);
    command.args(rest).env("VERROU_KEY", &args.name);
    match guard.fencing_token() {
        Some(token) => command.env("VERROU_FENCING_TOKEN", token.0.to_string()),
        None => command.env_remove("VERROU_FENCING_TOKEN"),
    };
    command.spawn().map_err(|e| {
        let shown = program.to_string_lossy();
        match e.kind() {
            std::io::ErrorKind::NotFound => Failure::new(NOT_FOUND, format!("{shown}: program not found")),
            std::io::ErrorKind::PermissionDenied => {
                Failure::new(CANNOT_EXECUTE, format!("{shown}: cannot execute: {e}"))
            }
            _ => Failure::new(CANNOT_EXECUTE, format!("{shown}: cannot start: {e}")),
        }
    })
}

/// Wait for the program, forwarding signals; on lease loss stop it
/// (SIGTERM, then SIGKILL after the grace period).
async fn supervise(mut child: Child, guard: LockGuard, mut signals: Signals, args: &LockArgs) -> Result<u8, Failure> {
    let pid = child.id().and_then(|id| i32::try_from(id).ok()).map(Pid::from_raw);
    let lost = guard.lost();
    tokio::pin!(lost);
    let mut lost_at: Option<Instant> = None;
    let mut killed = false;
    let status = loop {
        let kill_at = lost_at.map(|t| t + args.kill_grace);
        tokio::select! {
            status = child.wait() => break status,
            reason = &mut lost, if lost_at.is_none() => {
                eprintln!("verrou: lease on {:?} lost ({reason}): sending SIGTERM to the program", args.name);
                send(pid, Signal::SIGTERM);
                lost_at = Some(Instant::now());
            }
            () = sleep_until(kill_at), if kill_at.is_some() && !killed => {
                eprintln!("verrou: the program outlived --kill-grace {:?}: sending SIGKILL", args.kill_grace);
                send(pid, Signal::SIGKILL);
                killed = true;
            }
            sig = signals.next() => send(pid, sig),
        }
    };
    let status = status.map_err(|e| Failure::new(SOFTWARE, format!("cannot wait for the program: {e}")))?;
    if lost_at.is_some() {
        return Ok(LOST);
    }
    match guard.release().await {
        Ok(ReleaseOutcome::Released) => Ok(code(status)),
        Ok(_) => {
            eprintln!(
                "verrou: lock {:?} was no longer held when the program exited (expired or taken over)",
                args.name
            );
            Ok(LOST)
        }
        Err(e) => {
            // The program ran under the lock; only the release failed, and
            // the TTL frees the key.
            eprintln!(
                "verrou: release of {:?} failed ({e}); it expires after its TTL",
                args.name
            );
            Ok(code(status))
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn send(pid: Option<Pid>, sig: Signal) {
    if let Some(pid) = pid
        && let Err(e) = kill(pid, sig)
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

async fn release(guard: LockGuard, name: &str) {
    if let Err(e) = guard.release().await {
        eprintln!("verrou: release of {name:?} failed ({e}); it expires after its TTL");
    }
}

/// `verrou status NAME`: one acquire attempt with a fresh token, released at
/// once when it succeeds (so a free lock's fencing counter advances by one).
pub async fn status(backend: &Backend, name: &str, json: bool) -> Result<u8, Failure> {
    verrou::options::validate_key(name)?;
    let locks = backend.locks();
    let token = LockToken::generate()?;
    let probe_ttl = Duration::from_secs(1);
    match locks.try_acquire(name, &token, probe_ttl).await? {
        AcquireOutcome::Held { retry_after } => {
            if json {
                let remaining = retry_after.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                println!("{}", json!({"name": name, "held": true, "remaining_ttl_ms": remaining}));
            } else {
                match retry_after {
                    Some(d) => println!("held, {} left", humantime::format_duration(round_ms(d))),
                    None => println!("held"),
                }
            }
            Ok(OK)
        }
        AcquireOutcome::Acquired(lease) => {
            if let Err(e) = locks.release(name, &token).await {
                eprintln!("verrou: the status probe could not release its own {probe_ttl:?} lease ({e}); it expires");
            }
            let fence = lease.fencing_token.map(|t| t.0);
            if json {
                println!("{}", json!({"name": name, "held": false, "fencing_counter": fence}));
            } else {
                match fence {
                    Some(f) => println!("free (fencing counter {f}, advanced by this probe)"),
                    None => println!("free"),
                }
            }
            Ok(NO)
        }
        _ => Err(Failure::new(SOFTWARE, "unexpected reply from the backend")),
    }
}

fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
