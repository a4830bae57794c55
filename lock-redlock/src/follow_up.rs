//! Node calls that outlive the call that started them: a background task
//! settles each late answer (gives back an abandoned grant, keeps or
//! deletes a late one, re-seeds a node after a renewal).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use lock_core::LockToken;

use crate::Inner;
use crate::round::{NodeCall, Vote};

/// What happens to node calls that outlive the call that started them.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FollowUp {
    /// The acquire failed or was dropped: delete whatever a node wrote.
    Abandoned,
    /// The acquire succeeded: keep late grants unless released meanwhile.
    Granted,
    /// A renewal reached the quorum: re-seed nodes that lost the key,
    /// unless released meanwhile.
    Renewed { ttl: Duration },
    /// Nothing to do but let the calls finish (releases).
    Drain,
}

/// Hand node calls that outlive their round (and answered nodes that need
/// action) to a background task. No runtime: nothing to do, the TTLs clean up.
pub(crate) fn spawn_follow_up(
    inner: &Arc<Inner>,
    key: &str,
    token: LockToken,
    answered: Vec<(usize, Vote)>,
    pending: FuturesUnordered<NodeCall>,
    kind: FollowUp,
) {
    if answered.is_empty() && pending.is_empty() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let inner = inner.clone();
    let key = key.to_owned();
    runtime.spawn(async move {
        let mut work: FuturesUnordered<BoxFuture<'static, ()>> = FuturesUnordered::new();
        for (i, vote) in answered {
            work.push(Box::pin(settle(inner.clone(), key.clone(), token, i, vote, kind)));
        }
        for call in pending {
            let (inner, key) = (inner.clone(), key.clone());
            work.push(Box::pin(async move {
                let (i, reply) = call.await;
                settle(inner, key, token, i, reply.vote, kind).await;
            }));
        }
        while work.next().await.is_some() {}
    });
}

/// Act on one node's late answer.
async fn settle(inner: Arc<Inner>, key: String, token: LockToken, i: usize, vote: Vote, kind: FollowUp) {
    let timeout = inner.options.max_node_timeout;
    match kind {
        FollowUp::Abandoned => {
            if vote.may_have_written() {
                inner.release_node(i, &key, &token, timeout).await;
            }
        }
        FollowUp::Granted => {
            // Settled into the record: the release will delete there. Else
            // the release came first and left this node to us; it is marked
            // released before it takes the record, so the check below sees it.
            let recorded = inner
                .holdings
                .settle_in_flight(&key, &token, i, vote.may_have_written());
            if vote.may_have_written() && !recorded && inner.inflight.is_released(&key, &token) {
                inner.release_node(i, &key, &token, timeout).await;
            }
        }
        FollowUp::Renewed { ttl } => {
            if vote != Vote::Missing || !inner.options.reseed_on_renew || inner.inflight.is_released(&key, &token) {
                return;
            }
            // Checked after the write's reply: see the `inflight` module.
            if inner.reseed_node(i, &key, &token, ttl).await.may_have_written() {
                inner.holdings.add_node(&key, &token, i);
                if inner.inflight.is_released(&key, &token) {
                    inner.release_node(i, &key, &token, timeout).await;
                }
            }
        }
        FollowUp::Drain => {}
    }
}
