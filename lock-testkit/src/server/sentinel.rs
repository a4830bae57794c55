//! Redis Sentinel: a primary, two replicas and three sentinels on
//! 127.0.0.1 ([`SentinelGroup`]).

use std::collections::HashMap;
use std::time::Duration;

use futures::future::try_join_all;

use super::error::{HarnessError, HarnessResult};
use super::process::{RedisServer, wait_until};
use super::redis_builder::RedisServerBuilder;
use super::resp::RespValue;
use super::topology::CONVERGE_TIMEOUT;

/// The name the sentinels monitor the primary under (the path of a
/// `redis+sentinel://…/verrou` URL).
pub const SENTINEL_MASTER_NAME: &str = "verrou";
/// `sentinel down-after-milliseconds`: how long the primary may be silent
/// before a sentinel deems it down.
pub const SENTINEL_DOWN_AFTER: Duration = Duration::from_millis(500);
/// `sentinel failover-timeout`.
pub const SENTINEL_FAILOVER_TIMEOUT: Duration = Duration::from_secs(2);
/// How many sentinels must agree that the primary is down.
pub const SENTINEL_QUORUM: usize = 2;

const REPLICAS: usize = 2;
const SENTINELS: usize = 3;

/// A primary, two replicas of it and three sentinels monitoring it as
/// [`SENTINEL_MASTER_NAME`] with quorum [`SENTINEL_QUORUM`], short
/// [`SENTINEL_DOWN_AFTER`] and [`SENTINEL_FAILOVER_TIMEOUT`]; every
/// process a [`RedisServer`], so the faults are theirs
/// ([`RedisServer::kill`], [`RedisServer::pause`], …).
///
/// The sentinels run [`redis_sentinel_binary`](super::redis_sentinel_binary)
/// (Debian's `redis-sentinel`; `$VERROU_REDIS_SENTINEL` overrides it).
///
/// ```no_run
/// # async fn demo() -> Result<(), lock_testkit::server::HarnessError> {
/// use lock_testkit::server::{RedisServer, SentinelGroup};
/// use std::time::Duration;
///
/// let group = SentinelGroup::start(RedisServer::builder()).await?;
/// let url = group.url("redis+sentinel"); // redis+sentinel://127.0.0.1:a,…/verrou
/// let old = group.primary().await?;
/// old.kill()?;
/// let new = group.wait_for_failover(old.port(), Duration::from_secs(30)).await?;
/// assert_ne!(new.port(), old.port());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct SentinelGroup {
    /// The data nodes; the first was the primary at the start.
    nodes: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
}

impl SentinelGroup {
    /// Starts the data nodes from `builder` (modules and arguments apply to
    /// each), waits for both replicas to sync, then starts the sentinels
    /// and returns once every sentinel sees the primary, both replicas and
    /// the two other sentinels.
    ///
    /// # Errors
    /// Start errors ([`HarnessError::NotFound`] with an install hint for a
    /// missing sentinel binary), or [`HarnessError::Timeout`] when the
    /// group does not converge within [`CONVERGE_TIMEOUT`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the processes it started.
    pub async fn start(builder: RedisServerBuilder) -> HarnessResult<Self> {
        Self::start_with(builder, SENTINEL_DOWN_AFTER).await
    }

    /// [`SentinelGroup::start`] with another `down-after-milliseconds`:
    /// a group shared by many test cases on a loaded machine takes a longer
    /// one, so that a slow reply does not fail it over.
    ///
    /// # Errors
    /// As [`SentinelGroup::start`].
    ///
    /// # Cancel safety
    ///
    /// As [`SentinelGroup::start`].
    pub async fn start_with(builder: RedisServerBuilder, down_after: Duration) -> HarnessResult<Self> {
        let primary = builder.start().await?;
        let replica = builder
            .clone()
            .args(["--replicaof", "127.0.0.1"])
            .arg(primary.port().to_string());
        let replicas = try_join_all((0..REPLICAS).map(|_| replica.start())).await?;
        let mut nodes = vec![primary];
        nodes.extend(replicas);
        let port = nodes[0].port();
        let config = format!(
            "sentinel resolve-hostnames no\n\
             sentinel monitor {name} 127.0.0.1 {port} {SENTINEL_QUORUM}\n\
             sentinel down-after-milliseconds {name} {down}\n\
             sentinel failover-timeout {name} {failover}\n\
             sentinel parallel-syncs {name} {REPLICAS}\n",
            name = SENTINEL_MASTER_NAME,
            down = down_after.as_millis(),
            failover = SENTINEL_FAILOVER_TIMEOUT.as_millis(),
        );
        let sentinel = RedisServerBuilder::new().sentinel_mode(config);
        let mut group = SentinelGroup {
            nodes,
            sentinels: Vec::new(),
        };
        group.wait_for_replicas(CONVERGE_TIMEOUT).await?;
        group.sentinels = try_join_all((0..SENTINELS).map(|_| sentinel.start())).await?;
        group.wait_until_settled(CONVERGE_TIMEOUT).await?;
        Ok(group)
    }

