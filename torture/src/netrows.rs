//! Rows with real partitions: hosts in network namespaces
//! (`lock_testkit::server::Network`), servers and clients on different
//! hosts, a partition set by moving switch ports (silent: connections stay
//! open and unanswered, new ones time out, unlike the proxy's cut).
//!
//! Hosts: every server on its own host; client 0 on its own host (the one
//! partitioned), every other client on one shared host. A client thread
//! moves into its host's namespace when it builds its backend
//! ([`Spec::Net`]); the run's final counter read, on the driver's
//! multi-thread runtime, builds its backend on the host's own thread
//! instead. Needs root and `ip`: without them these rows fail at setup
//! with an install hint.

use std::time::Duration;

use lock_core::ReplicaAck;
use lock_testkit::server::{NetHost, NetRedisServer, Network};

use crate::BoxResult;
use crate::backends::{Built, Spec, build};
use crate::clock;
use crate::plan::{Backend, Claim, Fault, Scenario, Topology};
use crate::record::Log;
use crate::run::Params;

/// The rows (full run and quick run alike: each is one mechanism).
pub fn rows() -> Vec<Scenario> {
    let safe = |backend, topology, fault| Scenario {
        backend,
        topology,
        fault,
        claim: Claim::Safe,
        why: "",
    };
    vec![
        safe(Backend::Lua, Topology::NetSingle, Fault::ClientPartitioned),
        safe(Backend::Tair, Topology::NetSingle, Fault::ClientPartitioned),
        safe(Backend::Redlock, Topology::NetFive, Fault::RedlockPartition(2)),
    ]
}

/// How a client on a host reaches its backend.
#[derive(Clone)]
pub struct NetSpec {
    /// The client's host.
    pub host: NetHost,
    /// What it builds there.
    pub inner: Spec,
}

/// Builds `spec.inner` inside `spec.host`: a client thread (its own
/// current-thread runtime) enters the host's namespace for good; on any
/// other runtime the backend is built on the host's thread (its
/// connections live there).
pub async fn build_in(spec: &NetSpec, timeout: Duration) -> lock_core::Result<Built> {
    let backend_err = |e: String| lock_core::Error::backend("netns", e);
    if tokio::runtime::Handle::current().runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread {
        spec.host.enter().map_err(|e| backend_err(e.to_string()))?;
        return boxed(&spec.inner, timeout).await;
    }
    let inner = spec.inner.clone();
    spec.host
        .run(move || async move { boxed(&inner, timeout).await })
        .await
        .map_err(|e| backend_err(e.to_string()))?
}

/// `build`, boxed with its `Send` stated (it recurses through here).
fn boxed(
    spec: &Spec,
    timeout: Duration,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = lock_core::Result<Built>> + Send + '_>> {
    Box::pin(build(spec, timeout))
}

/// The servers and hosts of a row.
pub(crate) struct NetEnv {
    backend: Backend,
    // Dropped first: the servers, then the hosts and the network.
    servers: Vec<NetRedisServer>,
    client0: NetHost,
    others: NetHost,
    net: Network,
}

impl NetEnv {
    /// Starts the hosts and servers of `sc`.
    pub(crate) async fn setup(sc: &Scenario) -> BoxResult<Self> {
        let net = Network::new()?;
        let n = if sc.topology == Topology::NetFive { 5 } else { 1 };
        let mut builder = NetRedisServer::builder();
        if sc.backend == Backend::Tair {
            builder = builder.tair_module();
        }
        let mut servers = Vec::with_capacity(n);
        for i in 0..n {
            let host = net.add_host(&format!("s{i}"))?;
            servers.push(builder.start(&host).await?);
        }
        let client0 = net.add_host("c0")?;
        let others = net.add_host("cs")?;
        Ok(NetEnv {
            backend: sc.backend,
            servers,
            client0,
            others,
            net,
        })
    }

    /// Client `i`'s "URL" for `Env::url`: its index, read back by [`spec`](Self::spec).
    pub(crate) fn url(i: usize) -> String {
        format!("net:{i}")
    }

    /// The final read's "URL".
    pub(crate) fn direct_url() -> String {
        "net:final".into()
    }

    /// The spec of the client named by `url` ([`url`](Self::url)).
    pub(crate) fn spec(&self, url: &str, ack: Option<ReplicaAck>) -> Spec {
        let host = if url == "net:0" {
            self.client0.clone()
        } else {
            self.others.clone()
        };
        let inner = match self.backend {
            Backend::Redlock => Spec::Redlock {
                urls: self.servers.iter().map(NetRedisServer::url).collect(),
            },
            Backend::Tair => Spec::Tair {
                url: self.servers[0].url(),
                ack,
            },
            _ => Spec::Lua {
                url: self.servers[0].url(),
                ack,
            },
        };
        Spec::Net(Box::new(NetSpec { host, inner }))
    }

    /// Injects the row's partition for 3 × TTL, then heals.
    pub(crate) async fn inject(&self, sc: &Scenario, p: &Params, log: &Log) -> BoxResult<()> {
        let from = clock::now();
        let len = p.ttl * 3;
        match sc.fault {
            // Client 0 alone on one side, the server and the other clients
            // on the other.
            Fault::ClientPartitioned => self.net.partition(&[&self.client0])?,
            // Client 0 and `n` nodes on one side; the other nodes and
            // clients on the other: client 0 reaches a minority only, the
            // others a majority.
            Fault::RedlockPartition(n) => {
                let mut side: Vec<&NetHost> = vec![&self.client0];
                side.extend(self.servers[..n].iter().map(NetRedisServer::host));
                self.net.partition(&side)?;
            }
            f => return Err(format!("fault {f} does not apply to a namespace topology").into()),
        }
        tokio::time::sleep(len).await;
        self.net.heal()?;
        log.window(from, clock::now());
        Ok(())
    }
}
