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

use std::fmt;
use std::fs::{self};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use super::error::{HarnessError, HarnessResult};
use super::netns_host::{HostInner, NetHost};

/// Prefix of every namespace the harness creates (`verrou-<pid>-<n>-<role>`).
pub const NETNS_PREFIX: &str = "verrou-";
/// The port every [`NetRedisServer`](super::NetRedisServer) listens on, on its host's address (the
/// cluster bus on this plus 10000).
pub const NET_REDIS_PORT: u16 = 7000;
/// How long one `ip` command may take.
pub(super) const IP_TIMEOUT: Duration = Duration::from_secs(10);
pub(super) const POLL: Duration = Duration::from_millis(10);

/// A switch (two bridges) in its own namespace, and the hosts on it.
pub struct Network {
    inner: Arc<NetInner>,
}

pub(super) struct NetInner {
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
            .finish_non_exhaustive()
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
pub(super) fn run_ip(ip: &Path, args: &[&str]) -> HarnessResult<()> {
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
