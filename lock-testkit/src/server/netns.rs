//! Test hosts in Linux network namespaces, and real partitions between them.
//!
//! A [`Network`] is one switch namespace holding two bridges (`br0`, the
//! normal one, and `br1`, the far side of a partition) and any number of
//! [`NetHost`]s, each its own network namespace with one veth link (`eth0`)
//! to a port of the switch. Every address lives only inside those
//! namespaces: nothing is added to the root namespace (no address, no route,
//! no interface), so the machine's own network is never touched, and two
//! tests (or two processes) running at once cannot collide: each network
//! is its own set of namespaces with its own IP stacks. Each network still
//! gets its own /24 (`10.A.B.0/24`, derived from the pid and a per-process
//! counter), so that addresses in logs say which network they belong to.
//!
//! **Faults.** [`Network::partition`] moves the switch ports of the given
//! hosts to `br1`: they still reach each other, but not the rest, and the
//! rest not them. [`Network::isolate`] sets one host's switch port down
//! (link down: that host reaches nobody). Both are silent, as a real
//! partition is: no RST, no ICMP, open connections stay open and unanswered
//! on both sides, new connections time out (a SYN is dropped, not refused).
//! [`Network::heal`] puts every port back on `br0`, up.
//!
//! **No `netem`.** This kernel has no `netem` qdisc: measured with
//! `tc qdisc add dev lo root netem delay 10ms` inside a fresh namespace,
//! which fails with "Specified qdisc kind is unknown"
//! ([`netem_available`] repeats that measurement; `harness_netns` prints it).
//! So there is no packet delay or loss here, only links up or down; latency
//! stays [`TcpProxy`](super::TcpProxy)'s job.
//!
//! **Where the client runs.** Code in the test process reaches a host's
//! servers by running *inside* another host: each [`NetHost`] has a
//! dedicated thread that entered the namespace with `setns(2)` and runs a
//! current-thread tokio runtime; [`NetHost::spawn`] runs a future there
//! (every socket it opens is in that namespace), and [`NetHost::enter`]
//! moves the calling thread into the namespace for good (for a client
//! thread that builds its own runtime afterwards). Sockets belong to the
//! namespace of the thread that created them, and threads inherit the
//! namespace of the thread that spawned them (tokio's blocking pool
//! included, when spawned from the namespaced thread). The alternative,
//! the client in the root namespace with a veth into the server's, would
//! need an address in the root namespace; this design needs none.
//!
//! **Servers.** [`NetRedisServer`] runs `ip netns exec NS redis-server ...`
//! through the harness's spawner, so it dies with the test process and is
//! SIGKILLed on drop. It listens on [`NET_REDIS_PORT`] on its host's address
//! (each host has its own port space, so the port is fixed); administration
//! ([`NetRedisServer::cmd`]) runs on the server's own host, over a local
//! connection that no partition affects.
//!
//! **Clean-up.** Dropping a [`NetHost`] (its last clone) or the
//! [`Network`] deletes its namespace, which destroys its links. Namespaces
//! left behind by a killed test process are found by name
//! (`verrou-<pid>-...`) and deleted when the next [`Network`] of any process
//! is created, if that pid is no longer running.
//!
//! **Needs root** (CI runs as root) and `ip` (iproute2). Without either,
//! [`Network::new`] fails with [`HarnessError::NotFound`] saying how to get
//! them: never a silent skip.

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::error::{HarnessError, HarnessResult};
use super::paths::{redis_server_binary, tair_module_path};
use super::resp::RespValue;
use super::resp_client::RespClient;
use super::spawn;

/// Prefix of every namespace the harness creates (`verrou-<pid>-<n>-<role>`).
pub const NETNS_PREFIX: &str = "verrou-";
/// The port every [`NetRedisServer`] listens on, on its host's address (the
/// cluster bus on this plus 10000).
pub const NET_REDIS_PORT: u16 = 7000;
/// How long one `ip` command may take.
const IP_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(10);

/// A switch (two bridges) in its own namespace, and the hosts on it.
pub struct Network {
    inner: Arc<NetInner>,
}

struct NetInner {
    ip: PathBuf,
    /// `verrou-<pid>-<n>`.
    name: String,
    switch: String,
    subnet: [u8; 3],
    ports: Mutex<Vec<String>>,
}

