//! Spawning server processes so that they never outlive the test process.
//!
//! Every server is spawned from one long-lived thread and asks the kernel
//! (Linux `PR_SET_PDEATHSIG`) to SIGKILL it when that thread dies, which
//! happens only when the whole test process exits -- normally, on panic with
//! `panic = "abort"`, or when it is killed. Each server also leads its own
//! process group, so that killing the group also kills the children it forks
//! for background saves.

use std::io;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::error::{HarnessError, HarnessResult};

type Reply = mpsc::Sender<io::Result<Child>>;
type Request = (Command, Reply);

static SPAWNER: OnceLock<Option<Mutex<mpsc::Sender<Request>>>> = OnceLock::new();

/// Spawns `cmd` in its own process group, tied to the life of this process.
pub(crate) fn spawn(mut cmd: Command) -> io::Result<Child> {
    prepare(&mut cmd);
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("verrou-server-spawner".into())
            .spawn(move || {
                while let Ok((mut cmd, reply)) = rx.recv() {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .ok()
            .map(|_| Mutex::new(tx))
    });
    let Some(spawner) = spawner else {
        // No thread could be started: spawn here, still in its own group.
        let child = cmd.spawn()?;
        super::scratch::note_child(child.id());
        return Ok(child);
    };
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, reply_tx))
        .map_err(|_| io::Error::other("the server spawner thread is gone"))?;
    let child = reply_rx
        .recv()
        .map_err(|_| io::Error::other("the server spawner thread is gone"))??;
    super::scratch::note_child(child.id());
    Ok(child)
}

fn prepare(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    #[cfg(target_os = "linux")]
    {
        let parent = nix::unistd::getpid();
        // SAFETY: the closure runs in the forked child before exec and only
        // calls async-signal-safe functions (prctl, getppid).
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
                // The parent may have died between fork and prctl.
                if nix::unistd::getppid() != parent {
                    return Err(io::Error::other("parent process exited"));
                }
                Ok(())
            });
        }
    }
}

/// Sends `signal` to the process group led by `pid`.
pub(crate) fn signal_group(pid: u32, signal: libc::c_int) -> io::Result<()> {
    signal_pid(-(pid_t(pid)?), signal)
}

/// Sends `signal` to the process `pid` only.
pub(crate) fn signal_process(pid: u32, signal: libc::c_int) -> io::Result<()> {
    signal_pid(pid_t(pid)?, signal)
}

/// Waits (at most two seconds) until every thread of `pid` shows stopped
/// in `/proc` (or, with `stopped` false, none does). A stop signal reaches
/// each thread on its own time: a thread of a loaded machine that has not
/// stopped yet still answers a request sent right after the signal. A
/// zombie or dead thread (a server or backend that exited) has nothing to
/// wait for, nor has a process `/proc` no longer lists.
///
/// # Errors
/// [`HarnessError::Timeout`] when some thread never got there.
pub(crate) fn wait_stopped(pid: u32, stopped: bool) -> HarnessResult<()> {
    let waited = std::time::Duration::from_secs(2);
    let deadline = std::time::Instant::now() + waited;
    loop {
        match threads_stopped(pid) {
            None => return Ok(()),
            Some(states) if states.iter().all(|s| *s == stopped) => return Ok(()),
            Some(_) if std::time::Instant::now() >= deadline => {
                return Err(HarnessError::Timeout {
                    what: format!(
                        "every thread of pid {pid} to {}",
                        if stopped { "stop" } else { "run again" }
                    ),
                    after: waited,
                });
            }
            Some(_) => std::thread::sleep(std::time::Duration::from_millis(1)),
        }
    }
}

/// Whether each live thread of `pid` is stopped, as `/proc` shows it
/// (zombie and dead threads left out); `None` when there is none.
fn threads_stopped(pid: u32) -> Option<Vec<bool>> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut states = Vec::new();
    for task in tasks.flatten() {
        // A thread that ended since the listing has no state to wait for.
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // The state follows the parenthesised command name.
        match stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
        {
            Some('Z' | 'X' | 'x') | None => {}
            Some(state) => states.push(matches!(state, 'T' | 't')),
        }
    }
    (!states.is_empty()).then_some(states)
}

