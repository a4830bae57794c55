//! The one error type of verrou.

use std::time::Duration;

use crate::value::Versioned;

/// A boxed error from a backend's client library.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Result alias used across verrou.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in verrou.
///
/// Backends map their client errors into [`Error::Backend`]; the lock layer
/// adds the lifecycle errors (`Timeout`, `NotHeld`, `Lost`, ...).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `lock()` gave up: the key stayed held by another client for the whole
    /// acquire timeout.
    #[error("timed out after {waited:?} waiting for lock {key:?}")]
    Timeout {
        /// The contended key.
        key: String,
        /// How long we waited.
        waited: Duration,
    },

    /// The lease is no longer ours: it expired or another client holds the key.
    /// Returned by `LockGuard::extend` on a stale guard. (`LockGuard::release`
    /// does not use it: it answers `Ok(ReleaseOutcome::HeldByOther)` or
    /// `Ok(ReleaseOutcome::Missing)`, having touched nothing.)
    #[error("lock {key:?} is not held by this client ({reason})")]
    NotHeld {
        /// The key.
        key: String,
        /// Why the backend refused.
        reason: NotHeldReason,
    },

    /// The lease was lost while the critical section ran (`with_lock`).
    #[error("lock {key:?} was lost after {held_for:?}: {reason}")]
    Lost {
        /// The key.
        key: String,
        /// Time from acquisition to the loss signal.
        held_for: Duration,
        /// What signalled the loss.
        reason: LossReason,
    },

    /// An optimistic update kept conflicting and gave up after `attempts`.
    #[error("update of {key:?} gave up after {attempts} conflicting attempts")]
    Conflict {
        /// The key.
        key: String,
        /// How many compare-and-set attempts were made.
        attempts: u32,
        /// The last value and version seen, when the backend returned it.
        current: Option<Versioned>,
    },

    /// The caller passed something unusable (empty key, zero TTL, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The backend (or the server behind it) lacks a needed feature.
    #[error("{backend}: unsupported: {what}")]
    Unsupported {
        /// Backend name.
        backend: String,
        /// What is missing, e.g. "command CAD".
        what: String,
    },

    /// Not enough nodes of a quorum backend agreed.
    #[error("quorum not reached: {granted} of {required} required nodes agreed ({nodes})")]
    QuorumUnreachable {
        /// Nodes that granted.
        granted: usize,
        /// Nodes required.
        required: usize,
        /// Per-node outcomes, one line per node.
        nodes: NodeReports,
    },

    /// The server refused the backend's setup outright (its schema is
    /// missing, the user lacks a privilege, the server is read-only):
    /// retrying will not help until the setup changes. Nothing was applied.
    #[error("{backend}: {reason}: {message}")]
    Refused {
        /// Backend name.
        backend: String,
        /// What the server refused.
        reason: RefusalReason,
        /// The server's message, and what to do about it.
        message: String,
    },

    /// The backend or its transport failed.
    ///
    /// When `outcome_unknown` is true the request may or may not have been
    /// applied (timeout, connection dropped after sending): callers must not
    /// assume either. The lock layer handles this for acquires by releasing
    /// the token it tried.
    #[error("{backend}: {}{message}", if *outcome_unknown { "outcome unknown: " } else { "" })]
    Backend {
        /// Backend name.
        backend: String,
        /// Whether a write may have happened.
        outcome_unknown: bool,
        /// Short description.
        message: String,
        /// The client library's error.
        #[source]
        source: Option<BoxError>,
    },
}

