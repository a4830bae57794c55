//! Redis Sentinel on network-namespace hosts ([`NetSentinelGroup`]): every
//! data node and every sentinel on its own host, so that a partition can
//! leave the primary (and any client) in a minority while the sentinels
//! promote a replica on the other side.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use super::error::{HarnessError, HarnessResult};
use super::netns::{NET_REDIS_PORT, Network};
use super::netns_redis::{NetRedisServer, NetRedisServerBuilder};
use super::process::wait_until;
use super::resp::RespValue;
use super::sentinel::{SENTINEL_DOWN_AFTER, SENTINEL_FAILOVER_TIMEOUT, SENTINEL_MASTER_NAME, SENTINEL_QUORUM};
use super::topology::CONVERGE_TIMEOUT;

const REPLICAS: usize = 2;
const SENTINELS: usize = 3;

/// A primary, two replicas and three sentinels, each process on its own
/// host of a [`Network`] (hosts `d0`–`d2` for the data nodes, `d0` the
/// first primary, and `st0`–`st2` for the sentinels), with
/// [`SentinelGroup`](super::SentinelGroup)'s settings: quorum
/// [`SENTINEL_QUORUM`], [`SENTINEL_DOWN_AFTER`],
/// [`SENTINEL_FAILOVER_TIMEOUT`]. Every sentinel announces its host's
/// address (`sentinel announce-ip`), so what the sentinels tell each other
/// and the clients are addresses a client on another host can reach.
///
/// Every query here runs from the queried process's own host, which no
/// partition cuts off.
#[derive(Debug)]
pub struct NetSentinelGroup {
    /// The data nodes; the first was the primary at the start.
    nodes: Vec<NetRedisServer>,
    sentinels: Vec<NetRedisServer>,
}

impl NetSentinelGroup {
    /// Starts the data nodes from `builder` (modules and arguments apply to
    /// each) on new hosts of `net`, waits for both replicas to sync, then
    /// starts the sentinels and returns once every sentinel names the
    /// primary and sees both replicas and the two other sentinels.
    ///
    /// # Errors
    /// Start errors ([`HarnessError::NotFound`] with an install hint for a
    /// missing binary, or without root and `ip`), or
    /// [`HarnessError::Timeout`] when the group does not converge within
    /// [`CONVERGE_TIMEOUT`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills the processes it started.
    pub async fn start(net: &Network, builder: NetRedisServerBuilder) -> HarnessResult<Self> {
        let primary = builder.start(&net.add_host("d0")?).await?;
        let replica = builder.clone().args([
            "--replicaof".to_owned(),
            primary.host().addr().to_string(),
            NET_REDIS_PORT.to_string(),
        ]);
        let mut nodes = vec![primary];
        for i in 1..=REPLICAS {
            nodes.push(replica.start(&net.add_host(&format!("d{i}"))?).await?);
        }
        let mut group = NetSentinelGroup {
            nodes,
            sentinels: Vec::with_capacity(SENTINELS),
        };
        wait_until("the replicas to sync", CONVERGE_TIMEOUT, || async {
            for node in &group.nodes[1..] {
                if node
                    .info("replication")
                    .await?
                    .get("master_link_status")
                    .map(String::as_str)
                    != Some("up")
                {
                    return Ok(false);
                }
            }
            Ok(true)
        })
        .await?;
        let primary_ip = group.nodes[0].host().addr();
        for i in 0..SENTINELS {
            let host = net.add_host(&format!("st{i}"))?;
            let config = format!(
                "sentinel resolve-hostnames no\n\
                 sentinel announce-ip {ip}\n\
                 sentinel monitor {name} {primary_ip} {NET_REDIS_PORT} {SENTINEL_QUORUM}\n\
                 sentinel down-after-milliseconds {name} {down}\n\
                 sentinel failover-timeout {name} {failover}\n\
                 sentinel parallel-syncs {name} {REPLICAS}\n",
                ip = host.addr(),
                name = SENTINEL_MASTER_NAME,
                down = SENTINEL_DOWN_AFTER.as_millis(),
                failover = SENTINEL_FAILOVER_TIMEOUT.as_millis(),
            );
            let sentinel = NetRedisServerBuilder::new().sentinel_mode(config);
            group.sentinels.push(sentinel.start(&host).await?);
        }
        group.wait_until_settled(CONVERGE_TIMEOUT).await?;
        Ok(group)
    }

    /// The data nodes (the primary at the start first, then the replicas).
    pub fn nodes(&self) -> &[NetRedisServer] {
        &self.nodes
    }

    /// The sentinels.
    pub fn sentinels(&self) -> &[NetRedisServer] {
        &self.sentinels
    }

    /// `{scheme}://a:7000,b:7000,c:7000/verrou`: the sentinels' host
    /// addresses, e.g. with `redis+sentinel`.
    pub fn url(&self, scheme: &str) -> String {
        let hosts: Vec<String> = self.sentinels.iter().map(|s| s.addr().to_string()).collect();
        format!("{scheme}://{}/{SENTINEL_MASTER_NAME}", hosts.join(","))
    }

