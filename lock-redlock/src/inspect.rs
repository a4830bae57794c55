//! Inspecting a key across the nodes: a quorum read, never a write.

use std::time::Duration;

use lock_core::{Error, LockInfo, Result};

use crate::{NAME, Redlock};

impl Redlock {
    /// Reads `key` on every node at once (each read bounded by the
    /// options' maximum node timeout) and answers for the quorum:
    ///
    /// - **held** when at least `M` nodes hold the key; the remaining lease
    ///   is the `M`-th longest of theirs (when fewer than `M` nodes hold it,
    ///   no quorum does). During contending partial grants the `M` nodes
    ///   may hold it for different clients: a snapshot, as every inspect.
    /// - **free** when at least `N − M + 1` nodes do not hold it (no quorum
    ///   can).
    /// - otherwise an error: [`Error::Unsupported`] (with the nodes' reason)
    ///   when nodes that cannot inspect leave it open, else
    ///   [`Error::Backend`] naming the nodes that failed.
    ///
    /// Redlock issues no fencing tokens, so none is reported.
    pub(crate) async fn inspect_quorum(&self, key: &str) -> Result<LockInfo> {
        lock_core::raw::validate_key(key)?;
        let timeout = self
            .inner
            .options
            .max_node_timeout
            .max(self.inner.options.min_node_timeout);
        let answers = futures::future::join_all(self.inner.nodes.iter().map(|node| async move {
            match tokio::time::timeout(timeout, node.inspect(key)).await {
                Ok(answer) => answer,
                Err(_) => Err(Error::backend(node.capabilities().name, "inspect timed out")),
            }
        }))
        .await;
        let quorum = self.inner.quorum;
        let n = self.inner.nodes.len();
        let mut held: Vec<Option<Duration>> = Vec::new();
        let mut free = 0;
        let mut unsupported = None;
        let mut failed = Vec::new();
        for (i, answer) in answers.into_iter().enumerate() {
            match answer {
                Ok(info) if info.held => held.push(info.remaining),
                Ok(_) => free += 1,
                Err(e @ Error::InvalidArgument(_)) => return Err(e),
                Err(Error::Unsupported { what, .. }) => unsupported = Some(format!("{}: {what}", self.inner.names[i])),
                Err(e) => failed.push(format!("{}: {e}", self.inner.names[i])),
            }
        }
        if held.len() >= quorum {
            // The M-th longest remaining lease (unknown ones count as the
            // shortest: nothing is promised for them).
            let mut left: Vec<Duration> = held.iter().map(|r| r.unwrap_or(Duration::ZERO)).collect();
            left.sort_unstable_by(|a, b| b.cmp(a));
            let remaining = left
                .get(quorum - 1)
                .copied()
                .filter(|_| held.iter().all(Option::is_some));
            return Ok(LockInfo::held(remaining));
        }
        if free > n - quorum {
            return Ok(LockInfo::free());
        }
        if let Some(reason) = unsupported {
            return Err(Error::unsupported(
                NAME,
                format!("inspecting a lock: too few nodes can answer for a quorum ({reason})"),
            ));
        }
        Err(Error::backend(
            NAME,
            format!(
                "inspect: {} of {n} nodes hold the key, {free} do not, below the quorum of {quorum} either way: {}",
                held.len(),
                failed.join("; ")
            ),
        ))
    }
}