fn pid_t(pid: u32) -> io::Result<libc::pid_t> {
    libc::pid_t::try_from(pid).map_err(|_| io::Error::other("pid out of range"))
}

fn signal_pid(pid: libc::pid_t, signal: libc::c_int) -> io::Result<()> {
    let signal = Signal::try_from(signal)?;
    nix::sys::signal::kill(Pid::from_raw(pid), signal)?;
    Ok(())
}

/// Makes `fallocate(2)` fail with `EOPNOTSUPP` in the process `cmd` starts
/// (a seccomp filter, inherited across `exec`), so that a server which
/// preallocates files falls back to sparse files. etcd preallocates each
/// WAL segment and the next one, 64 MB each, with no flag to change it: 128
/// MB of disk per member, a few hundred KB once sparse. Does nothing where
/// the filter cannot be installed (the server then preallocates as usual).
#[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) fn sparse_preallocation(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xc000_003e; // AUDIT_ARCH_X86_64
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xc000_00b7; // AUDIT_ARCH_AARCH64
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    // `struct seccomp_data`: the syscall number at offset 0, the
    // architecture at offset 4.
    const NR: u32 = 0;
    const AUDIT_ARCH: u32 = 4;
    let fallocate = u32::try_from(libc::SYS_fallocate).unwrap_or(u32::MAX);
    let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let filter = [
        op(LD_W_ABS, 0, 0, AUDIT_ARCH),
        op(JEQ_K, 0, 3, ARCH), // another architecture: allow
        op(LD_W_ABS, 0, 0, NR),
        op(JEQ_K, 0, 1, fallocate),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EOPNOTSUPP.unsigned_abs()),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ];
    // SAFETY: the closure runs in the forked child before exec and only
    // calls prctl (async-signal-safe); `filter` is moved into the closure
    // and outlives the calls that read it.
    unsafe {
        cmd.pre_exec(move || {
            let prog = libc::sock_fprog {
                len: filter.len() as libc::c_ushort,
                filter: filter.as_ptr().cast_mut(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 {
                libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &raw const prog);
            }
            Ok(())
        });
    }
}

/// Elsewhere: nothing (the server preallocates as usual).
#[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
pub(crate) fn sparse_preallocation(_cmd: &mut Command) {}

#[cfg(test)]
mod wait_tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]
    use std::process::Command;
    use std::time::{Duration, Instant};

    use super::*;

    /// A child that exited and was not reaped is a zombie: nothing to wait
    /// for (a PostgreSQL backend that exited around a pause).
    #[test]
    fn a_zombie_is_not_waited_for() {
        let mut child = Command::new("true").spawn().expect("spawn true");
        let pid = child.id();
        let give_up = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z')))
        {
            assert!(Instant::now() < give_up, "the child never exited");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(wait_stopped(pid, true).is_ok());
        child.wait().expect("reap");
        // Gone from /proc: nothing to wait for either.
        assert!(wait_stopped(pid, true).is_ok());
    }

    /// A process that never stops is a typed timeout, not a silent return;
    /// once stopped it is waited for, and once continued it runs again.
    #[test]
    fn stopping_is_waited_for_and_a_process_that_never_stops_times_out() {
        let mut child = Command::new("sleep").arg("30").spawn().expect("spawn sleep");
        let pid = child.id();
        assert!(matches!(wait_stopped(pid, true), Err(HarnessError::Timeout { .. })));
        signal_process(pid, libc::SIGSTOP).expect("SIGSTOP");
        assert!(wait_stopped(pid, true).is_ok());
        signal_process(pid, libc::SIGCONT).expect("SIGCONT");
        assert!(wait_stopped(pid, false).is_ok());
        child.kill().expect("kill");
        child.wait().expect("reap");
    }
}