impl Error {
    /// An `InvalidArgument` error.
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidArgument(msg.into())
    }

    /// An `Unsupported` error: `backend` does not offer `what`.
    pub fn unsupported(backend: impl Into<String>, what: impl Into<String>) -> Self {
        Error::Unsupported {
            backend: backend.into(),
            what: what.into(),
        }
    }

    /// A backend error whose outcome is known: nothing was applied.
    pub fn backend(backend: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Backend {
            backend: backend.into(),
            outcome_unknown: false,
            message: message.into(),
            source: None,
        }
    }

    /// A backend error after which the write may or may not have happened.
    pub fn outcome_unknown(backend: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Backend {
            backend: backend.into(),
            outcome_unknown: true,
            message: message.into(),
            source: None,
        }
    }

    /// A `Refused` error: the server refused `backend`'s setup.
    pub fn refused(backend: impl Into<String>, reason: RefusalReason, message: impl Into<String>) -> Self {
        Error::Refused {
            backend: backend.into(),
            reason,
            message: message.into(),
        }
    }

    /// Attach a source error (only meaningful on `Backend`).
    #[must_use]
    pub fn with_source(mut self, err: impl Into<BoxError>) -> Self {
        if let Error::Backend { source, .. } = &mut self {
            *source = Some(err.into());
        }
        self
    }

    /// True when a write may or may not have been applied.
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(
            self,
            Error::Backend {
                outcome_unknown: true,
                ..
            }
        )
    }

    /// True for transport/backend failures (worth retrying later).
    pub fn is_backend(&self) -> bool {
        matches!(self, Error::Backend { .. } | Error::QuorumUnreachable { .. })
    }
}

/// Why a release or renew was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotHeldReason {
    /// Another token holds the key.
    HeldByOther,
    /// The key is gone (expired or deleted).
    Missing,
    /// This guard's local deadline passed (or a loss was signalled) before the call.
    Expired,
}

impl std::fmt::Display for NotHeldReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NotHeldReason::HeldByOther => "held by another client",
            NotHeldReason::Missing => "key missing or expired",
            NotHeldReason::Expired => "local validity deadline passed",
        })
    }
}

/// What the server refused, in an [`Error::Refused`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusalReason {
    /// The backend's tables or functions are missing (not created, or
    /// another schema name).
    MissingSchema,
    /// The user may not read or write the backend's data (or create it).
    PermissionDenied,
    /// The server is read-only (a standby, or a read-only session).
    ReadOnly,
}

impl std::fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RefusalReason::MissingSchema => "the lock tables are missing",
            RefusalReason::PermissionDenied => "permission denied",
            RefusalReason::ReadOnly => "the server is read-only (a standby?)",
        })
    }
}

/// What signalled the loss of a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// A renewal got a definite "not owner" answer.
    NotOwner,
    /// The local validity deadline passed without a successful renewal.
    DeadlinePassed,
    /// The guard was released or dropped: the lease ended on purpose.
    Released,
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LossReason::NotOwner => "a renewal found another owner or no key",
            LossReason::DeadlinePassed => "the local validity deadline passed without renewal",
            LossReason::Released => "the guard was released or dropped",
        })
    }
}

/// Per-node outcome of a quorum operation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeOutcome {
    /// The node granted / renewed / released.
    Granted,
    /// The node answered: held by another token.
    HeldByOther,
    /// The node answered: key missing.
    Missing,
    /// The node did not answer within the per-node timeout.
    TimedOut,
    /// The node had not answered when the outcome was decided.
    NoReply,
    /// The node failed (connection refused, error reply, ...).
    Failed(String),
}

/// One line per node, as carried by [`Error::QuorumUnreachable`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeReports(pub Vec<(String, NodeOutcome)>);

impl std::fmt::Display for NodeReports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (node, outcome)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            match outcome {
                NodeOutcome::Granted => write!(f, "{node}: granted")?,
                NodeOutcome::HeldByOther => write!(f, "{node}: held by another")?,
                NodeOutcome::Missing => write!(f, "{node}: missing")?,
                NodeOutcome::TimedOut => write!(f, "{node}: timed out")?,
                NodeOutcome::NoReply => write!(f, "{node}: no reply yet")?,
                NodeOutcome::Failed(e) => write!(f, "{node}: failed: {e}")?,
            }
        }
        Ok(())
    }
}
