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

fn pid_t(pid: u32) -> io::Result<libc::pid_t> {
    libc::pid_t::try_from(pid).map_err(|_| io::Error::other("pid out of range"))
}

fn signal_pid(pid: libc::pid_t, signal: libc::c_int) -> io::Result<()> {
    let signal = Signal::try_from(signal)?;
    nix::sys::signal::kill(Pid::from_raw(pid), signal)?;
    Ok(())
}
