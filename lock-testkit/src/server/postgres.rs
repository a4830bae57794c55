//! One PostgreSQL server: `initdb` into a temporary directory, `postgres` on
//! a free loopback port, faults, restart, clean-up.

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::error::{HarnessError, HarnessResult};
use super::pg_paths::{give_to, pg_bin_dir, run_as};
use super::pg_process::{children_of, copy_tree, is_alive, psql, template_data_dir};
pub(crate) use super::pg_process::{owned_command, run_to_end};
use super::ports::pick_port;
use super::scratch::ServerDir;
use super::spawn;

/// The database user the harness creates (superuser, trust authentication
/// on loopback only).
pub const PG_USER: &str = "verrou";
/// Name of the file, in the server's directory, that receives its log.
pub const PG_LOG_FILE: &str = "postgres.log";
/// How long a server gets to accept connections unless told otherwise.
pub const PG_START_TIMEOUT: Duration = Duration::from_secs(30);

const PORT_ATTEMPTS: usize = 8;
const POLL: Duration = Duration::from_millis(20);

/// Configures and starts a [`PostgresServer`].
///
/// The server listens on 127.0.0.1 only, on a free port, with its Unix
/// socket in its own temporary directory, `fsync` on (a kill loses nothing
/// it confirmed), trust authentication for the superuser [`PG_USER`]. When
/// the tests run as root, `initdb` and `postgres` run as the unprivileged
/// user [`PG_OS_USER`](super::PG_OS_USER), which owns the directory.
#[derive(Clone, Debug)]
pub struct PostgresServerBuilder {
    settings: Vec<(String, String)>,
    start_timeout: Duration,
}

impl Default for PostgresServerBuilder {
    fn default() -> Self {
        PostgresServerBuilder {
            settings: Vec::new(),
            start_timeout: PG_START_TIMEOUT,
        }
    }
}

impl PostgresServerBuilder {
    /// A builder with the defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// A server setting (`-c name=value`), after the harness's own.
    pub fn setting(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.push((name.into(), value.into()));
        self
    }

    /// How long the server gets to accept connections (default 30 s).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Runs `initdb` (once per process: later servers copy its result) and
    /// starts a server on a free port, waiting until it accepts connections.
    ///
    /// # Errors
    /// [`HarnessError::NotFound`] for missing binaries or user;
    /// [`HarnessError::StartFailed`] / [`HarnessError::Timeout`] with the
    /// server's log tail when it does not come up.
    ///
    /// # Cancel safety
    /// Dropping the future kills a process already spawned and removes the
    /// directory.
    pub async fn start(&self) -> HarnessResult<PostgresServer> {
        let bin = pg_bin_dir()?;
        let owner = run_as()?;
        let template = template_data_dir(&bin, owner).await?;
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let server = PostgresServer::empty(&bin, owner, self)?;
            copy_tree(&template, &server.data_dir()).await?;
            match server.launch().await {
                Ok(()) => return Ok(server),
                Err(Launch::PortClash(e)) => last = Some(e),
                Err(Launch::Other(e)) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| HarnessError::Setup("no free port".into())))
    }

    /// A server whose data directory is made by `init` (e.g. a base backup
    /// of another server) instead of the `initdb` template.
    pub(crate) async fn start_with<F, Fut>(&self, init: F) -> HarnessResult<PostgresServer>
    where
        F: FnOnce(PathBuf, Option<(u32, u32)>) -> Fut,
        Fut: std::future::Future<Output = HarnessResult<()>>,
    {
        let bin = pg_bin_dir()?;
        let owner = run_as()?;
        let server = PostgresServer::empty(&bin, owner, self)?;
        init(server.data_dir(), owner).await?;
        server.launch().await.map_err(|e| match e {
            Launch::PortClash(e) | Launch::Other(e) => e,
        })?;
        Ok(server)
    }
}

enum Launch {
    PortClash(HarnessError),
    Other(HarnessError),
}

#[derive(Debug, Default)]
struct ProcState {
    child: Option<Child>,
    /// Processes stopped by `pause` (the postmaster and its backends).
    paused: Vec<u32>,
}

/// A running PostgreSQL server on 127.0.0.1, in its own temporary directory.
///
/// Dropping it SIGKILLs the postmaster and every backend, reaps it and
/// removes the directory, also when the test panics; if the test process
/// dies, the kernel kills the postmaster (its backends then exit).
pub struct PostgresServer {
    port: u16,
    bin: PathBuf,
    owner: Option<(u32, u32)>,
    settings: Vec<(String, String)>,
    start_timeout: Duration,
    state: Mutex<ProcState>,
    // Dropped after `Drop::drop` has killed the processes.
    dir: ServerDir,
}

