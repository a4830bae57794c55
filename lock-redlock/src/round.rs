//! One quorum round: the same operation sent to every node in parallel,
//! each bounded by the per-node timeout, counted until the quorum is decided.

use std::future::Future;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use lock_core::{Error, NodeOutcome, NodeReports};
use tracing::Instrument;

/// A node's answer, reduced to what the quorum needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Vote {
    /// Granted, renewed or released.
    Yes,
    /// Another token holds the key on this node.
    HeldByOther,
    /// The key is not on this node.
    Missing,
    /// No answer within the per-node timeout (the write may have happened).
    TimedOut,
    /// The node failed.
    Failed { message: String, outcome_unknown: bool },
    /// The node refused the call's arguments (`InvalidArgument`,
    /// `Unsupported`): the caller's error, which no retry mends, not an
    /// outage. Nothing was written.
    Refused(Refusal),
}

/// A node's refusal of the arguments, kept to be handed to the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// [`Error::InvalidArgument`].
    Invalid(String),
    /// [`Error::Unsupported`].
    Unsupported { backend: String, what: String },
}

impl Refusal {
    /// The error the node answered.
    pub(crate) fn to_error(&self) -> Error {
        match self {
            Refusal::Invalid(message) => Error::InvalidArgument(message.clone()),
            Refusal::Unsupported { backend, what } => Error::Unsupported {
                backend: backend.clone(),
                what: what.clone(),
            },
        }
    }
}

impl Vote {
    pub(crate) fn from_error(e: &Error) -> Self {
        match e {
            Error::InvalidArgument(message) => Vote::Refused(Refusal::Invalid(message.clone())),
            Error::Unsupported { backend, what } => Vote::Refused(Refusal::Unsupported {
                backend: backend.clone(),
                what: what.clone(),
            }),
            _ => Vote::Failed {
                message: e.to_string(),
                outcome_unknown: e.is_outcome_unknown(),
            },
        }
    }

    /// A vote for an outcome this crate does not know (the lock-core enums
    /// are non-exhaustive): counted as a failure that may have written.
    pub(crate) fn unexpected(what: &str) -> Self {
        Vote::Failed {
            message: format!("unexpected {what} outcome"),
            outcome_unknown: true,
        }
    }

    /// True when the node may now hold the key for our token.
    pub(crate) fn may_have_written(&self) -> bool {
        match self {
            Vote::Yes | Vote::TimedOut => true,
            Vote::Failed { outcome_unknown, .. } => *outcome_unknown,
            Vote::HeldByOther | Vote::Missing | Vote::Refused(_) => false,
        }
    }

    /// True for a transport-level failure (no definite answer).
    pub(crate) fn is_failure(&self) -> bool {
        matches!(self, Vote::TimedOut | Vote::Failed { .. })
    }

    pub(crate) fn to_outcome(&self) -> NodeOutcome {
        match self {
            Vote::Yes => NodeOutcome::Granted,
            Vote::HeldByOther => NodeOutcome::HeldByOther,
            Vote::Missing => NodeOutcome::Missing,
            Vote::TimedOut => NodeOutcome::TimedOut,
            Vote::Failed { message, .. } => NodeOutcome::Failed(message.clone()),
            Vote::Refused(refusal) => NodeOutcome::Failed(refusal.to_error().to_string()),
        }
    }
}

/// A node's vote plus, for a refused acquire, the holder's remaining TTL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reply {
    pub(crate) vote: Vote,
    pub(crate) retry_after: Option<Duration>,
}

impl From<Vote> for Reply {
    fn from(vote: Vote) -> Self {
        Reply {
            vote,
            retry_after: None,
        }
    }
}

/// A node's operation in flight: resolves to its index and reply.
pub(crate) type NodeCall = BoxFuture<'static, (usize, Reply)>;

/// Runs `op` under `timeout` and maps the result with `classify`; a timeout
/// becomes [`Vote::TimedOut`].
pub(crate) fn node_call<T, F>(
    index: usize,
    timeout: Duration,
    op: F,
    classify: fn(lock_core::Result<T>) -> Reply,
) -> NodeCall
where
    F: Future<Output = lock_core::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    // A child span per node, of whatever span the quorum call runs in.
    let span = tracing::debug_span!("verrou.node", node = index, outcome = tracing::field::Empty);
    let traced = span.clone();
    Box::pin(
        async move {
            let reply = match tokio::time::timeout(timeout, op).await {
                Ok(result) => classify(result),
                Err(_) => Vote::TimedOut.into(),
            };
            traced.record("outcome", tracing::field::debug(&reply.vote));
            (index, reply)
        }
        .instrument(span),
    )
}

