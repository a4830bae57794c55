//! The command line, parsed by clap.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::exit;

/// Hold a distributed lock around any program, and read or write versioned
/// values, on the backend named by one URL.
#[derive(Debug, Parser)]
#[command(name = "verrou", version, after_help = exit::HELP)]
pub struct Cli {
    /// Backend URL: redis://HOST:PORT, rediss://…, redis+cluster://H1,H2,
    /// tair://…, tairs://…, tair+cluster://…, redlock://?node=URL&node=URL…
    #[arg(long, env = "VERROU_URL", global = true, hide_env_values = true)]
    pub url: Option<String>,

    /// Print results as one JSON object on stdout (errors stay on stderr).
    #[arg(long, global = true)]
    pub json: bool,

    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Acquire NAME, run PROGRAM while renewing the lease, release when it
    /// exits, and exit with its exit code.
    #[command(after_help = exit::LOCK_HELP)]
    Lock(LockArgs),
    /// Take one of --permits permits of semaphore NAME (at most that many
    /// copies of a job run at once, across machines), run PROGRAM while
    /// renewing it, give it back when it exits, and exit with its exit code.
    #[command(after_help = exit::SEMAPHORE_HELP)]
    Semaphore(SemaphoreArgs),
    /// Campaign for leadership of NAME, run PROGRAM only while leader (it is
    /// stopped if leadership is lost), resign when it exits, and exit with
    /// its exit code.
    #[command(after_help = exit::ELECT_HELP)]
    Elect(ElectArgs),
    /// Is NAME held? Reads what the backend sees, takes nothing: the lock,
    /// the semaphore's permits in use and the election's leader of NAME.
    /// Exit 0 when any is held, 1 when none is.
    Status(StatusArgs),
    /// Print KEY's value and version (exit 1 when absent).
    Get(KeyArgs),
    /// Write KEY whatever its current version; print the new version.
    Set(SetArgs),
    /// Write KEY only if it is at version EXPECTED (`none`: only if absent);
    /// exit 1 on a conflict, printing the current value and version.
    Cas(CasArgs),
    /// Delete KEY (only at --version V when given); exit 1 when absent or on
    /// a conflict.
    Delete(DeleteArgs),
}

/// How a program's lease is held: shared by `lock`, `semaphore`, `elect`.
#[derive(Debug, Args)]
pub struct HoldArgs {
    /// Lease length on the server; renewed while PROGRAM runs (every third
    /// of what --kill-grace leaves of it).
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub ttl: Duration,

    /// How long to wait for the lease before giving up (exit 75).
    /// Default: wait as long as it takes.
    #[arg(long, value_parser = duration, conflicts_with = "no_wait")]
    pub wait: Option<Duration>,

    /// One attempt: exit 75 at once if it is taken (like `flock -n`).
    #[arg(long, short = 'n')]
    pub no_wait: bool,

    /// Once renewals are failing, PROGRAM gets SIGTERM this long before the
    /// lease's local deadline and SIGKILL at it. Default: a third of --ttl;
    /// must be shorter than --ttl.
    #[arg(long, value_parser = duration)]
    pub kill_grace: Option<Duration>,

    /// Keep the lease at least this long after it was taken, even when
    /// PROGRAM exits sooner (ShedLock's lockAtLeastFor): the release then
    /// sets the lease to end when this time is up instead of deleting it,
    /// so a cron job started on several machines runs once per tick even
    /// when their clocks differ. verrou still exits when PROGRAM does.
    #[arg(long, value_parser = duration)]
    pub hold_at_least: Option<Duration>,
}

/// `verrou lock`.
#[derive(Debug, Args)]
pub struct LockArgs {
    #[command(flatten)]
    pub hold: HoldArgs,

    /// The lock's name (the key on the server).
    pub name: String,

    /// The program to run and its arguments (after `--`).
    #[arg(required = true, last = true, value_name = "PROGRAM")]
    pub program: Vec<OsString>,
}

/// `verrou semaphore`.
#[derive(Debug, Args)]
pub struct SemaphoreArgs {
    #[command(flatten)]
    pub hold: HoldArgs,

    /// The semaphore's size: at most this many programs run under NAME at
    /// once, across machines (every command on NAME must give the same).
    #[arg(long)]
    pub permits: u32,

    /// The semaphore's name.
    pub name: String,

    /// The program to run and its arguments (after `--`).
    #[arg(required = true, last = true, value_name = "PROGRAM")]
    pub program: Vec<OsString>,
}

/// `verrou elect`.
#[derive(Debug, Args)]
pub struct ElectArgs {
    #[command(flatten)]
    pub hold: HoldArgs,

    /// The identity stored with the leadership (default: HOSTNAME:PID).
    #[arg(long)]
    pub identity: Option<String>,

    /// The election's name.
    pub name: String,

    /// The program to run and its arguments (after `--`).
    #[arg(required = true, last = true, value_name = "PROGRAM")]
    pub program: Vec<OsString>,
}

/// `verrou status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Which of NAME's kinds to read: `lock` (`verrou lock`), `semaphore`
    /// (`verrou semaphore`), `election` (`verrou elect`), or `all` of those
    /// the backend offers.
    #[arg(long, value_enum, default_value = "all")]
    pub kind: StatusKind,

    /// The name.
    pub name: String,
}

/// What `verrou status` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusKind {
    /// The lock, the semaphore and the election.
    All,
    /// The lock of `verrou lock`.
    Lock,
    /// The semaphore of `verrou semaphore`.
    Semaphore,
    /// The election of `verrou elect`.
    Election,
}

impl StatusKind {
    /// Its member in `--json` output.
    pub fn json_name(self) -> &'static str {
        match self {
            StatusKind::All | StatusKind::Lock => "lock",
            StatusKind::Semaphore => "semaphore",
            StatusKind::Election => "leader",
        }
    }
}

/// A subcommand taking just a key.
#[derive(Debug, Args)]
pub struct KeyArgs {
    /// The key.
    pub key: String,
}

/// `verrou set`.
#[derive(Debug, Args)]
pub struct SetArgs {
    /// The key.
    pub key: String,
    /// The new value.
    pub value: String,
    /// Expire the key this long after the write (default: keep its TTL).
    #[arg(long, value_parser = duration)]
    pub ttl: Option<Duration>,
}

/// `verrou cas`.
#[derive(Debug, Args)]
pub struct CasArgs {
    /// The key.
    pub key: String,
    /// The version the key must be at, or `none` for "must be absent".
    pub expected: Expected,
    /// The new value.
    pub value: String,
    /// Expire the key this long after the write (default: keep its TTL).
    #[arg(long, value_parser = duration)]
    pub ttl: Option<Duration>,
}

/// `verrou delete`.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// The key.
    pub key: String,
    /// Delete only if the key is at this version.
    #[arg(long)]
    pub version: Option<u64>,
}

/// The version a `cas` expects.
#[derive(Debug, Clone, Copy)]
pub enum Expected {
    /// The key must be absent.
    Absent,
    /// The key must be at this version.
    Version(u64),
}

impl std::str::FromStr for Expected {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("none") {
            return Ok(Expected::Absent);
        }
        s.parse()
            .map(Expected::Version)
            .map_err(|_| format!("`{s}` is not a version: give the number `verrou get` printed, or `none`"))
    }
}

fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (write e.g. 500ms, 30s, 5m)"))
}