impl fmt::Debug for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Network")
            .field("name", &self.inner.name)
            .field("subnet", &self.subnet())
            .finish()
    }
}

impl Drop for NetInner {
    fn drop(&mut self) {
        let _ = run_ip(&self.ip, &["netns", "del", &self.switch]);
    }
}

/// Whether the caller can build namespaces: root and `ip` present. Returns
/// the path of `ip`.
///
/// # Errors
/// [`HarnessError::NotFound`] saying what is missing and how to get it.
pub fn netns_prerequisites() -> HarnessResult<PathBuf> {
    let ip = ip_binary()?;
    if !nix::unistd::geteuid().is_root() {
        return Err(HarnessError::NotFound {
            what: "root privileges for network namespaces".into(),
            hint: "the partition tests create network namespaces (`ip netns add`): run them as root \
                   (CI does), e.g. `sudo -E cargo test ...`"
                .into(),
        });
    }
    Ok(ip)
}

fn ip_binary() -> HarnessResult<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from));
    dirs.into_iter()
        .map(|d| d.join("ip"))
        .find(|p| p.is_file())
        .ok_or_else(|| HarnessError::NotFound {
            what: "`ip` (iproute2)".into(),
            hint: "install iproute2 (`apt-get install iproute2`)".into(),
        })
}

/// Whether the `netem` qdisc exists on this kernel, measured in a
/// throw-away namespace (`tc qdisc add dev lo root netem delay 10ms`).
///
/// # Errors
/// As [`netns_prerequisites`], or `tc` missing.
pub fn netem_available() -> HarnessResult<bool> {
    let ip = netns_prerequisites()?;
    let name = format!("{NETNS_PREFIX}{}-netem", std::process::id());
    run_ip(&ip, &["netns", "add", &name])?;
    let result = (|| {
        run_ip(&ip, &["-n", &name, "link", "set", "lo", "up"])?;
        let out = Command::new(&ip)
            .args([
                "netns", "exec", &name, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "10ms",
            ])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| HarnessError::io("running tc", e))?;
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("exec of") {
            return Err(HarnessError::NotFound {
                what: "`tc` (iproute2)".into(),
                hint: format!("install iproute2 (`apt-get install iproute2`): {}", err.trim()),
            });
        }
        Ok(out.status.success())
    })();
    let _ = run_ip(&ip, &["netns", "del", &name]);
    result
}

/// Runs `ip ARGS`, bounded; an error carries its stderr.
fn run_ip(ip: &Path, args: &[&str]) -> HarnessResult<()> {
    let mut child = Command::new(ip)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| HarnessError::io(format!("running ip {}", args.join(" ")), e))?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                if status.success() {
                    return Ok(());
                }
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                return Err(HarnessError::Setup(format!(
                    "ip {} failed ({status}): {}",
                    args.join(" "),
                    err.trim()
                )));
            }
            Ok(None) => {}
            Err(e) => return Err(HarnessError::io("waiting for ip", e)),
        }
        if started.elapsed() > IP_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(HarnessError::Timeout {
                what: format!("ip {}", args.join(" ")),
                after: IP_TIMEOUT,
            });
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Deletes the `verrou-<pid>-...` namespaces whose pid no longer runs (left
/// behind by a killed test process) and returns how many it deleted.
/// [`Network::new`] does this once per process.
///
/// # Errors
/// As [`netns_prerequisites`]. A namespace that cannot be deleted is
/// left (and not counted).
pub fn clean_stale_namespaces() -> HarnessResult<usize> {
    let ip = netns_prerequisites()?;
    let Ok(entries) = fs::read_dir("/run/netns") else {
        return Ok(0);
    };
    let mut deleted = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = stale_pid(&name) else { continue };
        if !Path::new(&format!("/proc/{pid}")).exists() && run_ip(&ip, &["netns", "del", &name]).is_ok() {
            deleted += 1;
        }
    }
    Ok(deleted)
}

/// The pid in a harness namespace name, `None` for other names.
fn stale_pid(name: &str) -> Option<u32> {
    name.strip_prefix(NETNS_PREFIX)?.split('-').next()?.parse().ok()
}

