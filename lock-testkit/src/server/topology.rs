//! Several servers: a replicated pair, independent instances, a cluster.

use std::net::SocketAddr;
use std::ops::Index;
use std::time::Duration;

use futures::future::try_join_all;

use super::error::{HarnessError, HarnessResult};
use super::paths::redis_cli_binary;
use super::process::{RedisServer, wait_until};
use super::redis_builder::RedisServerBuilder;
use super::resp::RespValue;
use super::text::parse_info;

/// How long replication or a cluster gets to converge after the processes
/// are up.
pub const CONVERGE_TIMEOUT: Duration = Duration::from_secs(20);

/// A primary and one replica of it (`--replicaof`).
#[derive(Debug)]
pub struct ReplicatedPair {
    primary: RedisServer,
    replica: RedisServer,
}

impl ReplicatedPair {
    /// Starts a primary and a replica, both from `builder`, and returns once
    /// the replica reports `master_link_status:up` and has caught up with
    /// the primary's replication offset.
    ///
    /// # Errors
    /// Start errors, or [`HarnessError::Timeout`] if replication does not
    /// converge within [`CONVERGE_TIMEOUT`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the servers it started (each kills its
    /// process on drop).
    pub async fn start(builder: RedisServerBuilder) -> HarnessResult<Self> {
        let primary = builder.start().await?;
        let replica = builder
            .clone()
            .args(["--replicaof", "127.0.0.1"])
            .arg(primary.port().to_string())
            .start()
            .await?;
        let pair = ReplicatedPair { primary, replica };
        pair.wait_for_sync(CONVERGE_TIMEOUT).await?;
        Ok(pair)
    }

    /// The primary.
    pub fn primary(&self) -> &RedisServer {
        &self.primary
    }

    /// The replica.
    pub fn replica(&self) -> &RedisServer {
        &self.replica
    }

    /// Waits until the replica's link is up, no sync is in progress, and it
    /// has processed everything the primary has written so far.
    ///
    /// # Errors
    /// [`HarnessError::Timeout`] (with the last error seen, if any).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads `INFO`.
    pub async fn wait_for_sync(&self, timeout: Duration) -> HarnessResult<()> {
        let what = format!(
            "replica on port {} to sync with primary on port {}",
            self.replica.port(),
            self.primary.port()
        );
        wait_until(&what, timeout, || async {
            let p = self.primary.info("replication").await?;
            let r = self.replica.info("replication").await?;
            let field = |m: &std::collections::HashMap<String, String>, k: &str| m.get(k).cloned().unwrap_or_default();
            let offset =
                |m: &std::collections::HashMap<String, String>, k: &str| m.get(k).and_then(|v| v.parse::<i64>().ok());
            Ok(field(&r, "master_link_status") == "up"
                && field(&r, "master_sync_in_progress") == "0"
                && matches!(
                    (offset(&r, "slave_repl_offset"), offset(&p, "master_repl_offset")),
                    (Some(ro), Some(po)) if ro >= po
                ))
        })
        .await
    }
}

/// `n` independent servers (e.g. for Redlock).
#[derive(Debug)]
pub struct Instances {
    servers: Vec<RedisServer>,
}

impl Instances {
    /// Starts `n` servers from `builder`, concurrently.
    ///
    /// # Errors
    /// The first start error; servers already started are stopped.
    ///
    /// # Cancel safety
    ///
    /// As [`ReplicatedPair::start`].
    pub async fn start(n: usize, builder: RedisServerBuilder) -> HarnessResult<Self> {
        let servers = try_join_all((0..n).map(|_| builder.start())).await?;
        Ok(Instances { servers })
    }

    /// The servers.
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// Their `redis://` URLs.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// Their addresses.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.servers.iter().map(RedisServer::addr).collect()
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// True for zero instances.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }
}

impl Index<usize> for Instances {
    type Output = RedisServer;

    fn index(&self, i: usize) -> &RedisServer {
        &self.servers[i]
    }
}

/// A Redis Cluster on 127.0.0.1, created with
/// `redis-cli --cluster create ... --cluster-yes`.
///
/// Nodes run with `--cluster-node-timeout 2000` (override with a builder
/// argument), so a failover after a kill takes a few seconds.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    masters: Vec<usize>,
    replicas: Vec<usize>,
}

