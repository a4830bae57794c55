//! Rows with real partitions: hosts in network namespaces
//! (`lock_testkit::server::Network`), servers and clients on different
//! hosts, a partition set by moving switch ports (silent: connections stay
//! open and unanswered, new ones time out, unlike the proxy's cut).
//!
//! Hosts: every server on its own host; client 0 and the last client (a
//! counter client where the row has them) on one host (the one
//! partitioned), every other client on one shared host. A client thread
//! moves into its host's namespace when it builds its backend
//! ([`Spec::Net`]); the run's final counter read, on the driver's
//! multi-thread runtime, builds its backend on the host's own thread
//! instead. NATS's row here (one `nats-server`, client 0's host
//! partitioned) is listed with the other NATS rows (`plan::nats_rows`),
//! out of the CI run like them. Needs root and `ip`: without them these rows fail at setup
//! with an install hint.

use std::time::Duration;

use lock_core::ReplicaAck;
use lock_redis_lua::RedisLuaBuilder;
use lock_testkit::server::{NetCluster, NetHost, NetNatsServer, NetRedisServer, NetSentinelGroup, Network};
use tokio::time::Instant;

use crate::BoxResult;
use crate::backends::{Built, Spec, build};
use crate::clock;
use crate::plan::{Backend, Claim, Fault, Scenario, Topology};
use crate::record::{Log, Snapshot};
use crate::run::Params;

/// The full run's rows.
pub fn rows() -> Vec<Scenario> {
    let safe = |backend, topology, fault| Scenario {
        backend,
        topology,
        fault,
        claim: Claim::Safe,
        why: "",
    };
    [
        safe(Backend::Lua, Topology::NetSingle, Fault::ClientPartitioned),
        safe(Backend::Tair, Topology::NetSingle, Fault::ClientPartitioned),
        safe(Backend::Redlock, Topology::NetFive, Fault::RedlockPartition(2)),
    ]
    .into_iter()
    .chain([Backend::Lua, Backend::Tair].into_iter().flat_map(|b| {
        [
            safe(b, Topology::NetCluster, Fault::None),
            safe(b, Topology::NetCluster, Fault::ClusterMasterPausedAck),
            Scenario {
                claim: Claim::Unsafe,
                why: "asynchronous replication: writes the minority master acknowledged before it noticed the \
                      partition (cluster-node-timeout) are lost when the majority promotes its replica",
                ..safe(b, Topology::NetCluster, Fault::ClusterSplit)
            },
            safe(b, Topology::NetCluster, Fault::ClusterSplitAck),
        ]
    }))
    .collect()
}

/// The quick run's: each mechanism once, claimed safe only (one partitioned
/// client per Redis-family backend, Redlock's partition, the cluster's
/// split-brain with redis-lua and its failover with tair).
pub fn quick_rows() -> Vec<Scenario> {
    rows()
        .into_iter()
        .filter(|s| s.claim == Claim::Safe && s.fault != Fault::None)
        .filter(|s| {
            !matches!(
                (s.backend, s.fault),
                (Backend::Lua, Fault::ClusterMasterPausedAck) | (Backend::Tair, Fault::ClusterSplitAck)
            )
        })
        .collect()
}

/// How a client on a host reaches its backend.
#[derive(Clone)]
pub struct NetSpec {
    /// The client's host.
    pub host: NetHost,
    /// What it builds there.
    pub inner: Spec,
    /// Redis Cluster seeds: build a cluster Lua backend (fencing on, the
    /// replica acknowledgement of `inner`) instead of `inner`.
    pub cluster: Option<Vec<String>>,
}

/// `cluster-node-timeout` of the cluster rows.
const NODE_TIMEOUT: Duration = Duration::from_millis(1000);
/// Bound on the majority promoting the replica, and on the cluster
/// converging after the heal.
const CONVERGE: Duration = Duration::from_secs(20);