    /// The data node sentinel `i` names as the primary
    /// (`SENTINEL get-master-addr-by-name`).
    ///
    /// # Errors
    /// No such sentinel, no answer, or an address that is not one of the
    /// data nodes.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn named_primary(&self, i: usize) -> HarnessResult<&NetRedisServer> {
        let sentinel = self
            .sentinels
            .get(i)
            .ok_or_else(|| HarnessError::Setup(format!("no sentinel {i}")))?;
        let reply = sentinel
            .cmd(&["SENTINEL", "get-master-addr-by-name", SENTINEL_MASTER_NAME])
            .await?
            .into_result("SENTINEL get-master-addr-by-name")?;
        let field = |n: usize| reply.as_array().and_then(|a| a.get(n)).and_then(RespValue::as_str);
        let addr = field(0)
            .zip(field(1))
            .and_then(|(ip, port)| format!("{ip}:{port}").parse::<SocketAddr>().ok())
            .ok_or_else(|| HarnessError::Protocol(format!("unexpected get-master-addr-by-name reply {reply:?}")))?;
        self.nodes
            .iter()
            .find(|n| n.addr() == addr)
            .ok_or_else(|| HarnessError::Setup(format!("the sentinels name {addr}, not a data node")))
    }

    /// The data node the first sentinel names as the primary.
    ///
    /// # Errors
    /// As [`named_primary`](Self::named_primary).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn primary(&self) -> HarnessResult<&NetRedisServer> {
        self.named_primary(0).await
    }

    /// Whether `node` sees itself as a primary (`ROLE`).
    ///
    /// # Errors
    /// As [`NetRedisServer::cmd`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn is_primary(node: &NetRedisServer) -> HarnessResult<bool> {
        let role = node.cmd(&["ROLE"]).await?.into_result("ROLE")?;
        Ok(role.as_array().and_then(|a| a.first()).and_then(RespValue::as_str) == Some("master"))
    }

    /// Waits until every sentinel names a primary other than `old`, and
    /// that node reports `role:master`; returns it. (`old` may still
    /// believe it is the primary: partitioned away, nobody told it.)
    ///
    /// # Errors
    /// [`HarnessError::Timeout`] (with the last error seen, if any).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn wait_for_failover(&self, old: &NetRedisServer, timeout: Duration) -> HarnessResult<&NetRedisServer> {
        let promoted = std::cell::Cell::new(None);
        wait_until(
            &format!("the sentinels to promote a replica of {}", old.addr()),
            timeout,
            || {
                let promoted = &promoted;
                async move {
                    let mut named: Option<&NetRedisServer> = None;
                    for i in 0..self.sentinels.len() {
                        let node = self.named_primary(i).await?;
                        if node.addr() == old.addr() || named.is_some_and(|p| p.addr() != node.addr()) {
                            return Ok(false);
                        }
                        named = Some(node);
                    }
                    let Some(node) = named else { return Ok(false) };
                    promoted.set(Some(node));
                    Self::is_primary(node).await
                }
            },
        )
        .await?;
        promoted
            .get()
            .ok_or_else(|| HarnessError::Setup("no primary after the failover".into()))
    }

    /// Waits until every sentinel names one primary, flagged `master` (up),
    /// seeing the two other sentinels, and every other data node (an old
    /// primary too, once the sentinels have demoted it) replicates it with
    /// its link up.
    ///
    /// # Errors
    /// [`HarnessError::Timeout`] (with the last error seen, if any).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn wait_until_settled(&self, timeout: Duration) -> HarnessResult<()> {
        wait_until("the sentinels to see the whole group", timeout, || async {
            let primary = self.primary().await?;
            for (i, sentinel) in self.sentinels.iter().enumerate() {
                if self.named_primary(i).await?.addr() != primary.addr() {
                    return Ok(false);
                }
                let reply = sentinel.cmd(&["SENTINEL", "MASTER", SENTINEL_MASTER_NAME]).await?;
                let fields = pairs(&reply.into_result("SENTINEL MASTER")?);
                let get = |k: &str| fields.get(k).map(String::as_str).unwrap_or_default();
                if get("flags") != "master"
                    || get("num-other-sentinels").parse::<usize>().unwrap_or(0) < SENTINELS - 1
                    || get("num-slaves").parse::<usize>().unwrap_or(0) < REPLICAS
                {
                    return Ok(false);
                }
            }
            let ip = primary.host().addr().to_string();
            for node in self.nodes.iter().filter(|n| n.addr() != primary.addr()) {
                let repl = node.info("replication").await?;
                if repl.get("master_link_status").map(String::as_str) != Some("up")
                    || repl.get("master_host") != Some(&ip)
                {
                    return Ok(false);
                }
            }
            Ok(true)
        })
        .await
    }
}

/// A flat `[field, value, field, value, …]` reply as a map.
fn pairs(reply: &RespValue) -> HashMap<String, String> {
    let items = reply.as_array().unwrap_or_default();
    items
        .chunks_exact(2)
        .filter_map(|kv| Some((kv[0].as_str()?.to_owned(), kv[1].as_str()?.to_owned())))
        .collect()
}