/// The replies of one round so far, and the calls still in flight.
pub(crate) struct Round {
    quorum: usize,
    replies: Vec<Option<Reply>>,
    pending: FuturesUnordered<NodeCall>,
}

impl Round {
    pub(crate) fn start(quorum: usize, calls: Vec<NodeCall>) -> Self {
        let replies = vec![None; calls.len()];
        Self::start_with(quorum, replies, calls)
    }

    /// A round over some nodes only: `replies` has one slot per node, the
    /// nodes not called already answered (or `None`, left out).
    pub(crate) fn start_with(quorum: usize, replies: Vec<Option<Reply>>, calls: Vec<NodeCall>) -> Self {
        Round {
            quorum,
            replies,
            pending: calls.into_iter().collect(),
        }
    }

    /// Call node `i` after all (its slot was filled without a call).
    pub(crate) fn add_call(&mut self, i: usize, call: NodeCall) {
        if let Some(slot) = self.replies.get_mut(i) {
            *slot = None;
        }
        self.pending.push(call);
    }

    /// Wait until `quorum` nodes said yes (`true`) or that has become
    /// impossible (`false`). Nodes still in flight stay in the round.
    pub(crate) async fn until_decided(&mut self) -> bool {
        loop {
            let yes = self.yes();
            let decided = if yes >= self.quorum {
                Some(true)
            } else if yes + self.pending.len() < self.quorum {
                Some(false)
            } else {
                None
            };
            if let Some(reached) = decided {
                self.sweep();
                return reached;
            }
            match self.pending.next().await {
                Some((i, reply)) => self.record(i, reply),
                None => return false,
            }
        }
    }

    /// After the quorum was found impossible: wait for nodes still in
    /// flight only as long as they decide whether failures
    /// ([`Round::blocked_by_failures`]) or refusals ([`Round::refusal`])
    /// were the cause, so the answer does not depend on which node
    /// answered last.
    pub(crate) async fn until_classified(&mut self) {
        loop {
            let pending = self.pending.len();
            let known = self.yes() + self.count(Vote::is_failure);
            let failures_decided = known >= self.quorum || known + pending < self.quorum;
            let refused = self.refused();
            let must_refuse = self.refusals_blocking();
            let refusals_decided = refused >= must_refuse || refused + pending < must_refuse;
            if failures_decided && refusals_decided {
                return;
            }
            match self.pending.next().await {
                Some((i, reply)) => self.record(i, reply),
                None => return,
            }
        }
    }

    /// Take the replies that are already there, without waiting. This also
    /// polls every call still in flight once, so each has been sent before
    /// the round is handed on (a stream stops polling at the first ready
    /// call, and in-process nodes are always ready).
    fn sweep(&mut self) {
        while let Some(Some((i, reply))) = self.pending.next().now_or_never() {
            self.record(i, reply);
        }
    }

    /// Wait for every node (each is bounded by its timeout).
    pub(crate) async fn until_all_replied(&mut self) {
        while let Some((i, reply)) = self.pending.next().await {
            self.record(i, reply);
        }
    }

    fn record(&mut self, i: usize, reply: Reply) {
        if let Some(slot) = self.replies.get_mut(i) {
            *slot = Some(reply);
        }
    }

    pub(crate) fn quorum(&self) -> usize {
        self.quorum
    }

    /// Nodes that said yes.
    pub(crate) fn yes(&self) -> usize {
        self.count(|v| *v == Vote::Yes)
    }

    /// Nodes that failed, plus those still in flight: the nodes whose
    /// answer we do not know.
    pub(crate) fn unknown(&self) -> usize {
        self.count(Vote::is_failure) + self.pending.len()
    }

    pub(crate) fn count(&self, pred: impl Fn(&Vote) -> bool) -> usize {
        self.replies.iter().flatten().filter(|r| pred(&r.vote)).count()
    }

    /// True when failures (and nodes still in flight) alone decided the
    /// round: had they all said yes, the quorum would have been reached.
    pub(crate) fn blocked_by_failures(&self) -> bool {
        self.yes() + self.unknown() >= self.quorum
    }

    /// Nodes that refused the arguments.
    pub(crate) fn refused(&self) -> usize {
        self.count(|v| matches!(v, Vote::Refused(_)))
    }

    /// How many refusals alone make the quorum impossible: `N − M + 1`.
    fn refusals_blocking(&self) -> usize {
        (self.replies.len() + 1).saturating_sub(self.quorum)
    }

