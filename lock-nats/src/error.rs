//! async-nats errors as verrou's one error type.

use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use lock_core::Error;

/// The backend name in errors, logs and capabilities.
pub(crate) const NAME: &str = "nats";

/// A failed read, or a request that changed nothing: its outcome is known.
pub(crate) fn failed(what: &str, err: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::backend(NAME, format!("{what}: {err}")).with_source(err)
}

/// How a conditional publish ended when it was not stored.
pub(crate) enum NotStored {
    /// The subject's last sequence was not the one expected (nothing
    /// written).
    WrongLast,
    /// Any other failure, mapped: known (the server refused) or unknown.
    Failed(Error),
}

/// A failed publish: refused by the server (an error answer, no stream for
/// the subject) is a known outcome; no acknowledgement in time, or a
/// connection lost, leaves it unknown (the message may be stored, now or
/// when the client's buffer is sent after a reconnect).
pub(crate) fn publish_failed(what: &str, err: PublishError) -> NotStored {
    match err.kind() {
        PublishErrorKind::WrongLastSequence => NotStored::WrongLast,
        PublishErrorKind::StreamNotFound
        | PublishErrorKind::WrongLastMessageId
        | PublishErrorKind::MaxPayloadExceeded
        | PublishErrorKind::MaxAckPending => NotStored::Failed(failed(what, err)),
        PublishErrorKind::Other if wrong_last_constant(&err) => NotStored::WrongLast,
        PublishErrorKind::Other if refused_by_server(&err) => NotStored::Failed(failed(what, err)),
        _ => NotStored::Failed(Error::outcome_unknown(NAME, format!("{what}: {err}")).with_source(err)),
    }
}

/// A clustered stream's "wrong last sequence" (error code 10164, without
/// the sequence in its text), which the client does not map to
/// `WrongLastSequence` as it does the single server's 10071.
fn wrong_last_constant(err: &PublishError) -> bool {
    std::error::Error::source(err)
        .and_then(|s| s.downcast_ref::<async_nats::jetstream::Error>())
        .is_some_and(|e| e.error_code() == async_nats::jetstream::ErrorCode::STREAM_WRONG_LAST_SEQUENCE_CONSTANT)
}

/// The acknowledgement was an error answer of JetStream (nothing stored).
fn refused_by_server(err: &PublishError) -> bool {
    std::error::Error::source(err).is_some_and(|s| s.is::<async_nats::jetstream::Error>())
}