/// Builds `spec.inner` inside `spec.host`: a client thread (its own
/// current-thread runtime) enters the host's namespace for good; on any
/// other runtime the backend is built on the host's thread (its
/// connections live there).
pub async fn build_in(spec: &NetSpec, timeout: Duration) -> lock_core::Result<Built> {
    let backend_err = |e: String| lock_core::Error::backend("netns", e);
    if tokio::runtime::Handle::current().runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread {
        spec.host.enter().map_err(|e| backend_err(e.to_string()))?;
        return boxed_net(spec, timeout).await;
    }
    let inner = spec.clone();
    spec.host
        .run(move || async move { boxed_net(&inner, timeout).await })
        .await
        .map_err(|e| backend_err(e.to_string()))?
}

/// The partitioned lock client (0) and the others: whether each side has
/// started a body after `healed` (client 0; any other lock client).
fn not_recovered(s: &Snapshot, lock_clients: usize, healed: i64, bound: i64) -> Vec<String> {
    let took = |c: usize| {
        s.bodies
            .iter()
            .any(|b| b.client == c && b.start >= healed && b.start - healed <= bound)
    };
    (0..lock_clients)
        .filter(|&c| !took(c))
        .map(|c| {
            if c == 0 {
                "the partitioned client (0)".to_owned()
            } else {
                format!("client {c}")
            }
        })
        .collect()
}

