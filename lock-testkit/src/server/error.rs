//! The harness error type.

use std::io;
use std::time::Duration;

/// Everything that can go wrong while starting, driving or talking to a
/// test server.
///
/// Messages are written for a person reading a failed test: a missing binary
/// or module says what to install or build, a server that does not start
/// carries the tail of its log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// A binary or module the harness needs is not there.
    #[error("{what} not found: {hint}")]
    NotFound {
        /// What was looked for (e.g. "redis-server", "Tair module").
        what: String,
        /// Where it was looked for and how to get it.
        hint: String,
    },

    /// An I/O operation failed (spawning, connecting, reading, writing...).
    #[error("{context}: {source}")]
    Io {
        /// What the harness was doing.
        context: String,
        /// The underlying error; see [`HarnessError::is_connection_refused`].
        #[source]
        source: io::Error,
    },

    /// A server process exited while starting.
    #[error("server on port {port} exited during start-up ({status}); log tail:\n{log_tail}")]
    StartFailed {
        /// The port it was asked to listen on.
        port: u16,
        /// Its exit status.
        status: String,
        /// The last lines of its log (stdout and stderr).
        log_tail: String,
    },

    /// A server process did not answer `PING` in time.
    #[error("server on port {port} did not answer PING within {waited:?}; log tail:\n{log_tail}")]
    StartTimeout {
        /// The port it was asked to listen on.
        port: u16,
        /// How long the harness waited.
        waited: Duration,
        /// The last lines of its log (stdout and stderr).
        log_tail: String,
    },

    /// An operation did not finish in time (a command to a paused server,
    /// a replica or cluster that does not converge...).
    #[error("timed out after {after:?}: {what}")]
    Timeout {
        /// What was being waited for.
        what: String,
        /// How long the harness waited.
        after: Duration,
    },

    /// The server sent bytes that are not valid RESP, or the connection
    /// closed in the middle of a reply.
    #[error("protocol error: {0}")]
    Protocol(String),

    /// The server answered an administrative command with an error reply.
    #[error("{command} failed: {message}")]
    Reply {
        /// The command, for the message.
        command: String,
        /// The error reply, without the leading `-`.
        message: String,
    },

    /// The operation needs a running server process, and there is none
    /// (it was killed, or a restart failed).
    #[error("server on port {port} is not running")]
    NotRunning {
        /// The server's port.
        port: u16,
    },

    /// Building a topology (replication, cluster) failed.
    #[error("{0}")]
    Setup(String),
}

impl HarnessError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        HarnessError::Io {
            context: context.into(),
            source,
        }
    }

    /// The underlying I/O error, if this is an I/O error.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            HarnessError::Io { source, .. } => Some(source),
            _ => None,
        }
    }

    /// True when a connection attempt was refused: nothing listens on the
    /// port (e.g. after [`RedisServer::kill`](super::RedisServer::kill)).
    pub fn is_connection_refused(&self) -> bool {
        self.io_error()
            .is_some_and(|e| e.kind() == io::ErrorKind::ConnectionRefused)
    }

    /// True when the error is a [`HarnessError::Timeout`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, HarnessError::Timeout { .. })
    }
}

/// Result type of the harness.
pub type HarnessResult<T> = Result<T, HarnessError>;