impl fmt::Debug for PostgresServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresServer")
            .field("port", &self.port)
            .field("pid", &self.pid())
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl PostgresServer {
    /// A builder.
    pub fn builder() -> PostgresServerBuilder {
        PostgresServerBuilder::new()
    }

    /// Starts a server with the defaults.
    ///
    /// # Errors
    /// As [`PostgresServerBuilder::start`].
    ///
    /// # Cancel safety
    /// As [`PostgresServerBuilder::start`].
    pub async fn start() -> HarnessResult<PostgresServer> {
        PostgresServerBuilder::new().start().await
    }

    fn empty(bin: &Path, owner: Option<(u32, u32)>, builder: &PostgresServerBuilder) -> HarnessResult<Self> {
        let dir = ServerDir::new("pg")?;
        give_to(dir.path(), owner)?;
        Ok(PostgresServer {
            port: pick_port(false)?,
            bin: bin.to_path_buf(),
            owner,
            settings: builder.settings.clone(),
            start_timeout: builder.start_timeout,
            state: Mutex::new(ProcState::default()),
            dir,
        })
    }

    /// The TCP port (kept across restarts).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `postgres://verrou@127.0.0.1:port/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://{PG_USER}@127.0.0.1:{}/postgres", self.port)
    }

    /// The server's directory (holds `data/`, the socket and the log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The folder of the PostgreSQL binaries in use.
    pub fn bin_dir(&self) -> &Path {
        &self.bin
    }

    /// The file receiving the server's log.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join(PG_LOG_FILE)
    }

    /// The last `n` lines of the log.
    pub fn log_tail(&self, n: usize) -> String {
        tail_of(&read_from(&self.log_path(), 0), n)
    }

    /// The postmaster's pid, `None` when it is not running.
    pub fn pid(&self) -> Option<u32> {
        running_pid(&mut self.lock())
    }

    /// True while the postmaster runs (paused counts as running).
    pub fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// SIGKILLs the postmaster and every backend and reaps it: a crash, as
    /// far as the data files can tell (recovery replays the WAL at the next
    /// start). Does nothing when it is not running.
    ///
    /// # Errors
    /// [`HarnessError::Io`] if the process could not be reaped.
    pub fn kill(&self) -> HarnessResult<()> {
        kill_locked(&mut self.lock(), self.port)
    }

    /// SIGSTOPs the postmaster and every backend: connections are accepted
    /// by the kernel but nothing is answered until [`resume`](Self::resume).
    ///
    /// # Errors
    /// [`HarnessError::NotRunning`], a signal failing, or
    /// [`HarnessError::Timeout`] when a process's threads do not stop
    /// within 2 s.
    pub fn pause(&self) -> HarnessResult<()> {
        let mut st = self.lock();
        let pid = running_pid(&mut st).ok_or(HarnessError::NotRunning { port: self.port })?;
        spawn::signal_process(pid, libc::SIGSTOP).map_err(|e| HarnessError::io(format!("SIGSTOP to pid {pid}"), e))?;
        let mut all = vec![pid];
        for p in children_of(pid) {
            match spawn::signal_process(p, libc::SIGSTOP) {
                Ok(()) => all.push(p),
                // A backend whose connection ended after the listing: gone,
                // nothing to stop (the soak's pause failed on one).
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => return Err(HarnessError::io(format!("SIGSTOP to pid {p}"), e)),
            }
        }
        for p in &all {
            spawn::wait_stopped(*p, true)?;
        }
        st.paused = all;
        Ok(())
    }

    /// SIGCONTs what [`pause`](Self::pause) stopped.
    ///
    /// # Errors
    /// A signal failing.
    pub fn resume(&self) -> HarnessResult<()> {
        let mut st = self.lock();
        for p in std::mem::take(&mut st.paused) {
            // A backend may have gone meanwhile: only the postmaster matters.
            let _ = spawn::signal_process(p, libc::SIGCONT);
        }
        Ok(())
    }

    /// Kills the server (if running) and starts it again on the same port
    /// and data: what it confirmed before the kill is there after (fsync on).
    ///
    /// # Errors
    /// As [`PostgresServerBuilder::start`].
    ///
    /// # Cancel safety
    /// Dropping the future leaves the server stopped or starting.
    pub async fn restart(&self) -> HarnessResult<()> {
        self.kill()?;
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match self.launch().await {
                Ok(()) => return Ok(()),
                // The port (or the shared memory of a dying backend) is not
                // free yet.
                Err(Launch::PortClash(e)) if Instant::now() >= deadline => return Err(e),
                Err(Launch::PortClash(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
                Err(Launch::Other(e)) => return Err(e),
            }
        }
    }

    /// Runs `sql` with `psql` (as the superuser, over TCP) and returns its
    /// unaligned, tuples-only output, trimmed.
    ///
    /// # Errors
    /// [`HarnessError::Reply`] with psql's error output when it fails.
    ///
    /// # Cancel safety
    /// Dropping the future kills psql; a statement already sent may still run.
    pub async fn psql(&self, sql: &str) -> HarnessResult<String> {
        psql(&self.bin, self.port, sql).await
    }

    fn lock(&self) -> MutexGuard<'_, ProcState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn launch(&self) -> Result<(), Launch> {
        let log_path = self.log_path();
        let log_start = fs::metadata(&log_path).map(|m| m.len()).unwrap_or(0);
        self.spawn_postmaster(&log_path).map_err(Launch::Other)?;
        let started = Instant::now();
        loop {
            let exited = {
                let mut st = self.lock();
                match st.child.as_mut().map(Child::try_wait) {
                    Some(Ok(Some(status))) => Some(status.to_string()),
                    Some(Ok(None)) => None,
                    Some(Err(e)) => return Err(Launch::Other(HarnessError::io("checking on postgres", e))),
                    None => Some("killed".to_owned()),
                }
            };
            let log = read_from(&log_path, log_start);
            if let Some(status) = exited {
                let _ = self.kill();
                let err = HarnessError::StartFailed {
                    port: self.port,
                    status,
                    log_tail: tail_of(&log, 30),
                };
                let clash = log.contains("Address already in use") || log.contains("is still in use");
                return Err(if clash {
                    Launch::PortClash(err)
                } else {
                    Launch::Other(err)
                });
            }
            if log.contains("ready to accept") && tokio::net::TcpStream::connect(self.addr()).await.is_ok() {
                return Ok(());
            }
            if started.elapsed() >= self.start_timeout {
                let _ = self.kill();
                return Err(Launch::Other(HarnessError::Timeout {
                    what: format!(
                        "postgres on port {} to accept connections; log tail:\n{}",
                        self.port,
                        tail_of(&log, 30)
                    ),
                    after: self.start_timeout,
                }));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn spawn_postmaster(&self, log_path: &Path) -> HarnessResult<()> {
        let mut st = self.lock();
        if running_pid(&mut st).is_some() {
            return Err(HarnessError::Setup(format!(
                "postgres on port {} is already running",
                self.port
            )));
        }
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path)
            .map_err(|e| HarnessError::io(format!("opening {}", log_path.display()), e))?;
        let _ = writeln!(log, "=== verrou harness: starting postgres on port {} ===", self.port);
        let err_log = log
            .try_clone()
            .map_err(|e| HarnessError::io("duplicating the log file handle", e))?;
        let mut args: Vec<OsString> = vec![
            "-D".into(),
            self.data_dir().into(),
            "-p".into(),
            self.port.to_string().into(),
        ];
        args.extend(["-k".into(), self.dir.path().as_os_str().to_owned()]);
        let defaults = [
            ("listen_addresses", "127.0.0.1"),
            ("fsync", "on"),
            ("max_connections", "200"),
            ("shared_buffers", "16MB"),
            ("max_wal_senders", "10"),
            ("wal_level", "replica"),
            ("hot_standby", "on"),
        ];
        let settings = defaults
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .chain(self.settings.iter().cloned());
        for (k, v) in settings {
            args.push("-c".into());
            args.push(format!("{k}={v}").into());
        }
        let mut cmd = self.command("postgres");
        cmd.args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err_log));
        let child = spawn::spawn(cmd).map_err(|e| HarnessError::io("starting postgres", e))?;
        st.child = Some(child);
        st.paused.clear();
        Ok(())
    }

    /// A command for one of the PostgreSQL binaries, run as the owner.
    pub(crate) fn command(&self, name: &str) -> Command {
        owned_command(&self.bin.join(name), self.owner, self.dir.path())
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        let _ = kill_locked(&mut self.lock(), self.port);
    }
}

