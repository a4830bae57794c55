//! Real `etcd` processes for tests: one member ([`EtcdCluster::single`]) or
//! three ([`EtcdCluster::three`]) on free 127.0.0.1 ports, each in its own
//! directory of one temporary directory; killed (SIGKILL), reaped and
//! cleaned up on drop. Faults per member: kill and restart with its data,
//! pause and resume (SIGSTOP/SIGCONT); [`EtcdCluster::leader`] says which
//! member leads.
//!
//! The binary is `$VERROU_ETCD_BIN` when set, else the etcd 3.7 that the
//! `etcd-bin-vendored-linux-amd64` crate ships inside its registry package
//! (no system package needed: Debian's `etcd-server` is 3.4, older than the
//! lease and keepalive fixes the backend relies on), else `etcd` on `PATH`.
//! Members run with short Raft timers (25 ms heartbeat, 250 ms election) so
//! a failover takes a fraction of a second, and without fsync (a killed
//! process loses nothing the kernel has: these tests kill processes, not
//! machines).

use std::fmt;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod gateway;

pub use self::gateway::MemberCounts;
use self::gateway::http;
use super::error::{HarnessError, HarnessResult};
use super::ports::pick_port;
use super::process::wait_until;
use super::scratch::ServerDir;
use super::spawn;

/// Environment variable naming the etcd binary (a path, or a name on `PATH`).
pub const ETCD_BIN_ENV: &str = "VERROU_ETCD_BIN";

/// How long a cluster may take to elect a leader and answer `/health`.
pub const ETCD_START_TIMEOUT: Duration = Duration::from_secs(30);

const INSTALL_HINT: &str = "build lock-testkit for linux x86_64 (it then ships etcd 3.7 through the \
     `etcd-bin-vendored-linux-amd64` crate), or set VERROU_ETCD_BIN to an etcd 3.5+ binary \
     (e.g. from `apt-get install -y etcd-server`)";

