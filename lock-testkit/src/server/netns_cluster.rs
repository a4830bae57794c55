//! A Redis Cluster on network-namespace hosts: every node on its own host,
//! so that a partition can put one master (and any client) in a minority.

use std::collections::HashMap;
use std::time::Duration;

use super::error::{HarnessError, HarnessResult};
use super::netns::{NET_REDIS_PORT, Network};
use super::netns_host::NetHost;
use super::netns_redis::{NetRedisServer, NetRedisServerBuilder};
use super::process::wait_until;
use super::resp::RespValue;
use super::text::parse_info;
use super::topology::CONVERGE_TIMEOUT;

const SLOTS: u32 = 16384;

/// `masters` masters with one replica each, every node on its own host of
/// a [`Network`] (hosts `m<i>` and `r<i>`), slots split evenly in order,
/// `replicas()[i]` replicating `masters()[i]`. Built by hand (`CLUSTER
/// ADDSLOTSRANGE`, `MEET`, `REPLICATE`), so that which replica follows
/// which master is known.
#[derive(Debug)]
pub struct NetCluster {
    masters: Vec<NetRedisServer>,
    replicas: Vec<NetRedisServer>,
}

impl NetCluster {
    /// Starts the nodes with `cluster-node-timeout` = `node_timeout` and
    /// returns once every node reports `cluster_state:ok` and every replica
    /// has its link up.
    ///
    /// # Errors
    /// Start errors, an error reply, or [`HarnessError::Timeout`] when the
    /// cluster does not converge within [`CONVERGE_TIMEOUT`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills the nodes started so far.
    pub async fn start(
        net: &Network,
        masters: usize,
        node_timeout: Duration,
        builder: NetRedisServerBuilder,
    ) -> HarnessResult<Self> {
        if masters < 3 {
            return Err(HarnessError::Setup(format!(
                "a Redis Cluster needs at least 3 masters, not {masters}"
            )));
        }
        let builder = builder.cluster(node_timeout);
        let mut ms = Vec::with_capacity(masters);
        let mut rs = Vec::with_capacity(masters);
        for i in 0..masters {
            ms.push(builder.start(&net.add_host(&format!("m{i}"))?).await?);
        }
        for i in 0..masters {
            rs.push(builder.start(&net.add_host(&format!("r{i}"))?).await?);
        }
        let n = u32::try_from(masters).map_err(|_| HarnessError::Setup("too many masters".into()))?;
        for (i, m) in (0u32..).zip(&ms) {
            let lo = SLOTS * i / n;
            let hi = SLOTS * (i + 1) / n - 1;
            ok(
                m.cmd(&["CLUSTER", "ADDSLOTSRANGE", &lo.to_string(), &hi.to_string()])
                    .await?,
                "ADDSLOTSRANGE",
            )?;
        }
        let port = NET_REDIS_PORT.to_string();
        for node in ms.iter().chain(&rs).skip(1) {
            ok(
                ms[0]
                    .cmd(&["CLUSTER", "MEET", &node.host().addr().to_string(), &port])
                    .await?,
                "MEET",
            )?;
        }
        let cluster = NetCluster {
            masters: ms,
            replicas: rs,
        };
        let total = (masters * 2).to_string();
        wait_until("every node to know every other", CONVERGE_TIMEOUT, || async {
            for node in cluster.nodes() {
                let info = cluster_info(node).await?;
                if info.get("cluster_known_nodes") != Some(&total) {
                    return Ok(false);
                }
            }
            Ok(true)
        })
        .await?;
        for (m, r) in cluster.masters.iter().zip(&cluster.replicas) {
            let id = m.cmd(&["CLUSTER", "MYID"]).await?.into_result("CLUSTER MYID")?;
            let id = id.as_str().unwrap_or_default().to_owned();
            ok(r.cmd(&["CLUSTER", "REPLICATE", &id]).await?, "REPLICATE")?;
        }
        cluster.wait_until_ok(CONVERGE_TIMEOUT).await?;
        Ok(cluster)
    }

    /// Waits until every node reports `cluster_state:ok` with all slots
    /// assigned, and every node that is a replica has its master link up.
    ///
    /// # Errors
    /// [`HarnessError::Timeout`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn wait_until_ok(&self, timeout: Duration) -> HarnessResult<()> {
        wait_until("the cluster to report cluster_state:ok everywhere", timeout, || async {
            for node in self.nodes() {
                let info = cluster_info(node).await?;
                let get = |k: &str| info.get(k).map(String::as_str).unwrap_or_default();
                if get("cluster_state") != "ok" || get("cluster_slots_assigned") != "16384" {
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
        })
        .await
    }

    /// The masters, as created.
    pub fn masters(&self) -> &[NetRedisServer] {
        &self.masters
    }

    /// The replicas, as created: `replicas()[i]` follows `masters()[i]`.
    pub fn replicas(&self) -> &[NetRedisServer] {
        &self.replicas
    }

    /// Every node, masters first.
    pub fn nodes(&self) -> impl Iterator<Item = &NetRedisServer> {
        self.masters.iter().chain(&self.replicas)
    }

    /// Every node's URL (cluster clients' seeds).
    pub fn urls(&self) -> Vec<String> {
        self.nodes().map(NetRedisServer::url).collect()
    }

    /// The index of the master serving `key` as created.
    ///
    /// # Errors
    /// A reply that is not an integer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn master_index_for_key(&self, key: &str) -> HarnessResult<usize> {
        let slot = self.masters[0]
            .cmd(&["CLUSTER", "KEYSLOT", key])
            .await?
            .into_result("CLUSTER KEYSLOT")?
            .as_int()
            .and_then(|s| u32::try_from(s).ok())
            .ok_or_else(|| HarnessError::Protocol("CLUSTER KEYSLOT: not an integer".into()))?;
        let n = u32::try_from(self.masters.len()).unwrap_or(1);
        Ok(usize::try_from(slot * n / SLOTS).unwrap_or(0))
    }

    /// Whether `node` sees itself as a master (`ROLE`, asked on its own host).
    ///
    /// # Errors
    /// As [`NetRedisServer::cmd`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn is_master(node: &NetRedisServer) -> HarnessResult<bool> {
        let role = node.cmd(&["ROLE"]).await?.into_result("ROLE")?;
        Ok(role.as_array().and_then(|a| a.first()).and_then(RespValue::as_str) == Some("master"))
    }

    /// The hosts of the nodes, masters first.
    pub fn hosts(&self) -> Vec<&NetHost> {
        self.nodes().map(NetRedisServer::host).collect()
    }
}

async fn cluster_info(node: &NetRedisServer) -> HarnessResult<HashMap<String, String>> {
    let reply = node.cmd(&["CLUSTER", "INFO"]).await?.into_result("CLUSTER INFO")?;
    Ok(parse_info(reply.as_str().unwrap_or_default()))
}

fn ok(reply: RespValue, what: &str) -> HarnessResult<()> {
    if reply.is_ok() {
        Ok(())
    } else {
        Err(HarnessError::Reply {
            command: format!("CLUSTER {what}"),
            message: format!("{reply:?}"),
        })
    }
}