    /// The data nodes (the primary at the start first, then the replicas).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The sentinels.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// `127.0.0.1:a,127.0.0.1:b,127.0.0.1:c`: the sentinels' addresses.
    pub fn sentinel_hosts(&self) -> String {
        let hosts: Vec<String> = self.sentinels.iter().map(|s| s.addr().to_string()).collect();
        hosts.join(",")
    }

    /// `{scheme}://<sentinels>/verrou`, e.g. with `redis+sentinel`.
    pub fn url(&self, scheme: &str) -> String {
        format!("{scheme}://{}/{SENTINEL_MASTER_NAME}", self.sentinel_hosts())
    }

    /// The data node the first answering sentinel names as the primary
    /// (`SENTINEL get-master-addr-by-name`).
    ///
    /// # Errors
    /// No running sentinel answers, or it names a port that is not one of
    /// the data nodes.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn primary(&self) -> HarnessResult<&RedisServer> {
        let mut last = None;
        for sentinel in self.live(&self.sentinels) {
            match self.named_primary(sentinel).await {
                Ok(node) => return Ok(node),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| HarnessError::Setup("no running sentinel".into())))
    }

    /// Waits until every running, unpaused sentinel names a primary other
    /// than the node on `old_port`, and that node reports `role:master`;
    /// returns it.
    ///
    /// # Errors
    /// [`HarnessError::Timeout`] (with the last error seen, if any).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn wait_for_failover(&self, old_port: u16, timeout: Duration) -> HarnessResult<&RedisServer> {
        let promoted = std::cell::Cell::new(None);
        wait_until(
            &format!("the sentinels to promote a replica of the primary on port {old_port}"),
            timeout,
            || {
                let promoted = &promoted;
                async move {
                    let mut named = None;
                    for sentinel in self.live(&self.sentinels) {
                        let node = self.named_primary(sentinel).await?;
                        if node.port() == old_port || named.is_some_and(|p: &RedisServer| p.port() != node.port()) {
                            return Ok(false);
                        }
                        named = Some(node);
                    }
                    let Some(node) = named else { return Ok(false) };
                    let role = node.info("replication").await?;
                    promoted.set(Some(node));
                    Ok(role.get("role").map(String::as_str) == Some("master"))
                }
            },
        )
        .await?;
        promoted
            .get()
            .ok_or_else(|| HarnessError::Setup("no primary after the failover".into()))
    }

    /// Waits until every running, unpaused sentinel sees the current
    /// primary up, with every running replica and the other running
    /// sentinels, and every running replica has its link to the primary up.
    ///
    /// # Errors
    /// [`HarnessError::Timeout`] (with the last error seen, if any).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn wait_until_settled(&self, timeout: Duration) -> HarnessResult<()> {
        let replicas = self.live(&self.nodes).count().saturating_sub(1);
        let others = self.live(&self.sentinels).count().saturating_sub(1);
        wait_until("the sentinels to see the whole group", timeout, || async {
            let primary = self.primary().await?;
            for sentinel in self.live(&self.sentinels) {
                let reply = sentinel.cmd(&["SENTINEL", "MASTER", SENTINEL_MASTER_NAME]).await?;
                let fields = pairs(&reply.into_result("SENTINEL MASTER")?);
                let get = |k: &str| fields.get(k).map(String::as_str).unwrap_or_default();
                let count = |k: &str| get(k).parse::<usize>().unwrap_or(0);
                if get("port") != primary.port().to_string()
                    || get("flags") != "master"
                    || count("num-slaves") < replicas
                    || count("num-other-sentinels") < others
                {
                    return Ok(false);
                }
            }
            for node in self.live(&self.nodes).filter(|n| n.port() != primary.port()) {
                let repl = node.info("replication").await?;
                if repl.get("master_link_status").map(String::as_str) != Some("up")
                    || repl.get("master_port").map(String::as_str) != Some(&primary.port().to_string())
                {
                    return Ok(false);
                }
            }
            Ok(true)
        })
        .await
    }

    async fn wait_for_replicas(&self, timeout: Duration) -> HarnessResult<()> {
        wait_until("the replicas to sync", timeout, || async {
            for node in &self.nodes[1..] {
                let repl = node.info("replication").await?;
                if repl.get("master_link_status").map(String::as_str) != Some("up") {
                    return Ok(false);
                }
            }
            Ok(true)
        })
        .await
    }

    async fn named_primary(&self, sentinel: &RedisServer) -> HarnessResult<&RedisServer> {
        let reply = sentinel
            .cmd(&["SENTINEL", "get-master-addr-by-name", SENTINEL_MASTER_NAME])
            .await?
            .into_result("SENTINEL get-master-addr-by-name")?;
        let port = reply
            .as_array()
            .and_then(|a| a.get(1))
            .and_then(RespValue::as_str)
            .and_then(|p| p.parse::<u16>().ok())
            .ok_or_else(|| HarnessError::Protocol(format!("unexpected get-master-addr-by-name reply {reply:?}")))?;
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .ok_or_else(|| HarnessError::Setup(format!("the sentinels name port {port}, not a data node")))
    }

    fn live<'a>(&self, servers: &'a [RedisServer]) -> impl Iterator<Item = &'a RedisServer> {
        servers.iter().filter(|s| s.is_running() && !s.is_paused())
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
