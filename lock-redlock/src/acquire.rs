//! Acquire: one round on every node, decided at the quorum; what was
//! written is given back when the round fails or its future is dropped.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Error, LockToken, Result};

use lock_core::{AcquireOutcome, Lease};
use tokio::time::Instant;

use crate::follow_up::{FollowUp, spawn_follow_up};
use crate::round::{Reply, Round, Vote, node_call};
use crate::{Inner, NAME, Redlock};

impl Redlock {
    /// [`LockBackend::try_acquire`] on a quorum of the nodes.
    pub(crate) async fn acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        let inner = &self.inner;
        inner.check(key, ttl)?;
        let validity = inner.validity(ttl);
        let sent_at = Instant::now();
        let mut attempt = Attempt {
            inner: inner.clone(),
            key: key.to_owned(),
            token: *token,
            round: inner.acquire_round(key, token, ttl),
            armed: true,
        };
        let reached = attempt.round.until_decided().await;
        let mut round = attempt.disarm();
        let elapsed = sent_at.elapsed();
        if reached && elapsed < validity {
            inner.waiters.acquired(key);
            // Nodes still in flight may grant too: their follow-up settles them.
            let holders = round.answered(Vote::may_have_written);
            inner
                .holdings
                .record(key, token, holders, round.unanswered(), sent_at + ttl);
            spawn_follow_up(inner, key, *token, Vec::new(), round.take_pending(), FollowUp::Granted);
            return Ok(AcquireOutcome::Acquired(Lease::new().with_validity(Some(validity))));
        }

        // Decide the answer before giving anything back, then give back what
        // was (or may have been) written: answered nodes now, nodes still in
        // flight when they answer.
        if !reached {
            round.until_classified().await;
        }
        let answer = if reached {
            None
        } else if round.blocked_by_failures() || round.refusal().is_some() {
            Some(Err(inner.unreachable(&round)))
        } else {
            // Split: some grants, and too few refusals for anyone to hold a
            // quorum. See the `splits` module.
            let split = round.yes() > 0 && round.count(|v| *v == Vote::HeldByOther) < inner.quorum;
            inner.splits.refused(key, split);
            Some(Ok(AcquireOutcome::Held {
                retry_after: inner.retry_hint(&round),
            }))
        };
        // Nodes that granted are released before returning; nodes that may
        // have written (no reply in time, lost reply) could well be down, so
        // waiting for them would double the time to fail: background.
        let granted = round.answered(|v| *v == Vote::Yes);
        let maybe: Vec<(usize, Vote)> = round
            .answered(|v| v.may_have_written() && *v != Vote::Yes)
            .into_iter()
            .map(|i| (i, Vote::TimedOut))
            .collect();
        let clean = maybe.is_empty();
        spawn_follow_up(inner, key, *token, maybe, round.take_pending(), FollowUp::Abandoned);
        let clean = inner.release_nodes(&granted, key, token, inner.node_timeout(ttl)).await && clean;
        match answer {
            Some(answer) => answer,
            None => Err(Error::Backend {
                backend: NAME.to_owned(),
                outcome_unknown: !clean,
                message: format!(
                    "a quorum of {} granted after {elapsed:?}, past the validity of {validity:?} \
                     (ttl {ttl:?} minus drift); the grants were given back",
                    inner.quorum
                ),
                source: None,
            }),
        }
    }
}

impl Inner {
    pub(crate) fn acquire_round(&self, key: &str, token: &LockToken, ttl: Duration) -> Round {
        let timeout = self.node_timeout(ttl);
        let calls = self.nodes.iter().enumerate().map(|(i, node)| {
            let (node, key, token) = (node.clone(), key.to_owned(), *token);
            node_call(
                i,
                timeout,
                async move { node.try_acquire(&key, &token, ttl).await },
                classify_acquire,
            )
        });
        Round::start(self.quorum, calls.collect())
    }
}

pub(crate) fn classify_acquire(result: Result<AcquireOutcome>) -> Reply {
    match result {
        Ok(AcquireOutcome::Acquired(_)) => Vote::Yes.into(),
        Ok(AcquireOutcome::Held { retry_after }) => Reply {
            vote: Vote::HeldByOther,
            retry_after,
        },
        Ok(_) => Vote::unexpected("acquire").into(),
        Err(e) => Vote::from_error(&e).into(),
    }
}

/// An acquire round in progress. If the acquire future is dropped before
/// the round is decided (cancelled, or timed out by the caller), whatever
/// the nodes wrote is released in the background.
struct Attempt {
    inner: Arc<Inner>,
    key: String,
    token: LockToken,
    round: Round,
    armed: bool,
}

impl Attempt {
    /// The round, decided: the attempt no longer cleans up on drop.
    fn disarm(mut self) -> Round {
        self.armed = false;
        std::mem::replace(&mut self.round, Round::start(0, Vec::new()))
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let written = self
            .round
            .answered(Vote::may_have_written)
            .into_iter()
            .map(|i| (i, Vote::Yes))
            .collect();
        let pending = self.round.take_pending();
        spawn_follow_up(
            &self.inner,
            &self.key,
            self.token,
            written,
            pending,
            FollowUp::Abandoned,
        );
    }
}
