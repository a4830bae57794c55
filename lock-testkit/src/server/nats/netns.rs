//! [`NetNatsServer`]: one `nats-server` with JetStream inside a
//! [`NetHost`], every write fsynced before it is acknowledged
//! (`sync_interval: always`), health-checked from its own host.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::net::{SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::super::error::{HarnessError, HarnessResult};
use super::super::netns_host::NetHost;
use super::super::scratch::ServerDir;
use super::super::spawn;
use super::{NATS_START_TIMEOUT, http, nats_server_binary};

/// The client port every [`NetNatsServer`] listens on, on its host's
/// address (each host has its own port space); its monitoring port is
/// this plus 4000.
pub const NET_NATS_PORT: u16 = 4222;

/// A `nats-server` with JetStream inside a [`NetHost`], on
/// `host:`[`NET_NATS_PORT`]. SIGKILLed (with its process group) and
/// reaped on drop.
pub struct NetNatsServer {
    host: NetHost,
    child: Mutex<Option<Child>>,
    dir: ServerDir,
}

impl fmt::Debug for NetNatsServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetNatsServer")
            .field("addr", &self.addr())
            .field("host", &self.host.name())
            .finish_non_exhaustive()
    }
}

impl NetNatsServer {
    /// Starts the server on `host` and waits until its `/healthz`, asked
    /// from its own host, says JetStream is ready.
    ///
    /// # Errors
    /// A missing or too old binary, the process exiting, or no healthy
    /// answer within [`NATS_START_TIMEOUT`].
    ///
    /// # Cancel safety
    /// Dropping the future kills the process it spawned.
    pub async fn start(host: &NetHost) -> HarnessResult<NetNatsServer> {
        let binary = nats_server_binary()?;
        let dir = ServerDir::new("netns-nats")?;
        let addr = host.addr();
        let conf = format!(
            "server_name: {name}\nlisten: {addr}:{NET_NATS_PORT}\nhttp: {addr}:{http}\n\
             jetstream {{\n  store_dir: {store:?}\n  sync_interval: always\n}}\n",
            name = host.name(),
            http = NET_NATS_PORT + 4000,
            store = dir.path().join("store"),
        );
        let conf_path = dir.path().join("nats.conf");
        fs::write(&conf_path, conf).map_err(|e| HarnessError::io(format!("writing {}", conf_path.display()), e))?;
        let server = NetNatsServer {
            host: host.clone(),
            child: Mutex::new(None),
            dir,
        };
        server.launch(&binary, &conf_path)?;
        server.wait_healthy().await?;
        Ok(server)
    }

    /// Its host.
    pub fn host(&self) -> &NetHost {
        &self.host
    }

    /// `host-address:4222`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(self.host.addr(), NET_NATS_PORT))
    }

    /// `nats://host-address:4222`.
    pub fn url(&self) -> String {
        format!("nats://{}", self.addr())
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("nats.log")
    }

    fn lock(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn launch(&self, binary: &PathBuf, conf: &PathBuf) -> HarnessResult<()> {
        let log_path = self.log_path();
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
            .arg(binary)
            .arg("-c")
            .arg(conf)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err_log));
        // `ip netns exec` execs the server (no fork): the pid is the server's.
        let child = spawn::spawn(cmd).map_err(|e| HarnessError::io("starting ip netns exec nats-server", e))?;
        *self.lock() = Some(child);
        Ok(())
    }

    async fn wait_healthy(&self) -> HarnessResult<()> {
        let started = Instant::now();
        let monitor = SocketAddr::V4(SocketAddrV4::new(self.host.addr(), NET_NATS_PORT + 4000));
        loop {
            let exited = match self.lock().as_mut().map(Child::try_wait) {
                Some(Ok(Some(status))) => Some(status.to_string()),
                Some(Ok(None)) => None,
                _ => Some("gone".to_owned()),
            };
            if let Some(status) = exited {
                self.kill();
                return Err(HarnessError::StartFailed {
                    port: NET_NATS_PORT,
                    status,
                    log_tail: self.log_tail(30),
                });
            }
            let answer = self
                .host
                .run(move || async move { http(monitor, "/healthz").await })
                .await;
            if let Ok(Ok(text)) = answer
                && (text.starts_with("HTTP/1.1 200") || text.starts_with("HTTP/1.0 200"))
            {
                return Ok(());
            }
            if started.elapsed() >= NATS_START_TIMEOUT {
                self.kill();
                return Err(HarnessError::StartTimeout {
                    port: NET_NATS_PORT,
                    waited: NATS_START_TIMEOUT,
                    log_tail: self.log_tail(30),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
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
}

impl Drop for NetNatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}