impl Network {
    /// Creates the switch namespace with its bridges. Deletes stale
    /// namespaces of dead test processes first (once per process).
    ///
    /// # Errors
    /// [`HarnessError::NotFound`] when not root or `ip` is missing;
    /// [`HarnessError::Setup`] with `ip`'s message when a command fails.
    pub fn new() -> HarnessResult<Self> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let ip = netns_prerequisites()?;
        static CLEANED: OnceLock<()> = OnceLock::new();
        CLEANED.get_or_init(|| {
            let _ = clean_stale_namespaces();
        });
        let pid = std::process::id();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{NETNS_PREFIX}{pid}-{n}");
        // 10.A.B.0/24: A from the pid, B from the counter (cosmetic: the
        // namespaces keep networks apart anyway).
        let subnet = [
            10,
            u8::try_from(pid % 250).unwrap_or(0) + 1,
            u8::try_from(n % 256).unwrap_or(0),
        ];
        let switch = format!("{name}-sw");
        run_ip(&ip, &["netns", "add", &switch])?;
        let inner = Arc::new(NetInner {
            ip,
            name,
            switch,
            subnet,
            ports: Mutex::new(Vec::new()),
        });
        let sw = inner.switch.as_str();
        for br in ["br0", "br1"] {
            inner.ip(&["-n", sw, "link", "add", br, "type", "bridge"])?;
            inner.ip(&["-n", sw, "link", "set", br, "up"])?;
        }
        inner.ip(&["-n", sw, "link", "set", "lo", "up"])?;
        Ok(Network { inner })
    }

    /// The network's /24, e.g. `10.7.0.0`.
    pub fn subnet(&self) -> Ipv4Addr {
        let [a, b, c] = self.inner.subnet;
        Ipv4Addr::new(a, b, c, 0)
    }

    /// Adds a host: a namespace with `lo` and `eth0` up, `eth0` linked to a
    /// new port of `br0` and addressed `10.A.B.(n+1)/24`. `role` goes into
    /// the namespace's name (short, e.g. `"client"`, `"m0"`).
    ///
    /// # Errors
    /// As [`Network::new`]; at most 250 hosts per network.
    pub fn add_host(&self, role: &str) -> HarnessResult<NetHost> {
        let inner = &self.inner;
        let mut ports = inner.lock_ports();
        let idx = ports.len();
        let last = u8::try_from(idx + 1)
            .ok()
            .filter(|l| *l < 251)
            .ok_or_else(|| HarnessError::Setup("at most 250 hosts per network".into()))?;
        let [a, b, c] = inner.subnet;
        let addr = Ipv4Addr::new(a, b, c, last);
        let ns = format!("{}-{idx}{role}", inner.name);
        let port = format!("p{idx}");
        inner.ip(&["netns", "add", &ns])?;
        // From here the host owns the namespace (deleted on drop).
        let host = HostInner {
            ip: inner.ip.clone(),
            ns,
            addr,
            exec: OnceLock::new(),
        };
        let ns = host.ns.as_str();
        inner.ip(&[
            "-n",
            ns,
            "link",
            "add",
            "eth0",
            "type",
            "veth",
            "peer",
            "name",
            &port,
            "netns",
            &inner.switch,
        ])?;
        inner.ip(&["-n", &inner.switch, "link", "set", &port, "master", "br0"])?;
        inner.ip(&["-n", &inner.switch, "link", "set", &port, "up"])?;
        inner.ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
        inner.ip(&["-n", ns, "link", "set", "eth0", "up"])?;
        inner.ip(&["-n", ns, "link", "set", "lo", "up"])?;
        ports.push(port);
        let host = NetHost {
            inner: Arc::new(host),
            _net: self.inner.clone(),
        };
        host.executor()?;
        Ok(host)
    }

    /// Partitions the network in two: `side` (and only `side`) on one
    /// side, every other host on the other. The hosts of `side` still reach
    /// each other. Silent: packets are dropped, connections stay open.
    ///
    /// # Errors
    /// An `ip` command failing.
    pub fn partition(&self, side: &[&NetHost]) -> HarnessResult<()> {
        let ports = self.inner.lock_ports();
        for host in side {
            let idx = host.index();
            let port = ports
                .get(idx)
                .ok_or_else(|| HarnessError::Setup(format!("{} is not on this network", host.name())))?;
            self.inner
                .ip(&["-n", &self.inner.switch, "link", "set", port, "master", "br1"])?;
        }
        Ok(())
    }

    /// Cuts one host from every other (its switch port set down).
    ///
    /// # Errors
    /// An `ip` command failing.
    pub fn isolate(&self, host: &NetHost) -> HarnessResult<()> {
        let ports = self.inner.lock_ports();
        let port = ports
            .get(host.index())
            .ok_or_else(|| HarnessError::Setup(format!("{} is not on this network", host.name())))?;
        self.inner.ip(&["-n", &self.inner.switch, "link", "set", port, "down"])
    }

    /// Ends every partition: every port on `br0`, up.
    ///
    /// # Errors
    /// An `ip` command failing.
    pub fn heal(&self) -> HarnessResult<()> {
        let ports = self.inner.lock_ports();
        for port in ports.iter() {
            self.inner
                .ip(&["-n", &self.inner.switch, "link", "set", port, "master", "br0"])?;
            self.inner.ip(&["-n", &self.inner.switch, "link", "set", port, "up"])?;
        }
        Ok(())
    }
}

