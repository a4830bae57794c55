//! One `redis-server` process: start, faults, restart, clean-up.

use std::collections::HashMap;
use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::error::{HarnessError, HarnessResult};
use super::ports::pick_port;
use super::redis_builder::{Launch, RedisServerBuilder};
use super::resp::RespValue;
use super::resp_client::RespClient;
use super::scratch::ServerDir;
use super::spawn;
use super::text::{parse_info, read_from, tail, tail_of};

/// How long a server gets to answer `PING` unless told otherwise
/// ([`RedisServerBuilder::start_timeout`]).
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(10);

/// Name of the file, in the server's directory, that receives its stdout and
/// stderr (the server logs to stdout).
pub const LOG_FILE: &str = "redis.log";
/// Name of the cluster configuration file of cluster nodes.
pub const NODES_FILE: &str = "nodes.conf";

/// Name of a sentinel's configuration file, in its directory.
pub const SENTINEL_CONFIG_FILE: &str = "sentinel.conf";

/// Attempts with fresh ports when a new server finds its port taken.
const PORT_ATTEMPTS: usize = 8;
/// How long a restart keeps retrying when its (fixed) port is taken.
const RESTART_CLASH_WINDOW: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(10);
#[derive(Debug, Default)]
struct ProcState {
    child: Option<Child>,
    paused: bool,
}

enum Failure {
    PortClash(HarnessError),
    Other(HarnessError),
}

/// A running `redis-server` process (or a Redis-compatible one) on
/// 127.0.0.1, in its own temporary directory.
///
/// Dropping it SIGKILLs the process (and anything it forked), reaps it and
/// removes the directory -- also when the test panics. If the test process
/// itself dies, the kernel kills the server (Linux).
///
/// Fault methods take `&self`, so a server can be shared (e.g. in an `Arc`)
/// between the code under test and the test driving the faults.
pub struct RedisServer {
    port: u16,
    launch: Launch,
    state: Mutex<ProcState>,
    lifecycle: tokio::sync::Mutex<()>,
    // Dropped after `Drop::drop` has killed the process.
    dir: ServerDir,
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("pid", &self.pid())
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl RedisServer {
    /// Start a server from a resolved launch on a fresh port (retried on a
    /// port clash): [`RedisServerBuilder::start`].
    pub(super) async fn start_from(launch: Launch, cluster: bool) -> HarnessResult<RedisServer> {
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = pick_port(cluster)?;
            let dir = ServerDir::new("redis")?;
            let server = RedisServer {
                port,
                launch: launch.clone(),
                state: Mutex::new(ProcState::default()),
                lifecycle: tokio::sync::Mutex::new(()),
                dir,
            };
            match server.launch().await {
                Ok(()) => return Ok(server),
                Err(Failure::PortClash(e)) => last = Some(e),
                Err(Failure::Other(e)) => return Err(e),
            }
            // `server` is dropped here: process killed, directory removed.
        }
        Err(last.unwrap_or_else(|| HarnessError::Setup("no free port".into())))
    }

