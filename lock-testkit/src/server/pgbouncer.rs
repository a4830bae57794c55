//! PgBouncer in transaction pooling mode in front of a [`PostgresServer`].

use std::fmt;
use std::fs;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::error::{HarnessError, HarnessResult};
use super::pg_paths::{give_to, pgbouncer_binary, run_as};
use super::ports::pick_port;
use super::postgres::{PG_USER, PostgresServer, owned_command};
use super::scratch::ServerDir;
use super::spawn;

/// Server connections PgBouncer keeps per database and user: few, so that
/// consecutive transactions of one client land on different server
/// connections and many clients share each.
pub const PGBOUNCER_POOL_SIZE: u32 = 3;

/// A `pgbouncer` process on a free loopback port, `pool_mode = transaction`,
/// forwarding every database to one [`PostgresServer`]. Killed on drop.
pub struct PgBouncer {
    port: u16,
    child: Mutex<Option<Child>>,
    dir: ServerDir,
}

impl fmt::Debug for PgBouncer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgBouncer")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl PgBouncer {
    /// Starts PgBouncer in front of `server` (transaction mode, trust
    /// authentication for [`PG_USER`], [`PGBOUNCER_POOL_SIZE`] server
    /// connections) and waits until it accepts connections.
    ///
    /// # Errors
    /// [`HarnessError::NotFound`] without pgbouncer (install hint);
    /// [`HarnessError::StartFailed`] / [`HarnessError::Timeout`] with its log.
    ///
    /// # Cancel safety
    /// Dropping the future kills a process already spawned.
    pub async fn start(server: &PostgresServer) -> HarnessResult<PgBouncer> {
        let binary = pgbouncer_binary()?;
        let owner = run_as()?;
        let dir = ServerDir::new("pgbouncer")?;
        give_to(dir.path(), owner)?;
        let port = pick_port(false)?;
        let d = dir.path().display();
        let ini = format!(
            "[databases]\n* = host=127.0.0.1 port={pg}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
             unix_socket_dir = {d}\nauth_type = trust\nauth_file = {d}/userlist.txt\npool_mode = transaction\n\
             default_pool_size = {PGBOUNCER_POOL_SIZE}\nmax_client_conn = 500\nlogfile = {d}/pgbouncer.log\n\
             ignore_startup_parameters = extra_float_digits,application_name\nadmin_users = {PG_USER}\n",
            pg = server.port()
        );
        for (name, text) in [
            ("pgbouncer.ini", ini),
            ("userlist.txt", format!("\"{PG_USER}\" \"\"\n")),
        ] {
            let path = dir.path().join(name);
            fs::write(&path, text).map_err(|e| HarnessError::io(format!("writing {}", path.display()), e))?;
            give_to(&path, owner)?;
        }
        let mut cmd = owned_command(&binary, owner, dir.path());
        cmd.arg(dir.path().join("pgbouncer.ini"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = spawn::spawn(cmd).map_err(|e| HarnessError::io("starting pgbouncer", e))?;
        let bouncer = PgBouncer {
            port,
            child: Mutex::new(Some(child)),
            dir,
        };
        bouncer.wait_ready().await?;
        Ok(bouncer)
    }

    async fn wait_ready(&self) -> HarnessResult<()> {
        let started = Instant::now();
        let timeout = Duration::from_secs(10);
        loop {
            let exited = {
                let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
                match child.as_mut().map(Child::try_wait) {
                    Some(Ok(None)) => None,
                    Some(Ok(Some(status))) => Some(status.to_string()),
                    _ => Some("gone".to_owned()),
                }
            };
            if let Some(status) = exited {
                return Err(HarnessError::StartFailed {
                    port: self.port,
                    status,
                    log_tail: self.log_tail(),
                });
            }
            if tokio::net::TcpStream::connect(self.addr()).await.is_ok() {
                return Ok(());
            }
            if started.elapsed() > timeout {
                return Err(HarnessError::Timeout {
                    what: format!("pgbouncer on port {} to listen; log:\n{}", self.port, self.log_tail()),
                    after: timeout,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `postgres://verrou@127.0.0.1:port/postgres`, through PgBouncer.
    pub fn url(&self) -> String {
        format!("postgres://{PG_USER}@127.0.0.1:{}/postgres", self.port)
    }

    /// The last lines of PgBouncer's log.
    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// The folder holding its configuration and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut c) = child.take() {
            let _ = spawn::signal_group(c.id(), libc::SIGKILL);
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
