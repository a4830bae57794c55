//! What etcd members report over their JSON gateway (HTTP/1.1 on the
//! client port): who leads, and a member's open descriptors, keys and
//! leases.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::EtcdCluster;
use crate::server::error::{HarnessError, HarnessResult};

impl EtcdCluster {
    /// Index of the member that leads now, as the running members see it.
    ///
    /// # Errors
    /// [`HarnessError::Timeout`] when no running member names a leader that
    /// answers within `timeout`.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn leader(&self, timeout: Duration) -> HarnessResult<usize> {
        let started = Instant::now();
        loop {
            if let Some(i) = self.leader_now().await {
                return Ok(i);
            }
            if started.elapsed() >= timeout {
                return Err(HarnessError::Timeout {
                    what: "an etcd leader".into(),
                    after: timeout,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn leader_now(&self) -> Option<usize> {
        let mut ids = Vec::with_capacity(self.members.len());
        let mut leader = None;
        for m in &self.members {
            let status = if m.lock().paused {
                None
            } else {
                http(m.client_port, "POST", "/v3/maintenance/status", "{}").await.ok()
            };
            ids.push(status.as_deref().and_then(|s| json_field(s, "member_id")));
            if let Some(l) = status.as_deref().and_then(|s| json_field(s, "leader")) {
                leader = Some(l);
            }
        }
        let leader = leader?;
        ids.iter().position(|id| id.as_deref() == Some(leader.as_str()))
    }

    /// What member `i` reports about itself: its open file descriptors (the
    /// `process_open_fds` metric: client connections among them), and the
    /// keys and leases it holds (count-only range over every key; lease
    /// list), for a soak to watch.
    ///
    /// # Errors
    /// [`HarnessError::NotRunning`] when the member is paused or stopped;
    /// the gateway's errors; [`HarnessError::Reply`] when an answer lacks
    /// the figure.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn member_counts(&self, i: usize) -> HarnessResult<MemberCounts> {
        let m = &self.members[i];
        if m.lock().paused || !self.is_running(i) {
            return Err(HarnessError::NotRunning { port: m.client_port });
        }
        let missing = |what: &str, text: &str| HarnessError::Reply {
            command: format!("reading {what} from etcd member {i}"),
            message: format!("not in {}", text.trim()),
        };
        let metrics = http(m.client_port, "GET", "/metrics", "").await?;
        let open_fds = metrics
            .lines()
            .find_map(|l| l.strip_prefix("process_open_fds "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .ok_or_else(|| missing("process_open_fds", "the metrics"))?;
        // Every key: from "\0" to "\0" (base64 "AA=="), counted only.
        let range = http(
            m.client_port,
            "POST",
            "/v3/kv/range",
            r#"{"key":"AA==","range_end":"AA==","count_only":true}"#,
        )
        .await?;
        // An empty keyspace leaves the zero count out of the answer.
        let keys =
            json_field(&range, "count").map_or(Ok(0), |c| c.parse::<u64>().map_err(|_| missing("count", &range)))?;
        let leases = http(m.client_port, "POST", "/v3/lease/leases", "{}").await?;
        Ok(MemberCounts {
            open_fds,
            keys,
            leases: leases.matches("\"ID\"").count() as u64,
        })
    }
}

impl EtcdCluster {
    /// The sum of member `i`'s metric `name` over its label sets, from its
    /// `/metrics` page on the client port (for example
    /// `etcd_mvcc_range_total`, every range the member served, a range in a
    /// transaction included); zero when the member reports no such series.
    ///
    /// # Errors
    /// [`HarnessError::NotRunning`] when the member is paused or stopped;
    /// the page's errors; [`HarnessError::Reply`] when a value is not a
    /// number.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn metric(&self, i: usize, name: &str) -> HarnessResult<f64> {
        let m = &self.members[i];
        if m.lock().paused || !self.is_running(i) {
            return Err(HarnessError::NotRunning { port: m.client_port });
        }
        let page = http(m.client_port, "GET", "/metrics", "").await?;
        let mut sum = 0.0;
        for line in page.lines() {
            let Some(rest) = line.strip_prefix(name) else {
                continue;
            };
            let value = match rest.chars().next() {
                Some(' ') => rest,
                Some('{') => rest.rsplit_once('}').map_or("", |(_, v)| v),
                _ => continue, // another metric whose name starts with `name`
            };
            sum += value.trim().parse::<f64>().map_err(|_| HarnessError::Reply {
                command: format!("reading {name} from etcd member {i}"),
                message: format!("not a number in {line}"),
            })?;
        }
        Ok(sum)
    }
}

/// What one etcd member reports (see [`EtcdCluster::member_counts`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemberCounts {
    /// The member process's open file descriptors.
    pub open_fds: f64,
    /// Keys in its keyspace.
    pub keys: u64,
    /// Leases it knows.
    pub leases: u64,
}

/// One HTTP/1.1 request to etcd's JSON gateway; the body of the answer.
pub(super) async fn http(port: u16, method: &str, path: &str, body: &str) -> HarnessResult<String> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&out).into_owned())
    };
    match tokio::time::timeout(Duration::from_secs(1), exchange).await {
        Ok(Ok(text)) => Ok(text),
        Ok(Err(e)) => Err(HarnessError::io(format!("{method} {path} on port {port}"), e)),
        Err(_) => Err(HarnessError::Timeout {
            what: format!("{method} {path} on port {port}"),
            after: Duration::from_secs(1),
        }),
    }
}

/// The string value of `"name":"…"` in a flat JSON text (etcd's gateway
/// writes 64-bit ids as strings).
pub(super) fn json_field(text: &str, name: &str) -> Option<String> {
    let pat = format!("\"{name}\":\"");
    let start = text.find(&pat)? + pat.len();
    let len = text[start..].find('"')?;
    Some(text[start..start + len].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_fields() {
        let s = r#"{"header":{"cluster_id":"1","member_id":"42"},"leader":"42","version":"3.7.2"}"#;
        assert_eq!(json_field(s, "member_id").as_deref(), Some("42"));
        assert_eq!(json_field(s, "leader").as_deref(), Some("42"));
        assert_eq!(json_field(s, "nope"), None);
    }
}
