//! Renewal batching. Lease renewers that come due in the same timer tick (the
//! renewer rounds due times to a grid) hand their renewals to their manager's
//! batcher on their own tokio runtime (one per manager and runtime), which
//! sends them as one [`LockBackend::renew_many`] call: one round trip (one
//! script, or one pipeline) for many leases instead of one each. Each lease's renewer keeps its own timeouts, retries and loss rules.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::backend::{LockBackend, RenewOutcome};
use crate::error::{Error, Result};
use crate::guard::LeaseState;

/// Most leases renewed by one backend call.
const MAX_BATCH: usize = 256;

struct Request {
    lease: Arc<LeaseState>,
    ttl: Duration,
    reply: oneshot::Sender<Result<RenewOutcome>>,
}

/// Handle to a manager's batcher task.
#[derive(Clone)]
pub(crate) struct RenewBatcher {
    tx: mpsc::UnboundedSender<Request>,
}

impl RenewBatcher {
    /// Start the batcher on `runtime`.
    pub(crate) fn spawn(backend: Arc<dyn LockBackend>, runtime: &tokio::runtime::Handle) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        runtime.spawn(run(backend, rx));
        RenewBatcher { tx }
    }

    /// False once the batcher task is gone (its runtime shut down).
    pub(crate) fn is_alive(&self) -> bool {
        !self.tx.is_closed()
    }

    /// Renew `lease` for `ttl` as part of the next batch. If the batcher is
    /// gone (its runtime shut down), renew directly instead.
    pub(crate) async fn renew(&self, lease: &Arc<LeaseState>, ttl: Duration) -> Result<RenewOutcome> {
        let (reply, answer) = oneshot::channel();
        let request = Request {
            lease: lease.clone(),
            ttl,
            reply,
        };
        if self.tx.send(request).is_ok()
            && let Ok(result) = answer.await
        {
            return result;
        }
        lease.backend.renew(&lease.key, &lease.token, ttl).await
    }
}

async fn run(backend: Arc<dyn LockBackend>, mut rx: mpsc::UnboundedReceiver<Request>) {
    while let Some(first) = rx.recv().await {
        // Let the other renewers woken in this tick enqueue theirs.
        tokio::task::yield_now().await;
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        // Every lease of a manager normally shares one TTL; split if not.
        let ttl = batch[0].ttl;
        let (same, other): (Vec<_>, Vec<_>) = batch.into_iter().partition(|r| r.ttl == ttl);
        tokio::spawn(send(backend.clone(), same, ttl));
        for r in other {
            let ttl = r.ttl;
            tokio::spawn(send(backend.clone(), vec![r], ttl));
        }
    }
}

async fn send(backend: Arc<dyn LockBackend>, batch: Vec<Request>, ttl: Duration) {
    // A renewer that gave up (timeout, stop) no longer listens: skip it.
    let batch: Vec<Request> = batch.into_iter().filter(|r| !r.reply.is_closed()).collect();
    if batch.is_empty() {
        return;
    }
    let items: Vec<(&str, &crate::token::LockToken)> =
        batch.iter().map(|r| (r.lease.key.as_str(), &r.lease.token)).collect();
    let results = backend.renew_many(&items, ttl).await;
    let got = results.len();
    let want = batch.len();
    let mut results = results.into_iter();
    for r in batch {
        let result = results.next().unwrap_or_else(|| {
            Err(Error::outcome_unknown(
                backend.capabilities().name,
                format!("renew_many returned {got} results for {want} leases"),
            ))
        });
        let _ = r.reply.send(result);
    }
}

/// The bookkeeping of a backend's [`LockBackend::renew_many`]: validates
/// each item, groups the valid ones (e.g. by cluster hash slot, since one
/// script's keys must share a slot), splits groups into chunks, and puts the
/// chunks' outcomes back in item order.
///
/// ```text
/// let batch = RenewBatch::new(items, ttl, 128, |key| clustered.then(|| slot(key)));
/// let outcomes = join_all(batch.chunks().iter().map(|chunk| self.renew_chunk(items, chunk))).await;
/// batch.finish(items, outcomes, "my-backend")
/// ```
#[derive(Debug)]
pub struct RenewBatch {
    /// Items already answered (invalid input), by position.
    answered: Vec<Option<Result<RenewOutcome>>>,
    chunks: Vec<Vec<usize>>,
}