/// The etcd binary to run: `$VERROU_ETCD_BIN`, else the vendored 3.7, else
/// `etcd` on `PATH`.
///
/// # Errors
/// [`HarnessError::NotFound`], saying how to get one, when there is none.
pub fn etcd_binary() -> HarnessResult<PathBuf> {
    if let Some(v) = std::env::var_os(ETCD_BIN_ENV).filter(|v| !v.is_empty()) {
        return super::paths::resolve(&v).ok_or_else(|| HarnessError::NotFound {
            what: format!("etcd binary {v:?} (from {ETCD_BIN_ENV})"),
            hint: format!(
                "{ETCD_BIN_ENV} must name an executable file or a program on PATH; or unset it and {INSTALL_HINT}"
            ),
        });
    }
    if let Some(p) = vendored() {
        return Ok(p);
    }
    super::paths::resolve(&"etcd".into()).ok_or_else(|| HarnessError::NotFound {
        what: "etcd".into(),
        hint: INSTALL_HINT.into(),
    })
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn vendored() -> Option<PathBuf> {
    let p = etcd_bin_vendored_linux_amd64::etcd_bin_path().ok()?;
    super::paths::is_executable(p).then(|| p.to_path_buf())
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
fn vendored() -> Option<PathBuf> {
    None
}

struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    /// The proxy other members reach this one through (partitionable
    /// clusters only).
    peer_proxy: Option<super::peer_proxy::PeerProxy>,
    state: Mutex<MemberState>,
}

#[derive(Default)]
struct MemberState {
    child: Option<Child>,
    paused: bool,
}

impl Member {
    /// The peer port other members dial.
    fn advertised_peer_port(&self) -> u16 {
        self.peer_proxy
            .as_ref()
            .map_or(self.peer_port, super::peer_proxy::PeerProxy::port)
    }

    fn pid(&self) -> Option<u32> {
        let mut st = self.lock();
        st.child
            .as_mut()
            .and_then(|c| matches!(c.try_wait(), Ok(None)).then(|| c.id()))
    }

    fn lock(&self) -> MutexGuard<'_, MemberState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One or three etcd members forming one cluster.
pub struct EtcdCluster {
    binary: PathBuf,
    dir: ServerDir,
    token: String,
    members: Vec<Member>,
    /// More command-line arguments for every member (`--auth-token-ttl`).
    extra_args: Vec<String>,
}

impl fmt::Debug for EtcdCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdCluster")
            .field("endpoints", &self.endpoints())
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl EtcdCluster {
    /// One member.
    ///
    /// # Errors
    /// [`HarnessError::NotFound`] without a binary; start-up failures with
    /// the member's log tail.
    ///
    /// # Cancel safety
    /// Cancel safe: the processes die with the dropped value.
    pub async fn single() -> HarnessResult<EtcdCluster> {
        EtcdCluster::start(1).await
    }

    /// Three members.
    ///
    /// # Errors
    /// As [`EtcdCluster::single`].
    ///
    /// # Cancel safety
    /// Cancel safe: the processes die with the dropped value.
    pub async fn three() -> HarnessResult<EtcdCluster> {
        EtcdCluster::start(3).await
    }

    /// `n` members (1 to 7), started together, once a leader is elected.
    ///
    /// # Errors
    /// As [`EtcdCluster::single`].
    ///
    /// # Cancel safety
    /// Cancel safe: the processes die with the dropped value.
    pub async fn start(n: usize) -> HarnessResult<EtcdCluster> {
        EtcdCluster::start_with(n, false, Vec::new()).await
    }

    /// One member with authentication on: user `root` (role `root`) with
    /// `password`, and simple tokens that the server drops after
    /// `token_ttl` (whole seconds, at least 1) without use
    /// (`--auth-token-ttl`), so a test can see its client's token expire.
    ///
    /// # Errors
    /// As [`EtcdCluster::single`]; [`HarnessError::Reply`] when the server
    /// refuses a step of turning authentication on.
    ///
    /// # Cancel safety
    /// Cancel safe: the process dies with the dropped value.
    pub async fn single_with_auth(password: &str, token_ttl: Duration) -> HarnessResult<EtcdCluster> {
        let secs = token_ttl.as_secs().max(1);
        let cluster = EtcdCluster::start_with(1, false, vec!["--auth-token-ttl".into(), secs.to_string()]).await?;
        let port = cluster.members[0].client_port;
        let password = password.replace('\\', "\\\\").replace('"', "\\\"");
        let steps = [
            ("/v3/auth/role/add", r#"{"name":"root"}"#.to_owned()),
            (
                "/v3/auth/user/add",
                format!(r#"{{"name":"root","password":"{password}"}}"#),
            ),
            ("/v3/auth/user/grant", r#"{"user":"root","role":"root"}"#.to_owned()),
            ("/v3/auth/enable", "{}".to_owned()),
        ];
        for (path, body) in steps {
            let answer = http(port, "POST", path, &body).await?;
            let status_ok = answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200");
            if !status_ok {
                return Err(HarnessError::Reply {
                    command: format!("etcd POST {path}"),
                    message: answer,
                });
            }
        }
        Ok(cluster)
    }

    /// `n` members (2 to 7) whose peer traffic goes through proxies, so
    /// [`EtcdCluster::partition`] can cut members apart. The proxies run
    /// on the caller's tokio runtime: use the cluster in that runtime only.
    ///
    /// # Errors
    /// As [`EtcdCluster::single`].
    ///
    /// # Cancel safety
    /// Cancel safe: the processes die with the dropped value.
    pub async fn partitionable(n: usize) -> HarnessResult<EtcdCluster> {
        if n < 2 {
            return Err(HarnessError::Setup("a partition needs at least two members".into()));
        }
        EtcdCluster::start_with(n, true, Vec::new()).await
    }

    async fn start_with(n: usize, proxied: bool, extra_args: Vec<String>) -> HarnessResult<EtcdCluster> {
        if !(1..=7).contains(&n) {
            return Err(HarnessError::Setup(format!(
                "an etcd cluster has 1 to 7 members, not {n}"
            )));
        }
        let binary = etcd_binary()?;
        let dir = ServerDir::new("etcd")?;
        let mut members = Vec::with_capacity(n);
        for i in 0..n {
            let peer_port = pick_port(false)?;
            let peer_proxy = if proxied {
                let target = std::net::SocketAddr::from(([127, 0, 0, 1], peer_port));
                Some(super::peer_proxy::PeerProxy::start(target).await?)
            } else {
                None
            };
            members.push(Member {
                name: format!("m{i}"),
                client_port: pick_port(false)?,
                peer_port,
                peer_proxy,
                state: Mutex::default(),
            });
        }
        let token = format!("verrou-{}", members[0].client_port);
        let cluster = EtcdCluster {
            binary,
            dir,
            token,
            members,
            extra_args,
        };
        for i in 0..n {
            cluster.spawn(i)?;
        }
        cluster.wait_healthy(ETCD_START_TIMEOUT).await?;
        Ok(cluster)
    }

    /// How many members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Never true: a cluster has at least one member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Every member's client endpoint, `127.0.0.1:port`.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.members.len()).map(|i| self.endpoint(i)).collect()
    }

    /// Member `i`'s client endpoint, `127.0.0.1:port`.
    pub fn endpoint(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.members[i].client_port)
    }

    /// Member `i`'s client port.
    pub fn client_port(&self, i: usize) -> u16 {
        self.members[i].client_port
    }

    /// An `etcd://` URL naming every member.
    pub fn url(&self) -> String {
        format!("etcd://{}", self.endpoints().join(","))
    }

    /// Member `i`'s log file.
    pub fn log_path(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("{}.log", self.members[i].name))
    }

    /// The last `n` lines of member `i`'s log.
    pub fn log_tail(&self, i: usize, n: usize) -> String {
        let text = fs::read_to_string(self.log_path(i)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    fn spawn(&self, i: usize) -> HarnessResult<()> {
        let m = &self.members[i];
        let mut st = m.lock();
        if st.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None))) {
            return Err(HarnessError::Setup(format!(
                "etcd member {} is already running",
                m.name
            )));
        }
        let initial: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.advertised_peer_port()))
            .collect();
        let log_path = self.log_path(i);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| HarnessError::io(format!("opening {}", log_path.display()), e))?;
        let err_log = log
            .try_clone()
            .map_err(|e| HarnessError::io("duplicating the log file handle", e))?;
        let client = format!("http://127.0.0.1:{}", m.client_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let advertised = format!("http://127.0.0.1:{}", m.advertised_peer_port());
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(self.dir.path().join(format!("{}.etcd", m.name)))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &advertised,
            ])
            .args(["--initial-cluster", &initial.join(",")])
            .args(["--initial-cluster-state", "new", "--initial-cluster-token", &self.token])
            .args(["--heartbeat-interval", "25", "--election-timeout", "250"])
            .args(["--feature-gates", "LeaseCheckpoint=true,LeaseCheckpointPersist=true"])
            .args(["--unsafe-no-fsync", "--log-level", "warn"])
            .args(&self.extra_args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err_log));
        // Sparse WAL segments: 128 MB less disk per member.
        spawn::sparse_preallocation(&mut cmd);
        let child =
            spawn::spawn(cmd).map_err(|e| HarnessError::io(format!("starting {}", self.binary.display()), e))?;
        st.child = Some(child);
        st.paused = false;
        Ok(())
    }

    /// Waits until every running member answers `/health` as healthy (it
    /// sees a leader).
    async fn wait_healthy(&self, timeout: Duration) -> HarnessResult<()> {
        let started = Instant::now();
        for i in 0..self.members.len() {
            if !self.is_running(i) {
                continue;
            }
            let left = timeout.saturating_sub(started.elapsed());
            let port = self.members[i].client_port;
            let waited = wait_until("etcd /health", left, || async move {
                Ok(http(port, "GET", "/health", "").await?.contains("\"health\":\"true\""))
            })
            .await;
            if let Err(e) = waited {
                if let Some(status) = self.exit_status(i) {
                    return Err(HarnessError::StartFailed {
                        port,
                        status,
                        log_tail: self.log_tail(i, 30),
                    });
                }
                return Err(HarnessError::Setup(format!(
                    "etcd member {i} on port {port} is not healthy: {e}; log tail:\n{}",
                    self.log_tail(i, 30)
                )));
            }
        }
        Ok(())
    }

    fn exit_status(&self, i: usize) -> Option<String> {
        let mut st = self.members[i].lock();
        match st.child.as_mut().map(Child::try_wait) {
            Some(Ok(Some(status))) => Some(status.to_string()),
            Some(Ok(None)) => None,
            _ => Some("not running".into()),
        }
    }

    /// True while member `i`'s process runs (paused or not).
    pub fn is_running(&self, i: usize) -> bool {
        self.exit_status(i).is_none()
    }

    /// SIGKILL member `i` (its data stays for [`EtcdCluster::restart`]).
    ///
    /// # Errors
    /// When the process cannot be reaped.
    pub fn kill(&self, i: usize) -> HarnessResult<()> {
        kill_member(&self.members[i])
    }

    /// Start member `i` again with its data, and wait until it is healthy.
    ///
    /// # Errors
    /// As [`EtcdCluster::single`].
    ///
    /// # Cancel safety
    /// Cancel safe: the process dies with the cluster.
    pub async fn restart(&self, i: usize) -> HarnessResult<()> {
        self.kill(i)?;
        self.spawn(i)?;
        self.wait_healthy(ETCD_START_TIMEOUT).await
    }

    /// SIGSTOP member `i`; returns once each of its threads is stopped.
    ///
    /// # Errors
    /// [`HarnessError::NotRunning`] when it does not run. [`HarnessError::Timeout`] when its threads do not get there within 2 s.
    pub fn pause(&self, i: usize) -> HarnessResult<()> {
        self.signal(i, libc::SIGSTOP, true)
    }

    /// SIGCONT member `i`; returns once its threads run again.
    ///
    /// # Errors
    /// [`HarnessError::NotRunning`] when it does not run. [`HarnessError::Timeout`] when its threads do not get there within 2 s.
    pub fn resume(&self, i: usize) -> HarnessResult<()> {
        self.signal(i, libc::SIGCONT, false)
    }

    fn signal(&self, i: usize, signal: libc::c_int, paused: bool) -> HarnessResult<()> {
        let m = &self.members[i];
        let mut st = m.lock();
        let pid = st
            .child
            .as_mut()
            .and_then(|c| matches!(c.try_wait(), Ok(None)).then(|| c.id()))
            .ok_or(HarnessError::NotRunning { port: m.client_port })?;
        spawn::signal_process(pid, signal).map_err(|e| HarnessError::io(format!("signal {signal} to pid {pid}"), e))?;
        st.paused = paused;
        spawn::wait_stopped(pid, paused)
    }

    /// Cut the members of `side` off from the others, both ways (client
    /// ports stay reachable): each member's peer proxy refuses the member
    /// processes on the other side, and open peer connections are cut.
    /// Replaces any earlier partition; an empty `side` heals.
    ///
    /// # Errors
    /// [`HarnessError::Setup`] on a cluster not started with
    /// [`EtcdCluster::partitionable`]. A member restarted later runs as a
    /// new process: partition again to block it.
    pub fn partition(&self, side: &[usize]) -> HarnessResult<()> {
        if self.members.iter().any(|m| m.peer_proxy.is_none()) {
            return Err(HarnessError::Setup("partitions need EtcdCluster::partitionable".into()));
        }
        let pids: Vec<Option<u32>> = self.members.iter().map(Member::pid).collect();
        for (i, m) in self.members.iter().enumerate() {
            let mine = side.contains(&i);
            let blocked = pids
                .iter()
                .enumerate()
                .filter(|(j, _)| side.contains(j) != mine)
                .filter_map(|(_, pid)| *pid)
                .collect();
            if let Some(proxy) = &m.peer_proxy {
                proxy.block(blocked);
            }
        }
        Ok(())
    }

    /// Lift any partition.
    ///
    /// # Errors
    /// As [`EtcdCluster::partition`].
    pub fn heal(&self) -> HarnessResult<()> {
        self.partition(&[])
    }

    /// The directory holding every member's data and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for m in &self.members {
            let _ = kill_member(m);
        }
    }
}

fn kill_member(m: &Member) -> HarnessResult<()> {
    let mut st = m.lock();
    st.paused = false;
    let Some(mut child) = st.child.take() else {
        return Ok(());
    };
    let pid = child.id();
    let _ = spawn::signal_group(pid, libc::SIGKILL);
    let _ = child.kill();
    child
        .wait()
        .map_err(|e| HarnessError::io(format!("reaping etcd member {} (pid {pid})", m.name), e))?;
    Ok(())
}