fn running_pid(st: &mut ProcState) -> Option<u32> {
    let child = st.child.as_mut()?;
    match child.try_wait() {
        Ok(None) => Some(child.id()),
        _ => None,
    }
}

fn kill_locked(st: &mut ProcState, port: u16) -> HarnessResult<()> {
    st.paused.clear();
    let Some(mut child) = st.child.take() else {
        return Ok(());
    };
    let pid = child.id();
    // Backends lead sessions of their own: the postmaster's group does not
    // hold them, so they are found by parent and killed one by one (a
    // backend left attached to the shared memory would stop a restart).
    let backends = children_of(pid);
    let _ = spawn::signal_group(pid, libc::SIGKILL);
    let _ = child.kill();
    for b in &backends {
        let _ = spawn::signal_process(*b, libc::SIGKILL);
    }
    child
        .wait()
        .map_err(|e| HarnessError::io(format!("reaping postgres on port {port} (pid {pid})"), e))?;
    let deadline = Instant::now() + Duration::from_secs(2);
    while backends.iter().any(|b| is_alive(*b)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

fn read_from(path: &Path, offset: u64) -> String {
    let bytes = fs::read(path).unwrap_or_default();
    let start = usize::try_from(offset).unwrap_or(0).min(bytes.len());
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

fn tail_of(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