impl RedisCluster {
    /// Starts `masters` (at least 3) masters with `replicas_per_master`
    /// replicas each, all from `builder` (modules and arguments apply to
    /// every node), creates the cluster and returns once every node reports
    /// `cluster_state:ok` with all 16384 slots assigned and every replica
    /// has its link to its master up.
    ///
    /// # Errors
    /// Start errors, [`HarnessError::NotFound`] if there is no `redis-cli`,
    /// [`HarnessError::Setup`] with `redis-cli`'s output if creation fails,
    /// [`HarnessError::Timeout`] if the cluster does not converge within
    /// [`CONVERGE_TIMEOUT`].
    ///
    /// # Cancel safety
    ///
    /// As [`ReplicatedPair::start`]; a running `redis-cli` is killed too.
    pub async fn start(masters: usize, replicas_per_master: usize, builder: RedisServerBuilder) -> HarnessResult<Self> {
        if masters < 3 {
            return Err(HarnessError::Setup(format!(
                "a Redis Cluster needs at least 3 masters, not {masters}"
            )));
        }
        let cli = redis_cli_binary()?;
        let total = masters * (1 + replicas_per_master);
        let builder = builder.cluster_mode();
        let nodes = try_join_all((0..total).map(|_| builder.start())).await?;

        let mut cmd = tokio::process::Command::new(&cli);
        cmd.arg("--cluster").arg("create");
        for node in &nodes {
            cmd.arg(format!("127.0.0.1:{}", node.port()));
        }
        cmd.arg("--cluster-replicas")
            .arg(replicas_per_master.to_string())
            .arg("--cluster-yes")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let output = match tokio::time::timeout(CONVERGE_TIMEOUT, cmd.output()).await {
            Ok(r) => r.map_err(|e| HarnessError::io(format!("running {}", cli.display()), e))?,
            Err(_) => {
                return Err(HarnessError::Timeout {
                    what: format!("{} --cluster create", cli.display()),
                    after: CONVERGE_TIMEOUT,
                });
            }
        };
        if !output.status.success() {
            return Err(HarnessError::Setup(format!(
                "{} --cluster create failed ({}):\n{}{}",
                cli.display(),
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )));
        }

        let mut cluster = RedisCluster {
            nodes,
            masters: Vec::new(),
            replicas: Vec::new(),
        };
        cluster.wait_until_ok(CONVERGE_TIMEOUT).await?;
        for (i, node) in cluster.nodes.iter().enumerate() {
            let role = node.info("replication").await?;
            if role.get("role").map(String::as_str) == Some("master") {
                cluster.masters.push(i);
            } else {
                cluster.replicas.push(i);
            }
        }
        if cluster.masters.len() != masters {
            return Err(HarnessError::Setup(format!(
                "expected {masters} masters, found {}",
                cluster.masters.len()
            )));
        }
        Ok(cluster)
    }

    /// Waits until every running, unpaused node reports `cluster_state:ok`,
    /// all 16384 slots assigned and every node known, and every such replica
    /// has its master link up. Useful after a failover: kill a master, then
    /// wait for its replica to take over.
    ///
    /// # Errors
    /// [`HarnessError::Timeout`] (with the last error seen, if any).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads the nodes' state.
    pub async fn wait_until_ok(&self, timeout: Duration) -> HarnessResult<()> {
        let total = self.nodes.len().to_string();
        wait_until(
            "the cluster to report cluster_state:ok on every node",
            timeout,
            || async {
                for node in self.nodes.iter().filter(|n| n.is_running() && !n.is_paused()) {
                    let reply = node.cmd(&["CLUSTER", "INFO"]).await?.into_result("CLUSTER INFO")?;
                    let info = parse_info(reply.as_str().unwrap_or_default());
                    let get = |k: &str| info.get(k).map(String::as_str).unwrap_or_default();
                    if get("cluster_state") != "ok"
                        || get("cluster_slots_assigned") != "16384"
                        || get("cluster_known_nodes") != total
                    {
                        return Ok(false);
                    }
                    let repl = node.info("replication").await?;
                    if repl.get("role").map(String::as_str) == Some("slave")
                        && repl.get("master_link_status").map(String::as_str) != Some("up")
                    {
                        return Ok(false);
                    }
                }
                Ok(true)
            },
        )
        .await
    }

    /// Every node, masters and replicas.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The nodes that were masters when the cluster was created.
    pub fn masters(&self) -> Vec<&RedisServer> {
        self.masters.iter().map(|&i| &self.nodes[i]).collect()
    }

    /// The nodes that were replicas when the cluster was created.
    pub fn replicas(&self) -> Vec<&RedisServer> {
        self.replicas.iter().map(|&i| &self.nodes[i]).collect()
    }

    /// The `redis://` URL of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The URL of the first master, to seed a cluster client with.
    pub fn seed_url(&self) -> String {
        let i = self.masters.first().copied().unwrap_or(0);
        self.nodes.get(i).map(RedisServer::url).unwrap_or_default()
    }

    /// The node currently serving `key`'s slot as a master, found with
    /// `CLUSTER KEYSLOT` and `CLUSTER SLOTS` on a running node.
    ///
    /// # Errors
    /// No running node, or an unexpected reply.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn master_for_key(&self, key: &[u8]) -> HarnessResult<&RedisServer> {
        let node = self
            .nodes
            .iter()
            .find(|n| n.is_running() && !n.is_paused())
            .ok_or_else(|| HarnessError::Setup("no running cluster node".into()))?;
        let mut client = node.client().await?;
        let slot = client
            .cmd(&[b"CLUSTER".as_slice(), b"KEYSLOT", key])
            .await?
            .into_result("CLUSTER KEYSLOT")?
            .as_int()
            .ok_or_else(|| HarnessError::Protocol("CLUSTER KEYSLOT: not an integer".into()))?;
        let slots = client.cmd(&["CLUSTER", "SLOTS"]).await?.into_result("CLUSTER SLOTS")?;
        let unexpected = || HarnessError::Protocol(format!("unexpected CLUSTER SLOTS reply {slots:?}"));
        for range in slots.as_array().ok_or_else(unexpected)? {
            let r = range.as_array().ok_or_else(unexpected)?;
            let (Some(lo), Some(hi), Some(RespValue::Array(Some(master)))) = (
                r.first().and_then(RespValue::as_int),
                r.get(1).and_then(RespValue::as_int),
                r.get(2),
            ) else {
                return Err(unexpected());
            };
            if (lo..=hi).contains(&slot) {
                let port = master.get(1).and_then(RespValue::as_int).ok_or_else(unexpected)?;
                return self
                    .nodes
                    .iter()
                    .find(|n| i64::from(n.port()) == port)
                    .ok_or_else(|| HarnessError::Setup(format!("no node on port {port}")));
            }
        }
        Err(HarnessError::Setup(format!("slot {slot} is not served")))
    }
}
