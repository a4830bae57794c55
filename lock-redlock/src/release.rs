//! Release: on the nodes that may hold the key, decided at the quorum
//! ([`Redlock::release_report`] waits for every node).

use std::time::Duration;

use lock_core::{Error, LockToken, NodeReports, Result};

use lock_core::ReleaseOutcome;

use crate::follow_up::{FollowUp, spawn_follow_up};
use crate::round::{NodeCall, Reply, Round, Vote, node_call};
use crate::{Inner, NAME, Redlock};
use lock_core::raw::validate_key;

/// Per-node result of [`Redlock::release_report`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReleaseReport {
    /// Nodes that deleted the key for this token.
    pub released: usize,
    /// The quorum.
    pub required: usize,
    /// One line per node, in node order ("granted" means released there).
    pub nodes: NodeReports,
}

impl Redlock {
    /// Release `key` for `token` on every node and wait for every answer
    /// (each bounded by the per-node timeout): how many released, and what
    /// each node said. Same effect as [`LockBackend::release`](lock_core::LockBackend::release), which
    /// returns as soon as the outcome is decided.
    ///
    /// # Errors
    ///
    /// [`lock_core::Error::InvalidArgument`] for a bad key; otherwise the
    /// per-node outcomes are in the report.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the per-node calls not yet answered: those
    /// nodes may or may not have released (owner-checked, so a repeat is
    /// harmless; the TTL frees them at the latest).
    pub async fn release_report(&self, key: &str, token: &LockToken) -> Result<ReleaseReport> {
        validate_key(key)?;
        let inner = &self.inner;
        inner.mark_released(key, token);
        inner.holdings.take(key, token);
        let mut round = inner.release_round(key, token);
        round.until_all_replied().await;
        Ok(ReleaseReport {
            released: round.yes(),
            required: inner.quorum,
            nodes: round.report(&inner.names),
        })
    }

    /// [`LockBackend::release`] on the nodes that may hold the key.
    pub(crate) async fn release_quorum(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        validate_key(key)?;
        let inner = &self.inner;
        inner.mark_released(key, token);
        let (holders, in_flight) = inner.holdings.take(key, token).unzip();
        let mut round = inner.release_round_on(key, token, holders.as_deref());
        let mut released = round.until_decided().await;
        // Nodes whose acquire is still answering are released by its
        // follow-up; call them now only if the quorum needs them.
        if !released && let Some(in_flight) = in_flight.filter(|n| !n.is_empty()) {
            for i in in_flight {
                round.add_call(i, inner.release_call(i, key, token, inner.options.max_node_timeout));
            }
            released = round.until_decided().await;
        }
        if !released {
            round.until_classified().await;
        }
        let outcome = if released {
            Ok(ReleaseOutcome::Released)
        } else if round.blocked_by_failures() || round.refusal().is_some() {
            Err(inner.unreachable(&round))
        } else if round.count(|v| *v == Vote::HeldByOther) > 0 {
            Ok(ReleaseOutcome::HeldByOther)
        } else {
            Ok(ReleaseOutcome::Missing)
        };
        // The remaining deletes still go out; nobody waits for them.
        spawn_follow_up(inner, key, *token, Vec::new(), round.take_pending(), FollowUp::Drain);
        outcome
    }
}

impl Inner {
    /// Remember the release long enough for every renewal or acquire sent
    /// before it to answer, and for a re-seed it triggers to complete.
    pub(crate) fn mark_released(&self, key: &str, token: &LockToken) {
        self.inflight
            .mark_released(key, token, self.options.max_node_timeout.saturating_mul(2));
    }

    pub(crate) fn release_round(&self, key: &str, token: &LockToken) -> Round {
        let calls = (0..self.nodes.len()).map(|i| self.release_call(i, key, token, self.options.max_node_timeout));
        Round::start(self.quorum, calls.collect())
    }

    /// A release round on the nodes that may hold the key (`holders`: they
    /// granted, may have written, or were in flight; every node when
    /// unknown). Nodes that refused never had this token: they count as
    /// `Missing` without a call.
    pub(crate) fn release_round_on(&self, key: &str, token: &LockToken, holders: Option<&[usize]>) -> Round {
        let mut replies = Vec::with_capacity(self.nodes.len());
        let mut calls = Vec::with_capacity(self.nodes.len());
        for i in 0..self.nodes.len() {
            if holders.is_some_and(|h| !h.contains(&i)) {
                replies.push(Some(Vote::Missing.into()));
            } else {
                replies.push(None);
                calls.push(self.release_call(i, key, token, self.options.max_node_timeout));
            }
        }
        Round::start_with(self.quorum, replies, calls)
    }

    pub(crate) fn release_call(&self, i: usize, key: &str, token: &LockToken, timeout: Duration) -> NodeCall {
        let node = self.nodes.get(i).cloned();
        let (key, token) = (key.to_owned(), *token);
        node_call(
            i,
            timeout,
            async move {
                match node {
                    Some(node) => node.release(&key, &token).await,
                    None => Err(Error::backend(NAME, "no such node")),
                }
            },
            classify_release,
        )
    }

    /// Release on one node; logs what went wrong (the TTL is the safety net).
    pub(crate) async fn release_node(&self, i: usize, key: &str, token: &LockToken, timeout: Duration) -> Vote {
        let (_, reply) = self.release_call(i, key, token, timeout).await;
        if reply.vote.is_failure() {
            tracing::debug!(
                key,
                node = self.name(i),
                vote = ?reply.vote,
                "redlock clean-up release failed; the TTL will free the key on that node"
            );
        }
        reply.vote
    }

    /// Release on several nodes at once; true when every node answered.
    pub(crate) async fn release_nodes(&self, nodes: &[usize], key: &str, token: &LockToken, timeout: Duration) -> bool {
        let votes = futures::future::join_all(nodes.iter().map(|&i| self.release_node(i, key, token, timeout))).await;
        votes.iter().all(|v| !v.is_failure())
    }
}

fn classify_release(result: Result<ReleaseOutcome>) -> Reply {
    match result {
        Ok(ReleaseOutcome::Released) => Vote::Yes.into(),
        Ok(ReleaseOutcome::HeldByOther) => Vote::HeldByOther.into(),
        Ok(ReleaseOutcome::Missing) => Vote::Missing.into(),
        Ok(_) => Vote::unexpected("release").into(),
        Err(e) => Vote::from_error(&e).into(),
    }
}