impl RenewBatch {
    /// Plan the calls: invalid items (empty key, TTL out of range) are
    /// answered with `InvalidArgument` and never sent; the rest are grouped
    /// by `group_of(key)` and split into chunks of at most `max_chunk`.
    pub fn new<K: std::hash::Hash + Eq>(
        items: &[(&str, &crate::token::LockToken)],
        ttl: Duration,
        max_chunk: usize,
        group_of: impl Fn(&str) -> K,
    ) -> Self {
        let answered: Vec<Option<Result<RenewOutcome>>> = items
            .iter()
            .map(|(key, _)| {
                crate::options::validate_key(key)
                    .and_then(|()| crate::options::validate_ttl(ttl))
                    .err()
                    .map(Err)
            })
            .collect();
        let mut groups: std::collections::HashMap<K, Vec<usize>> = std::collections::HashMap::new();
        for (i, (key, _)) in items.iter().enumerate() {
            if answered[i].is_none() {
                groups.entry(group_of(key)).or_default().push(i);
            }
        }
        let chunks = groups
            .into_values()
            .flat_map(|group| {
                group
                    .chunks(max_chunk.max(1))
                    .map(<[usize]>::to_vec)
                    .collect::<Vec<_>>()
            })
            .collect();
        RenewBatch { answered, chunks }
    }

    /// The item indices of each call to make.
    pub fn chunks(&self) -> &[Vec<usize>] {
        &self.chunks
    }

    /// Merge the calls' outcomes (one `Vec` per chunk, in [`RenewBatch::chunks`]
    /// order, one result per index) into one result per item. An item left
    /// without an answer gets an outcome-unknown error.
    pub fn finish(
        mut self,
        items: &[(&str, &crate::token::LockToken)],
        outcomes: Vec<Vec<Result<RenewOutcome>>>,
        backend: &str,
    ) -> Vec<Result<RenewOutcome>> {
        for (chunk, outcomes) in self.chunks.iter().zip(outcomes) {
            for (&i, outcome) in chunk.iter().zip(outcomes) {
                self.answered[i] = Some(outcome);
            }
        }
        self.answered
            .into_iter()
            .zip(items)
            .map(|(r, (key, _))| {
                r.unwrap_or_else(|| Err(Error::outcome_unknown(backend, format!("renew of {key:?}: no reply"))))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::LockToken;

    #[test]
    fn a_batch_is_planned_and_merged_in_item_order() {
        let t = LockToken::from_bytes([7; 16]);
        let items = [("a1", &t), ("", &t), ("b1", &t), ("a2", &t), ("a3", &t)];
        let batch = RenewBatch::new(&items, Duration::from_secs(1), 2, |k| k.as_bytes().first().copied());
        let mut sizes: Vec<usize> = batch.chunks().iter().map(Vec::len).collect();
        sizes.sort_unstable();
        assert_eq!(
            sizes,
            vec![1, 1, 2],
            "a-keys split 2+1, b-key alone, the empty key never sent"
        );
        let outcomes = batch
            .chunks()
            .iter()
            .map(|c| {
                c.iter()
                    .map(|&i| {
                        if i == 2 {
                            Ok(RenewOutcome::Missing)
                        } else {
                            Ok(RenewOutcome::Renewed)
                        }
                    })
                    .collect()
            })
            .collect();
        let merged = batch.finish(&items, outcomes, "test");
        assert!(matches!(merged[1], Err(Error::InvalidArgument(_))));
        assert!(matches!(merged[2], Ok(RenewOutcome::Missing)));
        assert!(
            [0, 3, 4]
                .iter()
                .all(|&i| matches!(merged[i], Ok(RenewOutcome::Renewed)))
        );
    }
}