    /// A builder, for modules, arguments, persistence...
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::new()
    }

    /// Starts a server with the defaults.
    ///
    /// # Errors
    /// As [`RedisServerBuilder::start`].
    ///
    /// # Cancel safety
    ///
    /// As [`RedisServerBuilder::start`].
    pub async fn start() -> HarnessResult<RedisServer> {
        RedisServerBuilder::new().start().await
    }

    /// The TCP port (kept across restarts).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `redis://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's working directory (data files, log, cluster config).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The file receiving the server's stdout and stderr.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join(LOG_FILE)
    }

    /// The last `n` lines of the server's log (all its runs, separated by
    /// `=== verrou harness: ...` lines).
    pub fn log_tail(&self, n: usize) -> String {
        tail(&self.log_path(), n)
    }

    /// The pid of the server process, `None` when it is not running.
    pub fn pid(&self) -> Option<u32> {
        let mut st = self.lock();
        running_pid(&mut st)
    }

    /// True while the process runs (paused counts as running).
    pub fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// True between [`pause`](Self::pause) and [`resume`](Self::resume).
    pub fn is_paused(&self) -> bool {
        self.lock().paused
    }

    /// SIGKILLs the server (and any child it forked) and reaps it: new
    /// connections are refused, open ones are closed. Does nothing if it is
    /// not running. Bring it back with a restart.
    ///
    /// # Errors
    /// [`HarnessError::Io`] if the process could not be reaped.
    pub fn kill(&self) -> HarnessResult<()> {
        let mut st = self.lock();
        kill_locked(&mut st, self.port)
    }

    /// SIGSTOPs the server: connections are still accepted by the kernel,
    /// but nothing is answered until [`resume`](Self::resume). Returns once
    /// the process is stopped.
    ///
    /// # Errors
    /// [`HarnessError::NotRunning`], the signal failing, or
    /// [`HarnessError::Timeout`] when its threads do not stop within 2 s.
    pub fn pause(&self) -> HarnessResult<()> {
        let mut st = self.lock();
        let pid = running_pid(&mut st).ok_or(HarnessError::NotRunning { port: self.port })?;
        spawn::signal_process(pid, libc::SIGSTOP).map_err(|e| HarnessError::io(format!("SIGSTOP to pid {pid}"), e))?;
        st.paused = true;
        spawn::wait_stopped(pid, true)
    }

    /// SIGCONTs a paused server.
    ///
    /// # Errors
    /// [`HarnessError::NotRunning`], the signal failing, or
    /// [`HarnessError::Timeout`] when its threads do not run within 2 s.
    pub fn resume(&self) -> HarnessResult<()> {
        let mut st = self.lock();
        resume_locked(&mut st, self.port)
    }

    /// Restarts the server on the same port with its data: if it is running
    /// (or paused) it is resumed, told to `SAVE`, and killed; then it starts
    /// again and loads the saved data. If it is not running (e.g. after
    /// [`kill`](Self::kill)), it starts from what is on disk: everything with
    /// [`persistence(true)`](RedisServerBuilder::persistence), else only what
    /// an earlier restart or `SAVE` wrote.
    ///
    /// # Errors
    /// `SAVE` failing, or the start errors of [`RedisServerBuilder::start`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the server in whichever state it reached:
    /// still running (saved or not), stopped, or starting again.
    pub async fn restart_keeping_data(&self) -> HarnessResult<()> {
        let _guard = self.lifecycle.lock().await;
        if self.is_running() {
            self.resume_if_paused()?;
            let mut client = self.client().await?;
            client.cmd(&["SAVE"]).await?.into_result("SAVE")?;
        }
        self.kill()?;
        self.relaunch().await
    }

    /// Kills the server, deletes its data files (RDB, AOF; a cluster node
    /// keeps its `nodes.conf`, so its identity and slots), and starts it
    /// again, empty, on the same port.
    ///
    /// # Errors
    /// Failing to delete the files, or the start errors of
    /// [`RedisServerBuilder::start`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the server in whichever state it reached:
    /// stopped with some or all data files deleted, or starting again.
    pub async fn restart_empty(&self) -> HarnessResult<()> {
        let _guard = self.lifecycle.lock().await;
        self.kill()?;
        let dir = self.dir.path();
        let entries = fs::read_dir(dir).map_err(|e| HarnessError::io(format!("listing {}", dir.display()), e))?;
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name == LOG_FILE || name == NODES_FILE || name == SENTINEL_CONFIG_FILE {
                continue;
            }
            let path = entry.path();
            let r = if path.is_dir() {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
            r.map_err(|e| HarnessError::io(format!("removing {}", path.display()), e))?;
        }
        self.relaunch().await
    }

    /// A new connection to the server.
    ///
    /// # Errors
    /// As [`RespClient::connect`]; refused after [`kill`](Self::kill).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the half-open connection.
    pub async fn client(&self) -> HarnessResult<RespClient> {
        RespClient::connect(self.addr()).await
    }

    /// Runs one command on a new connection and returns the parsed reply
    /// (an error reply is `Ok(RespValue::Error(..))`):
    /// `server.cmd(&["SET", "k", "v"]).await`.
    ///
    /// # Errors
    /// As [`RespClient::cmd`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe for the server handle: the connection is the call's own
    /// and dropped with it; a command already sent may still run.
    pub async fn cmd<A: AsRef<[u8]>>(&self, args: &[A]) -> HarnessResult<RespValue> {
        self.client().await?.cmd(args).await
    }

    /// Runs one command on a new connection and returns the exact reply
    /// bytes.
    ///
    /// # Errors
    /// As [`RespClient::cmd`].
    ///
    /// # Cancel safety
    ///
    /// As [`RedisServer::cmd`].
    pub async fn cmd_raw<A: AsRef<[u8]>>(&self, args: &[A]) -> HarnessResult<Vec<u8>> {
        self.client().await?.cmd_raw(args).await
    }

    /// `INFO section` (all default sections for `""`), as a map of
    /// `field -> value`.
    ///
    /// # Errors
    /// As [`RespClient::cmd`], or [`HarnessError::Reply`].
    ///
    /// # Cancel safety
    ///
    /// As [`RedisServer::cmd`].
    pub async fn info(&self, section: &str) -> HarnessResult<HashMap<String, String>> {
        let reply = if section.is_empty() {
            self.cmd(&["INFO"]).await?
        } else {
            self.cmd(&["INFO", section]).await?
        };
        let reply = reply.into_result("INFO")?;
        let text = reply
            .as_str()
            .ok_or_else(|| HarnessError::Protocol(format!("unexpected INFO reply {reply:?}")))?;
        Ok(parse_info(text))
    }

    /// Calls of `command` (as `INFO commandstats` names it: lower case,
    /// `cmdstat_<command>`) since the start or the last `CONFIG RESETSTAT`;
    /// 0 for a command not called.
    ///
    /// # Errors
    /// As [`RedisServer::info`].
    ///
    /// # Cancel safety
    ///
    /// As [`RedisServer::cmd`].
    pub async fn command_calls(&self, command: &str) -> HarnessResult<u64> {
        let stats = self.info("commandstats").await?;
        Ok(stats
            .get(&format!("cmdstat_{command}"))
            .and_then(|v| v.split(',').find_map(|kv| kv.strip_prefix("calls=")))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0))
    }

    fn lock(&self) -> MutexGuard<'_, ProcState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn resume_if_paused(&self) -> HarnessResult<()> {
        let mut st = self.lock();
        if st.paused {
            resume_locked(&mut st, self.port)?;
        }
        Ok(())
    }

    /// Starts the process again on the same port, retrying for a while if
    /// the port is (still) taken.
    async fn relaunch(&self) -> HarnessResult<()> {
        let deadline = Instant::now() + RESTART_CLASH_WINDOW;
        loop {
            match self.launch().await {
                Ok(()) => return Ok(()),
                Err(Failure::PortClash(e)) => {
                    if Instant::now() >= deadline {
                        return Err(e);
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(Failure::Other(e)) => return Err(e),
            }
        }
    }

    /// Spawns the process (which must not be running) and waits for `PING`.
    async fn launch(&self) -> Result<(), Failure> {
        let log_path = self.log_path();
        let log_start = fs::metadata(&log_path).map(|m| m.len()).unwrap_or(0);
        let pid = self.spawn_process(&log_path).map_err(Failure::Other)?;
        let started = Instant::now();
        let timeout = self.launch.start_timeout;
        loop {
            let exited = {
                let mut st = self.lock();
                match st.child.as_mut().map(Child::try_wait) {
                    Some(Ok(Some(status))) => Some(status.to_string()),
                    Some(Ok(None)) => None,
                    Some(Err(e)) => {
                        return Err(Failure::Other(HarnessError::io(format!("checking on pid {pid}"), e)));
                    }
                    None => Some("killed".to_owned()),
                }
            };
            if let Some(status) = exited {
                let _ = self.kill();
                let new_log = read_from(&log_path, log_start);
                let err = HarnessError::StartFailed {
                    port: self.port,
                    status,
                    log_tail: tail_of(&new_log, 30),
                };
                let clash = new_log.contains("Address already in use") || new_log.contains("EADDRINUSE");
                return Err(if clash {
                    Failure::PortClash(err)
                } else {
                    Failure::Other(err)
                });
            }
            if self.answers_ping().await {
                return Ok(());
            }
            if started.elapsed() >= timeout {
                let _ = self.kill();
                return Err(Failure::Other(HarnessError::StartTimeout {
                    port: self.port,
                    waited: timeout,
                    log_tail: tail_of(&read_from(&log_path, log_start), 30),
                }));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn spawn_process(&self, log_path: &Path) -> HarnessResult<u32> {
        let mut st = self.lock();
        if running_pid(&mut st).is_some() {
            return Err(HarnessError::Setup(format!(
                "server on port {} is already running",
                self.port
            )));
        }
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path)
            .map_err(|e| HarnessError::io(format!("opening {}", log_path.display()), e))?;
        let _ = writeln!(
            log,
            "=== verrou harness: starting {} on port {} ===",
            self.launch.binary.display(),
            self.port
        );
        let err_log = log
            .try_clone()
            .map_err(|e| HarnessError::io("duplicating the log file handle", e))?;
        let mut cmd = Command::new(&self.launch.binary);
        if let Some(config) = &self.launch.sentinel {
            // The file comes first on a server's command line; a restart
            // keeps what the sentinel rewrote in it.
            let path = self.dir.path().join(SENTINEL_CONFIG_FILE);
            if !path.exists() {
                fs::write(&path, config).map_err(|e| HarnessError::io(format!("writing {}", path.display()), e))?;
            }
            cmd.arg(&path).arg("--sentinel");
        }
        match &self.launch.tls {
            None => cmd.arg("--port").arg(self.port.to_string()),
            Some(tls) => cmd
                .args(["--port", "0", "--tls-auth-clients", "no", "--tls-port"])
                .arg(self.port.to_string())
                .arg("--tls-cert-file")
                .arg(&tls.cert)
                .arg("--tls-key-file")
                .arg(&tls.key)
                .arg("--tls-ca-cert-file")
                .arg(&tls.ca),
        };
        cmd.arg("--dir")
            .arg(self.dir.path())
            .args(&self.launch.args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err_log));
        let child =
            spawn::spawn(cmd).map_err(|e| HarnessError::io(format!("starting {}", self.launch.binary.display()), e))?;
        let pid = child.id();
        st.child = Some(child);
        st.paused = false;
        Ok(pid)
    }

    async fn answers_ping(&self) -> bool {
        if self.launch.tls.is_some() {
            // No TLS in the harness's client: a listening port will do.
            return tokio::net::TcpStream::connect(self.addr()).await.is_ok();
        }
        let Ok(mut client) = RespClient::connect_timeout(self.addr(), Duration::from_millis(500)).await else {
            return false;
        };
        match client.cmd(&["PING"]).await {
            // Anything but "still loading" means the server is up (a server
            // with `requirepass` answers NOAUTH, a stale replica MASTERDOWN).
            Ok(RespValue::Error(e)) => !e.starts_with("LOADING"),
            Ok(_) => true,
            Err(_) => false,
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let mut st = self.lock();
        let _ = kill_locked(&mut st, self.port);
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
    st.paused = false;
    let Some(mut child) = st.child.take() else {
        return Ok(());
    };
    let pid = child.id();
    // The whole group: the server and any child it forked (BGSAVE, AOF
    // rewrite, diskless sync). SIGKILL also ends a stopped process.
    let _ = spawn::signal_group(pid, libc::SIGKILL);
    let _ = child.kill();
    child
        .wait()
        .map_err(|e| HarnessError::io(format!("reaping the server on port {port} (pid {pid})"), e))?;
    Ok(())
}

fn resume_locked(st: &mut ProcState, port: u16) -> HarnessResult<()> {
    let pid = running_pid(st).ok_or(HarnessError::NotRunning { port })?;
    spawn::signal_process(pid, libc::SIGCONT).map_err(|e| HarnessError::io(format!("SIGCONT to pid {pid}"), e))?;
    st.paused = false;
    spawn::wait_stopped(pid, false)
}

/// Polls `check` every few milliseconds until it returns `Ok(true)` or
/// `timeout` passes. Errors from `check` count as "not yet"; the last one is
/// reported on timeout.
pub(crate) async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut check: F) -> HarnessResult<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = HarnessResult<bool>>,
{
    let started = Instant::now();
    let mut last_err = None;
    loop {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last_err = Some(e),
        }
        if started.elapsed() >= timeout {
            let what = match last_err {
                Some(e) => format!("{what} (last error: {e})"),
                None => what.to_owned(),
            };
            return Err(HarnessError::Timeout { what, after: timeout });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
