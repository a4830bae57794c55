//! [`NetRedisServer`]: a `redis-server` inside a [`NetHost`](super::NetHost),
//! administered over a connection on its own host.

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::net::{SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::error::{HarnessError, HarnessResult};
use super::paths::{redis_sentinel_binary, redis_server_binary, tair_module_path};
use super::process::SENTINEL_CONFIG_FILE;
use super::resp::RespValue;
use super::scratch::ServerDir;
use super::spawn;

use super::netns::{NET_REDIS_PORT, POLL};
use super::netns_host::NetHost;

/// Configures a [`NetRedisServer`]: modules, arguments, cluster mode.
#[derive(Clone, Debug, Default)]
pub struct NetRedisServerBuilder {
    args: Vec<OsString>,
    tair: bool,
    cluster_node_timeout: Option<Duration>,
    /// Sentinel mode: the sentinel's initial configuration file.
    sentinel: Option<String>,
}

impl NetRedisServerBuilder {
    /// A builder with the defaults (persistence off).
    pub fn new() -> Self {
        Self::default()
    }

    /// Loads this workspace's Tair module.
    pub fn tair_module(mut self) -> Self {
        self.tair = true;
        self
    }

    /// Adds command-line arguments (after the harness's, so they win).
    pub fn args<I, A>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = A>,
        A: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Cluster mode with this `cluster-node-timeout`.
    pub fn cluster(mut self, node_timeout: Duration) -> Self {
        self.cluster_node_timeout = Some(node_timeout);
        self
    }

    /// Sentinel mode: runs [`redis_sentinel_binary`] with `config` as its
    /// (rewritable) configuration file, no persistence or module options.
    pub(super) fn sentinel_mode(mut self, config: String) -> Self {
        self.sentinel = Some(config);
        self
    }

    /// Starts the server on `host` and waits (up to 10 s) until it answers
    /// `PING` from its own host.
    ///
    /// # Errors
    /// A missing binary or module, the process exiting, or no answer.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills the process it spawned.
    pub async fn start(&self, host: &NetHost) -> HarnessResult<NetRedisServer> {
        let dir = ServerDir::new("netns-redis")?;
        let addr = host.addr().to_string();
        let mut args: Vec<OsString> = Vec::new();
        let binary = match &self.sentinel {
            Some(config) => {
                // The file comes first on a sentinel's command line.
                let path = dir.path().join(SENTINEL_CONFIG_FILE);
                fs::write(&path, config).map_err(|e| HarnessError::io(format!("writing {}", path.display()), e))?;
                args.push(path.into_os_string());
                args.push("--sentinel".into());
                redis_sentinel_binary()?
            }
            None => redis_server_binary()?,
        };
        let mut push = |a: &[&str]| args.extend(a.iter().map(OsString::from));
        push(&["--port", &NET_REDIS_PORT.to_string(), "--bind", &addr, "127.0.0.1"]);
        push(&["--protected-mode", "no", "--daemonize", "no", "--logfile", ""]);
        if self.sentinel.is_none() {
            push(&["--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0"]);
        }
        if let Some(t) = self.cluster_node_timeout {
            push(&["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]);
            push(&["--cluster-node-timeout", &t.as_millis().to_string()]);
            push(&["--cluster-announce-ip", &addr]);
        }
        if self.tair {
            args.push("--loadmodule".into());
            args.push(tair_module_path()?.into_os_string());
        }
        args.push("--dir".into());
        args.push(dir.path().as_os_str().to_owned());
        args.extend(self.args.iter().cloned());
        let server = NetRedisServer {
            host: host.clone(),
            binary,
            args,
            child: Mutex::new(None),
            dir,
        };
        server.launch().await?;
        Ok(server)
    }
}

/// A `redis-server` inside a [`NetHost`], on `host:`[`NET_REDIS_PORT`].
/// SIGKILLed (with its process group) and reaped on drop.
pub struct NetRedisServer {
    host: NetHost,
    binary: PathBuf,
    args: Vec<OsString>,
    child: Mutex<Option<Child>>,
    dir: ServerDir,
}

impl fmt::Debug for NetRedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetRedisServer")
            .field("addr", &self.addr())
            .field("host", &self.host.name())
            .finish_non_exhaustive()
    }
}

impl NetRedisServer {
    /// A builder.
    pub fn builder() -> NetRedisServerBuilder {
        NetRedisServerBuilder::new()
    }

    /// Its host.
    pub fn host(&self) -> &NetHost {
        &self.host
    }

    /// `host-address:7000`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(self.host.addr(), NET_REDIS_PORT))
    }

    /// `redis://host-address:7000`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr())
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    fn lock(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn launch(&self) -> HarnessResult<()> {
        {
            let log_path = self.dir.path().join("redis.log");
            let mut log = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
                .map_err(|e| HarnessError::io(format!("opening {}", log_path.display()), e))?;
            let _ = writeln!(log, "=== verrou harness: starting in {} ===", self.host.name());
            let err_log = log
                .try_clone()
                .map_err(|e| HarnessError::io("duplicating the log file handle", e))?;
            let mut cmd = Command::new(&self.host.inner.ip);
            cmd.args(["netns", "exec", self.host.name()])
                .arg(&self.binary)
                .args(&self.args)
                .current_dir(self.dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::from(log))
                .stderr(Stdio::from(err_log));
            // `ip netns exec` execs the server (no fork): the pid is the server's.
            let child = spawn::spawn(cmd).map_err(|e| HarnessError::io("starting ip netns exec redis-server", e))?;
            *self.lock() = Some(child);
        }
        let started = Instant::now();
        let timeout = Duration::from_secs(10);
        loop {
            let exited = match self.lock().as_mut().map(Child::try_wait) {
                Some(Ok(Some(status))) => Some(status.to_string()),
                Some(Ok(None)) => None,
                _ => Some("gone".to_owned()),
            };
            if let Some(status) = exited {
                self.kill();
                return Err(HarnessError::StartFailed {
                    port: NET_REDIS_PORT,
                    status,
                    log_tail: self.log_tail(30),
                });
            }
            if let Ok(v) = self.cmd(&["PING"]).await
                && !matches!(&v, RespValue::Error(e) if e.starts_with("LOADING"))
            {
                return Ok(());
            }
            if started.elapsed() >= timeout {
                self.kill();
                return Err(HarnessError::StartTimeout {
                    port: NET_REDIS_PORT,
                    waited: timeout,
                    log_tail: self.log_tail(30),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// SIGKILLs the server and reaps it (nothing if not running).
    pub fn kill(&self) {
        if let Some(mut child) = self.lock().take() {
            let _ = spawn::signal_group(child.id(), libc::SIGKILL);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOPs the server.
    ///
    /// # Errors
    /// Not running, the signal failing, or [`HarnessError::Timeout`] when
    /// its threads do not get there within 2 s.
    pub fn pause(&self) -> HarnessResult<()> {
        self.signal(libc::SIGSTOP)
    }

    /// SIGCONTs the server.
    ///
    /// # Errors
    /// Not running, the signal failing, or [`HarnessError::Timeout`] when
    /// its threads do not get there within 2 s.
    pub fn resume(&self) -> HarnessResult<()> {
        self.signal(libc::SIGCONT)
    }

    fn signal(&self, sig: libc::c_int) -> HarnessResult<()> {
        let pid = self
            .lock()
            .as_ref()
            .map(Child::id)
            .ok_or(HarnessError::NotRunning { port: NET_REDIS_PORT })?;
        spawn::signal_process(pid, sig).map_err(|e| HarnessError::io(format!("signal {sig} to pid {pid}"), e))?;
        spawn::wait_stopped(pid, sig == libc::SIGSTOP)
    }

    /// One command from the server's own host (over that host's loopback
    /// path to its own address: no partition affects it), 2 s bound.
    ///
    /// # Errors
    /// As [`NetHost::cmd`].
    ///
    /// # Cancel safety
    ///
    /// As [`NetHost::run`].
    pub async fn cmd(&self, args: &[&str]) -> HarnessResult<RespValue> {
        self.host.cmd(self.addr(), args, Duration::from_secs(2)).await
    }

    /// `INFO section` as `field -> value`.
    ///
    /// # Errors
    /// As [`cmd`](Self::cmd), or an error reply.
    ///
    /// # Cancel safety
    ///
    /// As [`NetHost::run`].
    pub async fn info(&self, section: &str) -> HarnessResult<std::collections::HashMap<String, String>> {
        let reply = self.cmd(&["INFO", section]).await?.into_result("INFO")?;
        let text = reply.as_str().unwrap_or_default();
        Ok(super::text::parse_info(text))
    }
}

impl Drop for NetRedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
