//! Exit codes, and how errors are shown.

use std::process::ExitCode;

use verrou::Error;

/// Success; `status`: the lock is held.
pub const OK: u8 = 0;
/// `status`: free; `get`: absent; `cas` / `delete`: conflict or absent.
pub const NO: u8 = 1;
/// Busy: the lock is held by another client, no permit is free, or another
/// leads (`--no-wait`, or `--wait` ran out).
pub const BUSY: u8 = 75;
/// The lease was lost, or renewals failed, while PROGRAM ran: it was
/// stopped (SIGTERM, then SIGKILL at the lease's local deadline).
pub const LOST: u8 = 79;
/// The server could not be reached or failed.
pub const UNAVAILABLE: u8 = 69;
/// Anything else that went wrong inside verrou.
pub const SOFTWARE: u8 = 70;
/// A bad URL, option or argument (clap's own usage errors exit 2).
pub const CONFIG: u8 = 78;
/// PROGRAM exists but could not be run.
pub const CANNOT_EXECUTE: u8 = 126;
/// PROGRAM was not found.
pub const NOT_FOUND: u8 = 127;

/// The exit-code table of `verrou --help`.
pub const HELP: &str = "\
Exit codes:
  0    success (status: the lock is held)
  1    status: free; get: absent; cas/delete: conflict or absent
  2    bad command line
  69   the server could not be reached or failed
  70   internal error
  75   busy: the lock is held, no permit is free, or another leads
       (--no-wait, or --wait ran out)
  78   bad URL or option
  79   lock/semaphore/elect: the lease was lost (or renewals failed): the program was stopped
  126  lock/semaphore/elect: the program could not be executed
  127  lock/semaphore/elect: the program was not found
  any other: lock/semaphore/elect pass the program's exit code through (128+N: killed by signal N)";

/// The part of every program-running subcommand's help that says how the
/// program is run and stopped (`$what`: "the lock", "the permit", …).
macro_rules! program_rules {
    ($what:literal) => {
        concat!(
            "The program gets VERROU_KEY (the name) and, when the backend issues fencing
tokens, VERROU_FENCING_TOKEN in its environment. It runs in its own process
group; SIGINT, SIGTERM and SIGHUP sent to verrou are forwarded to that group,
and ",
            $what,
            " is given back once the program exits and nothing is left of
its group: what the program left running there (background children) gets
SIGTERM when it exits, SIGKILL --kill-grace later (at the lease's deadline
at the latest), and verrou waits for it. A daemon that leaves the group
(setsid, setpgid) is not followed: it may run on after the release.

When standard input is the terminal verrou runs in the foreground of, the
program's group gets the terminal for as long as it runs: an interactive
program reads it, and the terminal's Ctrl-C and Ctrl-Z go to the program's
group. On Ctrl-Z verrou suspends itself with the program (renewals pause
meanwhile, so a long suspension can lose the lease); where no shell can
resume it, both go on. (A suspend and fg under an interactive shell is not
covered by a test.) A program stopped for using a terminal
it does not own (SIGTTIN, SIGTTOU: verrou in the background) cannot go on:
it gets SIGTERM, then SIGKILL --kill-grace later.

The program never runs past the lease's local deadline, which passes before
the server can let another client in: once renewals are failing, the
program's process group gets SIGTERM --kill-grace before that deadline
(default: a third of --ttl) and SIGKILL at it; when the lease is lost
outright (another owner found), both go out at once. verrou then exits 79.
If verrou is killed (kill -9, the OOM killer), the kernel kills the program
with it (Linux), though not the processes the program started. The one
exception is verrou itself being stopped or frozen (SIGSTOP, a stalled VM)
while the program runs on: nothing stops it until verrou resumes. Pass
VERROU_FENCING_TOKEN to the resource the program writes, so that it can
refuse a holder older than the last one.

Exit codes: the program's own, or 75 busy, 79 lease lost, 126/127 the program
could not be run or found, 69 server unavailable, 78 bad URL or option."
        )
    };
}

/// Extra help of `verrou lock`.
pub const LOCK_HELP: &str = concat!(
    program_rules!("the lock"),
    "

Fencing tokens: on redis:// and tair:// with ?fencing=true.

Example (a cron job that must run on one machine at a time):
  VERROU_URL=redis://locks.internal:6379 verrou lock --no-wait nightly-report -- /usr/local/bin/report"
);

/// Extra help of `verrou semaphore`.
pub const SEMAPHORE_HELP: &str = concat!(
    program_rules!("the permit"),
    "

Busy (75) means no permit was free. Fencing tokens increase per name with
every grant; several holders are legal at once, so use them to order or
deduplicate writes, not to refuse older ones.

Example (at most 3 copies of a batch job across the fleet):
  VERROU_URL=redis://locks.internal:6379 verrou semaphore --permits 3 batch -- /usr/local/bin/batch"
);

/// Extra help of `verrou elect`.
pub const ELECT_HELP: &str = concat!(
    program_rules!("the leadership"),
    "

The fencing token is the leadership's term: it increases with every new
leader, so a resource that remembers the highest term it saw refuses a
deposed leader. Busy (75) means another leads (--no-wait, or --wait ran out).

Example (one scheduler across the fleet, a standby taking over on loss):
  VERROU_URL=redis://locks.internal:6379 verrou elect scheduler -- /usr/local/bin/scheduler"
);

/// A failure: what to print on stderr and the exit code.
#[derive(Debug)]
pub struct Failure {
    /// The exit code.
    pub code: u8,
    /// One human-readable paragraph.
    pub message: String,
}

impl Failure {
    /// A failure with a message of ours.
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// Print the message and turn into the exit code.
    pub fn report(self) -> ExitCode {
        eprintln!("verrou: {}", self.message);
        ExitCode::from(self.code)
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let code = match &e {
            Error::InvalidArgument(_) | Error::Unsupported { .. } | Error::Refused { .. } => CONFIG,
            Error::Backend { .. } | Error::QuorumUnreachable { .. } => UNAVAILABLE,
            Error::Timeout { .. } => BUSY,
            Error::Lost { .. } | Error::NotHeld { .. } => LOST,
            _ => SOFTWARE,
        };
        // The source chain says why a connection failed; the messages of
        // verrou never carry passwords.
        let mut message = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            message.push_str(": ");
            message.push_str(&s.to_string());
            source = s.source();
        }
        Failure { code, message }
    }
}