impl NetInner {
    fn ip(&self, args: &[&str]) -> HarnessResult<()> {
        run_ip(&self.ip, args)
    }

    fn lock_ports(&self) -> MutexGuard<'_, Vec<String>> {
        self.ports.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One host: a network namespace on a [`Network`]. Cheap to clone; the
/// namespace is deleted when the last clone is dropped.
#[derive(Clone)]
pub struct NetHost {
    inner: Arc<HostInner>,
    // Keeps the switch alive as long as a host is.
    _net: Arc<NetInner>,
}

struct HostInner {
    ip: PathBuf,
    ns: String,
    addr: Ipv4Addr,
    exec: OnceLock<Executor>,
}

/// A thread inside the namespace running a current-thread runtime.
struct Executor {
    handle: tokio::runtime::Handle,
    // Dropping it ends the thread's `block_on`.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Drop for HostInner {
    fn drop(&mut self) {
        // Stop the executor thread first (it holds the namespace too).
        drop(self.exec.take());
        let _ = run_ip(&self.ip, &["netns", "del", &self.ns]);
    }
}

impl fmt::Debug for NetHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetHost")
            .field("ns", &self.inner.ns)
            .field("addr", &self.inner.addr)
            .finish()
    }
}

impl NetHost {
    /// The namespace's name (`ip netns exec NAME ...`).
    pub fn name(&self) -> &str {
        &self.inner.ns
    }

    /// The host's address on the network.
    pub fn addr(&self) -> Ipv4Addr {
        self.inner.addr
    }

    fn index(&self) -> usize {
        usize::from(self.inner.addr.octets()[3]).saturating_sub(1)
    }

    /// Moves the calling thread into this host's namespace, for good:
    /// every socket it (and every thread it spawns) opens afterwards is on
    /// this host. For a client thread, before it builds its runtime.
    ///
    /// # Errors
    /// Opening `/run/netns/NAME` or `setns(2)` failing.
    pub fn enter(&self) -> HarnessResult<()> {
        enter_path(&self.ns_path())
    }

    fn ns_path(&self) -> String {
        format!("/run/netns/{}", self.inner.ns)
    }

