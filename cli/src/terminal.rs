//! The terminal a program under verrou runs on: when verrou's standard input
//! is its controlling terminal and verrou is the terminal's foreground
//! process group, the program's own process group is made the foreground
//! group for as long as it runs, so that an interactive program reads the
//! terminal (instead of being stopped by SIGTTIN) and gets Ctrl-C and
//! Ctrl-Z from it directly, as it would from a shell.

use std::os::fd::{AsFd, BorrowedFd};

use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
use nix::unistd::{Pid, getpgrp, isatty, tcgetpgrp, tcsetpgrp};
use tokio::process::Command;

/// Standard input, a terminal verrou's process group had in the foreground.
#[derive(Debug)]
pub struct Terminal {
    /// verrou's own process group, the foreground one to restore.
    ours: Pid,
}

impl Terminal {
    /// The terminal on standard input, if verrou runs in its foreground.
    pub fn foreground() -> Option<Terminal> {
        let stdin = std::io::stdin();
        if !isatty(stdin.as_fd()).unwrap_or(false) {
            return None;
        }
        let ours = getpgrp();
        (tcgetpgrp(stdin.as_fd()).ok()? == ours).then_some(Terminal { ours })
    }

    /// Make `group` the terminal's foreground process group.
    pub fn give_to(&self, group: Pid) {
        if let Err(e) = foreground(std::io::stdin().as_fd(), group) {
            eprintln!("verrou: cannot hand the terminal to the program ({e})");
        }
    }

    /// Make verrou's group the foreground group again (verrou may be in the
    /// background by then: SIGTTOU is blocked meanwhile).
    pub fn take_back(&self) {
        if let Err(e) = foreground(std::io::stdin().as_fd(), self.ours) {
            eprintln!("verrou: cannot take the terminal back ({e})");
        }
    }

    /// Make the program's group the foreground one from the child too,
    /// before it runs anything (whichever of the two comes first does it).
    pub fn take_in_child(&self, command: &mut Command) {
        // SAFETY: the closure runs in the forked child before exec (after
        // its `setpgid`); it makes async-signal-safe system calls only
        // (sigprocmask, getpgrp, tcsetpgrp) on a stack-built signal set, and
        // allocates nothing.
        unsafe {
            command.pre_exec(|| {
                // SAFETY: descriptor 0 stays open until exec.
                let stdin = BorrowedFd::borrow_raw(0);
                let _ = foreground(stdin, getpgrp());
                Ok(())
            });
        }
    }
}

/// `tcsetpgrp` with SIGTTOU blocked on this thread (a background caller
/// would otherwise be stopped by it).
fn foreground(fd: BorrowedFd<'_>, group: Pid) -> nix::Result<()> {
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let mut old = SigSet::empty();
    pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut old))?;
    let result = tcsetpgrp(fd, group);
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    result
}