/// Keeps the fault open (the driver keeps the clients running meanwhile)
/// until every lock client, on either side, has locked again after the
/// heal, at most the recovery bound; [`recovery_violations`] judges.
pub(crate) async fn wait_for_recovery(p: &Params, log: &Log, healed: i64) {
    let give_up = Instant::now() + p.recovery_bound();
    while Instant::now() < give_up && !not_recovered(&log.snapshot(), p.lock_clients, healed, i64::MAX).is_empty() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A partition row's own claim: every client recovers, i.e. each lock
/// client, the partitioned ones and the others, takes a lock within the
/// recovery bound (20 × TTL) of the heal (the row's recovery column shows
/// only the first lock taken, by anyone).
pub(crate) fn recovery_violations(s: &Snapshot, p: &Params) -> Vec<String> {
    let Some(healed) = s.windows.iter().map(|w| w.to).max() else {
        return Vec::new();
    };
    let bound = i64::try_from(p.recovery_bound().as_micros()).unwrap_or(i64::MAX);
    not_recovered(s, p.lock_clients, healed, bound)
        .into_iter()
        .map(|who| format!("{who} took no lock within 20 × TTL of the heal"))
        .collect()
}

impl NetEnv {
    /// A Sentinel split-brain row's timeline (none for the other rows, or
    /// when the fault was not injected).
    pub(crate) fn sentinel_note(&self, s: &Snapshot) -> Option<String> {
        let split = self.split.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        split.as_ref().map(|m| crate::sentinel_split::note(m, s))
    }

    /// The index of the master holding the counter (`verrou-torture:*:counter`),
    /// else one holding a lock key, else 0.
    async fn counter_master(&self, cluster: &NetCluster) -> usize {
        for pattern in ["*verrou-torture:*:counter", "*verrou-torture:*:lock*"] {
            for (i, m) in cluster.masters().iter().enumerate() {
                let found = m.cmd(&["SCAN", "0", "MATCH", pattern, "COUNT", "10000"]).await;
                let any = found.ok().is_some_and(|r| {
                    r.as_array()
                        .and_then(|a| a.get(1))
                        .and_then(|k| k.as_array())
                        .is_some_and(|k| !k.is_empty())
                });
                if any {
                    return i;
                }
            }
        }
        0
    }
}

/// `build` (or the cluster's), boxed with its `Send` stated (it recurses
/// through here).
fn boxed_net(
    spec: &NetSpec,
    timeout: Duration,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = lock_core::Result<Built>> + Send + '_>> {
    Box::pin(async move {
        let Some(urls) = &spec.cluster else {
            return build(&spec.inner, timeout).await;
        };
        if let Spec::Tair { ack, .. } = &spec.inner {
            // fred's cluster URL: the first seed, the others as `node=`.
            let mut hosts = urls
                .iter()
                .map(|u| u.trim_start_matches("redis://").trim_end_matches('/'));
            let first = hosts.next().unwrap_or_default();
            let nodes: Vec<String> = hosts.map(|h| format!("node={h}")).collect();
            let url = format!("redis-cluster://{first}?{}", nodes.join("&"));
            return build(&Spec::Tair { url, ack: *ack }, timeout).await;
        }
        let mut builder = RedisLuaBuilder::cluster(urls.clone())
            .fencing(true)
            .connect_timeout(timeout)
            .response_timeout(timeout);
        if let Spec::Lua { ack: Some(ack), .. } = &spec.inner {
            builder = builder.replica_ack(*ack);
        }
        let b = std::sync::Arc::new(builder.build().await?);
        Ok(Built {
            lock: b.clone(),
            store: Some(b),
        })
    })
}

/// The servers and hosts of a row.
pub(crate) struct NetEnv {
    backend: Backend,
    // Dropped first: the servers, then the hosts and the network.
    servers: Vec<NetRedisServer>,
    cluster: Option<NetCluster>,
    /// The Sentinel split-brain rows' group (`crate::sentinel_split`), and
    /// what their injection saw.
    sentinel: Option<NetSentinelGroup>,
    split: std::sync::Mutex<Option<crate::sentinel_split::SplitMarks>>,
    /// The NATS row's server (then `servers` is empty).
    nats: Option<NetNatsServer>,
    /// The other client on client 0's host.
    last: usize,
    client0: NetHost,
    others: NetHost,
    net: Network,
}

impl NetEnv {
    /// Starts the hosts and servers of `sc`.
    pub(crate) async fn setup(sc: &Scenario, clients: usize) -> BoxResult<Self> {
        let net = Network::new()?;
        let n = match sc.topology {
            _ if sc.backend == Backend::Nats => 0,
            Topology::NetFive => 5,
            Topology::NetCluster | Topology::NetSentinel => 0,
            _ => 1,
        };
        let mut builder = NetRedisServer::builder();
        if sc.backend == Backend::Tair {
            builder = builder.tair_module();
        }
        let mut servers = Vec::with_capacity(n);
        for i in 0..n {
            let host = net.add_host(&format!("s{i}"))?;
            servers.push(builder.start(&host).await?);
        }
        let cluster = if sc.topology == Topology::NetCluster {
            Some(NetCluster::start(&net, 3, NODE_TIMEOUT, builder.clone()).await?)
        } else {
            None
        };
        let sentinel = if sc.topology == Topology::NetSentinel {
            let builder = if sc.fault == Fault::SentinelSplitMinReplicas {
                builder.args(crate::sentinel_split::MIN_REPLICAS_ARGS)
            } else {
                builder
            };
            Some(NetSentinelGroup::start(&net, builder).await?)
        } else {
            None
        };
        let nats = if sc.backend == Backend::Nats {
            Some(NetNatsServer::start(&net.add_host("s0")?).await?)
        } else {
            None
        };
        let client0 = net.add_host("c0")?;
        let others = net.add_host("cs")?;
        Ok(NetEnv {
            backend: sc.backend,
            servers,
            cluster,
            sentinel,
            split: std::sync::Mutex::new(None),
            nats,
            last: clients.saturating_sub(1),
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
        let minority = url == "net:0" || url == format!("net:{}", self.last);
        let host = if minority {
            self.client0.clone()
        } else {
            self.others.clone()
        };
        // Through the sentinels: their URL (`tair+sentinel://` for tair).
        let first = match &self.sentinel {
            Some(g) if self.backend == Backend::Tair => g.url("tair+sentinel"),
            Some(g) => g.url("redis+sentinel"),
            None => self.servers.first().map(NetRedisServer::url).unwrap_or_default(),
        };
        let inner = match self.backend {
            Backend::Redlock => Spec::Redlock {
                urls: self.servers.iter().map(NetRedisServer::url).collect(),
            },
            Backend::Nats => Spec::Nats {
                url: format!(
                    "{}?bucket=torture",
                    self.nats.as_ref().map(NetNatsServer::url).unwrap_or_default()
                ),
            },
            // On a cluster the URL is made from the seeds (`boxed_net`).
            Backend::Tair => Spec::Tair { url: first, ack },
            _ => Spec::Lua { url: first, ack },
        };
        let cluster = self.cluster.as_ref().map(NetCluster::urls);
        Spec::Net(Box::new(NetSpec { host, inner, cluster }))
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
            Fault::ClusterSplit | Fault::ClusterSplitAck => {
                let cluster = self.cluster.as_ref().ok_or("a split-brain row needs the cluster")?;
                let i = self.counter_master(cluster).await;
                let (old, new) = (&cluster.masters()[i], &cluster.replicas()[i]);
                self.net.partition(&[old.host(), &self.client0])?;
                // The majority promotes the replica (bounded); the minority
                // master still believes it is master.
                let give_up = Instant::now() + CONVERGE;
                while !NetCluster::is_master(new).await.unwrap_or(false) {
                    if Instant::now() >= give_up {
                        self.net.heal()?;
                        return Err("the majority did not promote the partitioned master's replica".into());
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                tokio::time::sleep(len).await;
                self.net.heal()?;
                let healed = clock::now();
                log.window(from, healed);
                // The cluster converges again (the old master rejoins as a
                // replica); bounded, a failure is an error of the row.
                cluster.wait_until_ok(CONVERGE).await?;
                wait_for_recovery(p, log, healed).await;
                return Ok(());
            }
            f if crate::sentinel_split::handles(f) => {
                let group = self
                    .sentinel
                    .as_ref()
                    .ok_or("a Sentinel split-brain row needs the group")?;
                let marks = crate::sentinel_split::inject(&self.net, group, &self.client0, p, log).await?;
                *self.split.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(marks);
                return Ok(());
            }
            Fault::ClusterMasterPausedAck => {
                let cluster = self.cluster.as_ref().ok_or("a cluster row needs the cluster")?;
                let i = self.counter_master(cluster).await;
                let (old, new) = (&cluster.masters()[i], &cluster.replicas()[i]);
                old.pause()?;
                let give_up = Instant::now() + CONVERGE;
                while !NetCluster::is_master(new).await.unwrap_or(false) {
                    if Instant::now() >= give_up {
                        old.resume()?;
                        return Err("the cluster did not promote the paused master's replica".into());
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                tokio::time::sleep(len).await;
                old.resume()?;
                let healed = clock::now();
                log.window(from, healed);
                cluster.wait_until_ok(CONVERGE).await?;
                wait_for_recovery(p, log, healed).await;
                return Ok(());
            }
            f => return Err(format!("fault {f} does not apply to a namespace topology").into()),
        }
        tokio::time::sleep(len).await;
        self.net.heal()?;
        let healed = clock::now();
        log.window(from, healed);
        wait_for_recovery(p, log, healed).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Body, Window};

    #[test]
    fn every_client_must_lock_again_after_the_heal() {
        let p = Params::quick();
        let mut s = Snapshot {
            windows: vec![Window { from: 0, to: 1_000 }],
            bodies: vec![Body::short(0, 500), Body::short(1, 1_200), Body::short(2, 1_500)],
            ..Snapshot::default()
        };
        // Client 0 (partitioned) and client 3 took nothing after the heal.
        let v = recovery_violations(&s, &p);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].contains("partitioned client"));
        assert!(v[1].contains("client 3"));
        s.bodies.push(Body::short(0, 2_000));
        s.bodies.push(Body::short(3, 2_100));
        assert!(recovery_violations(&s, &p).is_empty());
        // Later than 20 × TTL does not count.
        let late = 1_000 + i64::try_from(p.recovery_bound().as_micros()).unwrap() + 1;
        s.bodies = vec![
            Body::short(0, late),
            Body::short(1, 1_100),
            Body::short(2, 1_100),
            Body::short(3, 1_100),
        ];
        assert_eq!(recovery_violations(&s, &p).len(), 1);
    }
}
