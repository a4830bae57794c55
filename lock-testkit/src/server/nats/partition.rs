//! A member's network cut on a [`NatsCluster`]: every route between two
//! nodes runs through the proxy of the node that was dialled (each node
//! advertises its proxy's address, so gossip leads nowhere else), and a
//! partition makes those proxies refuse the other side's node processes,
//! as [`EtcdCluster::partition`](super::super::EtcdCluster::partition)
//! does (`peer_proxy.rs`). Client ports stay reachable: a client of a cut
//! node keeps its connection, and its requests go unanswered. And a
//! stream's leader moved to a chosen node, with the JetStream API's leader
//! step-down (a preferred server) over one plain NATS connection.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::super::error::{HarnessError, HarnessResult};
use super::{NatsCluster, SyncInterval};

/// The bound on one JetStream API request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

impl NatsCluster {
    /// `n` nodes (2 to 7), `sync_interval: always`, whose routes go through
    /// proxies, so [`NatsCluster::partition`] can cut nodes apart. The
    /// proxies run on the caller's tokio runtime: use the cluster in that
    /// runtime only.
    ///
    /// # Errors
    /// As [`NatsCluster::single`].
    ///
    /// # Cancel safety
    /// Cancel safe: the processes die with the dropped value.
    pub async fn partitionable(n: usize) -> HarnessResult<NatsCluster> {
        if n < 2 {
            return Err(HarnessError::Setup("a partition needs at least two nodes".into()));
        }
        NatsCluster::start_with(n, SyncInterval::Always, true).await
    }

    /// Whether the cluster was started with [`NatsCluster::partitionable`].
    pub fn is_partitionable(&self) -> bool {
        self.nodes.iter().all(|m| m.peer_proxy.is_some())
    }

    /// Cut the nodes of `side` off from the others, both ways (client ports
    /// stay reachable): each node's proxy refuses the node processes on the
    /// other side, and open routes are cut. Replaces any earlier partition;
    /// an empty `side` heals.
    ///
    /// # Errors
    /// [`HarnessError::Setup`] on a cluster not started with
    /// [`NatsCluster::partitionable`]. A node restarted later runs as a new
    /// process: partition again to block it.
    pub fn partition(&self, side: &[usize]) -> HarnessResult<()> {
        if !self.is_partitionable() {
            return Err(HarnessError::Setup("partitions need NatsCluster::partitionable".into()));
        }
        let pids: Vec<Option<u32>> = (0..self.nodes.len()).map(|i| self.pid(i)).collect();
        for (i, m) in self.nodes.iter().enumerate() {
            let mine = side.contains(&i);
            let blocked: HashSet<u32> = pids
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
    /// As [`NatsCluster::partition`].
    pub fn heal(&self) -> HarnessResult<()> {
        self.partition(&[])
    }

    /// Make node `to` the leader of stream `stream` (a key-value bucket
    /// `b` is the stream `KV_b`): while another node leads, ask the leader
    /// to step down in favour of `to`, until `to` names itself the leader.
    ///
    /// # Errors
    /// [`HarnessError::Timeout`] when `to` does not lead within `timeout`
    /// (with the last step-down answer).
    ///
    /// # Cancel safety
    /// Cancel safe: a step-down asked for runs on in the cluster.
    pub async fn move_stream_leader(&self, stream: &str, to: usize, timeout: Duration) -> HarnessResult<()> {
        let started = Instant::now();
        let mut last_ask: Option<Instant> = None;
        let mut last_answer = String::from("no answer yet");
        loop {
            if self.stream_leader(stream, timeout).await? == to && self.leader_seen_by(to, stream).await {
                return Ok(());
            }
            if started.elapsed() >= timeout {
                return Err(HarnessError::Timeout {
                    what: format!("node {to} leading NATS stream {stream} (last step-down answer: {last_answer})"),
                    after: timeout,
                });
            }
            // One request a second at most: an election takes a while, and
            // a request during one may go unanswered (asked again).
            if last_ask.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                last_ask = Some(Instant::now());
                let payload = format!("{{\"placement\":{{\"preferred\":\"{}\"}}}}", self.nodes[to].name);
                let subject = format!("$JS.API.STREAM.LEADER.STEPDOWN.{stream}");
                last_answer = match self.request(to, &subject, &payload).await {
                    Ok(answer) => answer,
                    Err(e) => e.to_string(),
                };
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether node `i` itself names itself the leader of `stream`.
    async fn leader_seen_by(&self, i: usize, stream: &str) -> bool {
        let Ok(text) = self.monitor(i, "/jsz?accounts=true&streams=true").await else {
            return false;
        };
        let text = text.replace("\": ", "\":");
        text.find(&format!("\"name\":\"{stream}\""))
            .and_then(|at| super::json_field(&text[at..], "leader"))
            .is_some_and(|leader| leader == self.nodes[i].name)
    }

    /// One request to node `i` over a plain NATS connection of its own (a
    /// JetStream API call: `$JS.API.…` with a JSON payload); the reply's
    /// payload. A partition does not cut it (client ports stay reachable).
    ///
    /// # Errors
    /// The connection failing, an `-ERR`, or [`HarnessError::Timeout`]
    /// after 2 s.
    ///
    /// # Cancel safety
    /// Cancel safe: the request's connection closes with the future.
    pub async fn request(&self, i: usize, subject: &str, payload: &str) -> HarnessResult<String> {
        request(self.client_port(i), subject, payload).await
    }

    /// One GET of node `i`'s monitoring endpoint `path` (`/routez`,
    /// `/jsz?streams=true`, …); the whole HTTP answer.
    ///
    /// # Errors
    /// The connection failing, or [`HarnessError::Timeout`] after 1 s (a
    /// paused node).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn monitor(&self, i: usize, path: &str) -> HarnessResult<String> {
        super::http(super::local(self.nodes[i].http_port), path).await
    }
}

/// One request over a plain NATS connection to `127.0.0.1:port`: the
/// reply's payload.
async fn request(port: u16, subject: &str, payload: &str) -> HarnessResult<String> {
    let what = format!("NATS request {subject} on port {port}");
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        let (read, mut write) = stream.into_split();
        let mut read = BufReader::new(read);
        let mut line = String::new();
        read.read_line(&mut line).await?; // INFO
        let inbox = "_INBOX.verrou-harness";
        let out = format!(
            "CONNECT {{\"verbose\":false,\"pedantic\":false,\"echo\":false}}\r\nSUB {inbox} 1\r\nPUB {subject} {inbox} {}\r\n{payload}\r\n",
            payload.len()
        );
        write.write_all(out.as_bytes()).await?;
        loop {
            line.clear();
            if read.read_line(&mut line).await? == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                ));
            }
            if line.starts_with("PING") {
                write.write_all(b"PONG\r\n").await?;
            } else if line.starts_with("-ERR") {
                return Err(std::io::Error::other(line.trim().to_owned()));
            } else if let Some(rest) = line.strip_prefix("MSG ") {
                let len: usize = rest
                    .split_whitespace()
                    .last()
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| std::io::Error::other(format!("a MSG line without a size: {line:?}")))?;
                let mut body = vec![0; len + 2];
                read.read_exact(&mut body).await?;
                body.truncate(len);
                return Ok(String::from_utf8_lossy(&body).into_owned());
            }
        }
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(HarnessError::io(what, e)),
        Err(_) => Err(HarnessError::Timeout {
            what,
            after: REQUEST_TIMEOUT,
        }),
    }
}