    /// The first node's refusal of the arguments, when refusals alone made
    /// the quorum impossible (at least `N − M + 1` nodes refused): the round
    /// then fails with it (the caller's error, at once) rather than as an
    /// outage. Fewer refusals are a minority's problem (a node's WRONGTYPE,
    /// a missing module): the round is classified as if those nodes had
    /// failed, and the refusal shows in the per-node report.
    pub(crate) fn refusal(&self) -> Option<Error> {
        if self.refused() < self.refusals_blocking() {
            return None;
        }
        self.replies.iter().flatten().find_map(|r| match &r.vote {
            Vote::Refused(refusal) => Some(refusal.to_error()),
            _ => None,
        })
    }

    /// Indices of answered nodes whose vote matches.
    pub(crate) fn answered(&self, pred: impl Fn(&Vote) -> bool) -> Vec<usize> {
        self.replies
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().filter(|r| pred(&r.vote)).map(|_| i))
            .collect()
    }

    /// Indices of nodes that have not answered.
    pub(crate) fn unanswered(&self) -> Vec<usize> {
        self.replies
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.is_none().then_some(i))
            .collect()
    }

    /// Answered refusals' retry hints: `Some` only when every refusing node
    /// gave one.
    pub(crate) fn held_hints(&self) -> Option<Vec<Duration>> {
        self.replies
            .iter()
            .flatten()
            .filter(|r| r.vote == Vote::HeldByOther)
            .map(|r| r.retry_after)
            .collect()
    }

    /// One line per node, in node order.
    pub(crate) fn report(&self, names: &[String]) -> NodeReports {
        NodeReports(
            names
                .iter()
                .zip(&self.replies)
                .map(|(name, reply)| {
                    let outcome = match reply {
                        Some(r) => r.vote.to_outcome(),
                        None => NodeOutcome::NoReply,
                    };
                    (name.clone(), outcome)
                })
                .collect(),
        )
    }

    /// The calls still in flight (the round gives them up).
    pub(crate) fn take_pending(&mut self) -> FuturesUnordered<NodeCall> {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(i: usize, vote: Vote) -> NodeCall {
        Box::pin(async move { (i, vote.into()) })
    }

    #[tokio::test]
    async fn decides_on_quorum_or_impossibility() {
        let mut yes = Round::start(
            2,
            vec![ready(0, Vote::Yes), ready(1, Vote::Yes), ready(2, Vote::Missing)],
        );
        assert!(yes.until_decided().await);
        let mut no = Round::start(
            2,
            vec![
                ready(0, Vote::HeldByOther),
                ready(1, Vote::TimedOut),
                ready(2, Vote::Yes),
            ],
        );
        assert!(!no.until_decided().await);
        assert!(no.blocked_by_failures());
        let report = no.report(&["a".into(), "b".into(), "c".into()]);
        assert_eq!(
            report.0,
            vec![
                ("a".to_owned(), NodeOutcome::HeldByOther),
                ("b".to_owned(), NodeOutcome::TimedOut),
                ("c".to_owned(), NodeOutcome::Granted),
            ]
        );
    }

    #[tokio::test]
    async fn each_node_call_is_a_child_span_with_its_outcome() {
        use std::sync::{Arc, Mutex};
        use tracing::Instrument;
        use tracing_subscriber::fmt::format::FmtSpan;

        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0
                    .lock()
                    .map_err(|_| std::io::Error::other("poisoned"))?
                    .extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_span_events(FmtSpan::CLOSE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        let granted = |r: lock_core::Result<()>| -> Reply {
            r.map_or_else(|e| Vote::from_error(&e).into(), |()| Vote::Yes.into())
        };
        async {
            let calls = vec![
                node_call(0, Duration::from_secs(1), async { Ok(()) }, granted),
                node_call(
                    1,
                    Duration::from_secs(1),
                    async { Err(Error::backend("n1", "down")) },
                    granted,
                ),
            ];
            Round::start(2, calls).until_all_replied().await;
        }
        .instrument(tracing::info_span!("quorum"))
        .await;
        let out = String::from_utf8(buffer.0.lock().expect("buffer").clone()).expect("utf-8");
        assert!(out.contains("quorum:verrou.node{node=0 outcome=Yes}"), "{out}");
        assert!(out.contains("quorum:verrou.node{node=1 outcome=Failed"), "{out}");
    }

    #[tokio::test]
    async fn held_hints_need_every_refusal_to_carry_one() {
        let with = |hint: Option<Duration>| Reply {
            vote: Vote::HeldByOther,
            retry_after: hint,
        };
        let mut r = Round::start(3, Vec::new());
        r.replies = vec![Some(with(Some(Duration::from_millis(5)))), Some(with(None)), None];
        assert_eq!(r.held_hints(), None);
        r.replies[1] = Some(with(Some(Duration::from_millis(9))));
        assert_eq!(
            r.held_hints(),
            Some(vec![Duration::from_millis(5), Duration::from_millis(9)])
        );
    }
}
