//! Renew: every node, a quorum within the validity; nodes that lost the
//! key are re-seeded in the background (`reseed_on_renew`).

use std::time::Duration;

use lock_core::{Error, LockToken, Result};

use lock_core::RenewOutcome;
use tokio::time::Instant;

use crate::acquire::classify_acquire;
use crate::follow_up::{FollowUp, spawn_follow_up};
use crate::round::{Reply, Round, Vote, node_call};
use crate::{Inner, NAME, Redlock};

impl Redlock {
    /// [`LockBackend::renew`] on every node, a quorum needed.
    pub(crate) async fn renew_quorum(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        let inner = &self.inner;
        inner.check(key, ttl)?;
        let validity = inner.validity(ttl);
        let sent_at = Instant::now();
        let mut round = inner.renew_round(key, token, ttl);
        if round.until_decided().await {
            let elapsed = sent_at.elapsed();
            if elapsed >= validity {
                return Err(Error::backend(
                    NAME,
                    format!(
                        "a quorum of {} renewed after {elapsed:?}, past the validity of {validity:?} \
                         (ttl {ttl:?} minus drift)",
                        inner.quorum
                    ),
                ));
            }
            let missing = if inner.options.reseed_on_renew {
                round.answered(|v| *v == Vote::Missing)
            } else {
                Vec::new()
            };
            inner.holdings.renewed(key, token, sent_at + ttl);
            let missing = missing.into_iter().map(|i| (i, Vote::Missing)).collect();
            spawn_follow_up(
                inner,
                key,
                *token,
                missing,
                round.take_pending(),
                FollowUp::Renewed { ttl },
            );
            return Ok(RenewOutcome::Renewed);
        }
        // Below the quorum: renewals still in flight change nothing that
        // matters (they never create a key), so they are dropped once they
        // cannot change the answer.
        round.until_classified().await;
        if round.blocked_by_failures() || round.refusal().is_some() {
            Err(inner.unreachable(&round))
        } else if round.count(|v| *v == Vote::HeldByOther) > 0 {
            Ok(RenewOutcome::HeldByOther)
        } else {
            Ok(RenewOutcome::Missing)
        }
    }
}

impl Inner {
    pub(crate) fn renew_round(&self, key: &str, token: &LockToken, ttl: Duration) -> Round {
        let timeout = self.node_timeout(ttl);
        let calls = self.nodes.iter().enumerate().map(|(i, node)| {
            let (node, key, token) = (node.clone(), key.to_owned(), *token);
            node_call(
                i,
                timeout,
                async move { node.renew(&key, &token, ttl).await },
                classify_renew,
            )
        });
        Round::start(self.quorum, calls.collect())
    }

    /// Set the key again on a node that lost it (same token).
    pub(crate) async fn reseed_node(&self, i: usize, key: &str, token: &LockToken, ttl: Duration) -> Vote {
        let Some(node) = self.nodes.get(i).cloned() else {
            return Vote::unexpected("node index");
        };
        let (key, token) = (key.to_owned(), *token);
        let call = node_call(
            i,
            self.node_timeout(ttl),
            async move { node.try_acquire(&key, &token, ttl).await },
            classify_acquire,
        );
        let (_, reply) = call.await;
        tracing::debug!(node = self.name(i), vote = ?reply.vote, "redlock re-seeded a node that lost the key");
        reply.vote
    }
}

fn classify_renew(result: Result<RenewOutcome>) -> Reply {
    match result {
        Ok(RenewOutcome::Renewed) => Vote::Yes.into(),
        Ok(RenewOutcome::HeldByOther) => Vote::HeldByOther.into(),
        Ok(RenewOutcome::Missing) => Vote::Missing.into(),
        Ok(_) => Vote::unexpected("renew").into(),
        Err(e) => Vote::from_error(&e).into(),
    }
}