    fn executor(&self) -> HarnessResult<&Executor> {
        if let Some(e) = self.inner.exec.get() {
            return Ok(e);
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        // The path, not a clone of the host: the thread must not keep the
        // namespace alive.
        let path = self.ns_path();
        std::thread::Builder::new()
            .name(format!("netns-{}", self.inner.ns))
            .spawn(move || {
                let rt = enter_path(&path).and_then(|()| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| HarnessError::io("building the namespace's runtime", e))
                });
                match rt {
                    Ok(rt) => {
                        let _ = tx.send(Ok(rt.handle().clone()));
                        rt.block_on(async move {
                            let _ = stop_rx.await;
                        });
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| HarnessError::io("spawning the namespace's thread", e))?;
        let handle = rx
            .recv()
            .map_err(|_| HarnessError::Setup("the namespace's thread exited".into()))??;
        let _ = self.inner.exec.set(Executor { handle, _stop: stop_tx });
        self.inner
            .exec
            .get()
            .ok_or_else(|| HarnessError::Setup("namespace executor missing".into()))
    }

    /// A handle of the runtime running inside this host: futures spawned on
    /// it open their sockets on this host.
    ///
    /// # Errors
    /// The host's thread could not be started.
    pub fn handle(&self) -> HarnessResult<tokio::runtime::Handle> {
        Ok(self.executor()?.handle.clone())
    }

    /// Runs `f()` inside this host (on its thread) and returns its output.
    ///
    /// # Errors
    /// The host's thread could not be started, or the task panicked.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not stop the task: it runs to its end on
    /// the host's thread.
    pub async fn run<F, Fut, T>(&self, f: F) -> HarnessResult<T>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let handle = self.handle()?;
        handle
            .spawn(async move { f().await })
            .await
            .map_err(|e| HarnessError::Setup(format!("task on {} failed: {e}", self.inner.ns)))
    }

    /// Runs one RESP command against `addr` from this host, bounded by
    /// `timeout` (connect and reply).
    ///
    /// # Errors
    /// As [`RespClient::cmd`], or [`HarnessError::Timeout`].
    ///
    /// # Cancel safety
    ///
    /// As [`run`](Self::run).
    pub async fn cmd(&self, addr: SocketAddr, args: &[&str], timeout: Duration) -> HarnessResult<RespValue> {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        let what = format!("{} from {}", args.join(" "), self.inner.ns);
        self.run(move || async move {
            tokio::time::timeout(timeout, async {
                let mut c = RespClient::connect_timeout(addr, timeout).await?;
                c.cmd(&args).await
            })
            .await
            .map_err(|_| HarnessError::Timeout { what, after: timeout })?
        })
        .await?
    }
}

fn enter_path(path: &str) -> HarnessResult<()> {
    let file = File::open(path).map_err(|e| HarnessError::io(format!("opening {path}"), e))?;
    nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| HarnessError::io(format!("setns into {path}"), e.into()))
}

/// Configures a [`NetRedisServer`]: modules, arguments, cluster mode.
#[derive(Clone, Debug, Default)]
pub struct NetRedisServerBuilder {
    args: Vec<OsString>,
    tair: bool,
    cluster_node_timeout: Option<Duration>,
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
        let binary = redis_server_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("verrou-netns-redis-")
            .tempdir()
            .map_err(|e| HarnessError::io("creating a temporary directory", e))?;
        let addr = host.addr().to_string();
        let mut args: Vec<OsString> = Vec::new();
        let mut push = |a: &[&str]| args.extend(a.iter().map(OsString::from));
        push(&["--port", &NET_REDIS_PORT.to_string(), "--bind", &addr, "127.0.0.1"]);
        push(&["--protected-mode", "no", "--daemonize", "no", "--logfile", ""]);
        push(&["--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0"]);
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
    dir: TempDir,
}

impl fmt::Debug for NetRedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetRedisServer")
            .field("addr", &self.addr())
            .field("host", &self.host.name())
            .finish()
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
    /// Not running, or the signal failing.
    pub fn pause(&self) -> HarnessResult<()> {
        self.signal(libc::SIGSTOP)
    }

    /// SIGCONTs the server.
    ///
    /// # Errors
    /// Not running, or the signal failing.
    pub fn resume(&self) -> HarnessResult<()> {
        self.signal(libc::SIGCONT)
    }

    fn signal(&self, sig: libc::c_int) -> HarnessResult<()> {
        let pid = self
            .lock()
            .as_ref()
            .map(Child::id)
            .ok_or(HarnessError::NotRunning { port: NET_REDIS_PORT })?;
        spawn::signal_process(pid, sig).map_err(|e| HarnessError::io(format!("signal {sig} to pid {pid}"), e))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_names() {
        assert_eq!(stale_pid("verrou-123-4-sw"), Some(123));
        assert_eq!(stale_pid("verrou-123-4-0client"), Some(123));
        assert_eq!(stale_pid("verrou-x-4"), None);
        assert_eq!(stale_pid("other-123"), None);
    }
}
