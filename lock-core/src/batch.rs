//! Renewal batching. Lease renewers that come due in the same timer tick (the
//! renewer rounds due times to a grid) hand their renewals to one per-manager
//! batcher, which sends them as one [`LockBackend::renew_many`] call: one
//! round trip (one script, or one pipeline) for many leases instead of one
//! each. Each lease's renewer keeps its own timeouts, retries and loss rules.

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
