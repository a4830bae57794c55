//! etcd client errors as verrou's one error type.

use lock_core::Error;

/// The backend name in errors, logs and capabilities.
pub(crate) const NAME: &str = "etcd";

/// A failed read, or a write that was never sent: its outcome is known.
pub(crate) fn failed(what: &str, err: etcd_client::Error) -> Error {
    Error::backend(NAME, format!("{what}: {err}")).with_source(err)
}

/// A failed write: applied whole or not at all, unless the server refused
/// it before applying anything (a gRPC status the server answered with).
pub(crate) fn write_failed(what: &str, err: etcd_client::Error) -> Error {
    if refused_by_server(&err) {
        failed(what, err)
    } else {
        Error::outcome_unknown(NAME, format!("{what}: {err}")).with_source(err)
    }
}

/// The server answered with an error that means nothing was applied.
fn refused_by_server(err: &etcd_client::Error) -> bool {
    use tonic::Code;
    match err {
        etcd_client::Error::GRpcStatus(s) => matches!(
            s.code(),
            Code::InvalidArgument
                | Code::NotFound
                | Code::AlreadyExists
                | Code::PermissionDenied
                | Code::Unauthenticated
                | Code::FailedPrecondition
                | Code::OutOfRange
                | Code::Unimplemented
                | Code::ResourceExhausted
        ),
        etcd_client::Error::InvalidArgs(_) | etcd_client::Error::InvalidUri(_) => true,
        _ => false,
    }
}

/// The server says the lease does not exist (it expired or was revoked).
pub(crate) fn is_lease_not_found(err: &etcd_client::Error) -> bool {
    match err {
        etcd_client::Error::GRpcStatus(s) => s.message().contains("requested lease not found"),
        // Opening a keepalive stream for an ended lease.
        etcd_client::Error::LeaseKeepAliveError(m) => m.contains("lease not found"),
        _ => false,
    }
}

/// A response without the header every etcd response carries.
pub(crate) fn no_header(what: &str) -> Error {
    Error::outcome_unknown(NAME, format!("{what}: the response has no header"))
}
