//! Mapping client errors into `lock_core::Error`, and keeping credentials
//! out of every message.

use std::time::Duration;

use deadpool_redis::redis::{ErrorKind, RedisError};
use lock_core::Error;
/// URL redaction lives in lock-core (the facade's `connect` uses it too).
pub(crate) use lock_core::raw::redact_url;

/// The backend's name in errors, logs and capabilities.
pub(crate) const BACKEND: &str = "redis-lua";

/// Whether an operation may write: a write whose reply is lost has an
/// unknown outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
}

/// A failed command. `op` names the operation ("acquire", "cas", ...).
pub(crate) fn command_error(e: RedisError, op: &str, key: &str, access: Access) -> Error {
    if is_wrong_type_reply(&e) {
        // Our scripts do every read that can fail (WRONGTYPE) before their
        // first write, so WRONGTYPE means nothing was applied.
        return wrong_type(op, key);
    }
    let text = e.to_string();
    if e.code().is_some() {
        // The server answered with an error.
        if access == Access::Write && raised_in_script(&text) {
            // Any other error raised by a command inside a write script may
            // follow one of its writes: the clean-up must run.
            return Error::outcome_unknown(BACKEND, format!("{op} on {key:?}: a write script failed: {text}"))
                .with_source(e);
        }
        if is_missing_scripting(&e, &text) {
            return unsupported_scripting();
        }
        if e.code() == Some("NOPERM") {
            return Error::backend(
                BACKEND,
                format!("{op} on {key:?}: {ACL_REFUSAL} (needs EVAL, EVALSHA and the key): {text}"),
            );
        }
        return Error::backend(BACKEND, format!("{op} on {key:?}: server error: {text}")).with_source(e);
    }
    if e.is_connection_refusal() {
        return Error::backend(BACKEND, format!("{op} on {key:?}: cannot connect: {text}")).with_source(e);
    }
    let unknown = access == Access::Write && (e.is_io_error() || e.is_timeout() || e.kind() == ErrorKind::Io);
    let what = if e.is_timeout() { "timed out" } else { "failed" };
    let message = format!("{op} on {key:?} {what}: {text}");
    if unknown {
        Error::outcome_unknown(BACKEND, message).with_source(e)
    } else {
        Error::backend(BACKEND, message).with_source(e)
    }
}

/// How a `NOPERM` refusal reads in [`Error::Backend`]'s message.
const ACL_REFUSAL: &str = "the ACL user may not run this";

/// Whether `e` is the server's ACL refusal (`NOPERM`) of a command.
pub(crate) fn is_acl_refusal(e: &Error) -> bool {
    matches!(e, Error::Backend { message, .. } if message.contains(ACL_REFUSAL))
}

/// The error was raised by a command inside a script (Redis 7 and Valkey
/// append `script: <sha>, on @user_script:<line>.`; Redis 6 says
/// `Error running script (call to f_<sha>): @user_script:<line>: ...`),
/// rather than by the `EVAL`/`EVALSHA` call itself (NOSCRIPT, ACL on the
/// command or its keys, MOVED, OOM, BUSY, ...), which runs nothing.
fn raised_in_script(text: &str) -> bool {
    text.contains("@user_script")
}

/// The server's error code, as the client parsed it: `WRONGTYPE` from a
/// command, or (Redis 6, which wraps what a command inside a script raised
/// as `ERR Error running script (call to f_<sha>): @user_script:<line>:
/// <CODE> ...`) from a command inside a script. Redis 7 and Valkey keep the
/// command's own code.
fn is_wrong_type_reply(e: &RedisError) -> bool {
    const WRONG_TYPE: &str = "WRONGTYPE";
    match e.code() {
        Some(WRONG_TYPE) => true,
        Some("ERR") => e
            .detail()
            .and_then(|detail| detail.split_once("@user_script:"))
            .and_then(|(_, line_and_error)| line_and_error.split_once(": "))
            .is_some_and(|(_, error)| error.split_whitespace().next() == Some(WRONG_TYPE)),
        _ => false,
    }
}

/// `key` holds a value of another type than `op` expects: the one server
/// reply mapped to [`Error::InvalidArgument`] (a command's arguments are
/// checked before it is sent), which is what [`is_wrong_type`] relies on.
pub(crate) fn wrong_type(op: &str, key: &str) -> Error {
    Error::invalid(format!(
        "{op}: key {key:?} holds a Redis value of another type (WRONGTYPE): a lock key must be a string written by \
         verrou, a versioned key a hash written by verrou"
    ))
}

/// True for [`wrong_type`]'s error, among the errors of a sent command
/// ([`command_error`], [`op_timeout`], a failed connection).
pub(crate) fn is_wrong_type(e: &Error) -> bool {
    matches!(e, Error::InvalidArgument(_))
}

/// The same failure again, for each other item of a batch that failed as a
/// whole (errors are not `Clone`; the copy keeps everything but the source).
pub(crate) fn same_error(e: &Error) -> Error {
    match e {
        Error::InvalidArgument(message) => Error::InvalidArgument(message.clone()),
        Error::Unsupported { backend, what } => Error::Unsupported {
            backend: backend.clone(),
            what: what.clone(),
        },
        Error::Backend {
            backend,
            outcome_unknown,
            message,
            ..
        } => Error::Backend {
            backend: backend.clone(),
            outcome_unknown: *outcome_unknown,
            message: message.clone(),
            source: None,
        },
        // Not produced by this backend's calls; keep the text, assume the worst.
        other => Error::outcome_unknown(BACKEND, other.to_string()),
    }
}

/// Our own deadline around a whole operation passed.
pub(crate) fn op_timeout(op: &str, key: &str, after: Duration, access: Access) -> Error {
    let message = format!("{op} on {key:?} timed out after {after:?}");
    match access {
        Access::Write => Error::outcome_unknown(BACKEND, message),
        Access::Read => Error::backend(BACKEND, message),
    }
}

/// Getting a connection failed: nothing was sent.
/// A `READONLY` reply: the node is a replica (a demoted primary) and ran
/// nothing.
pub(crate) fn is_readonly(e: &Error) -> bool {
    matches!(e, Error::Backend { source: Some(s), .. }
        if s.downcast_ref::<RedisError>().is_some_and(|r| r.code() == Some("READONLY")))
}

pub(crate) fn connect_error(e: impl std::fmt::Display) -> Error {
    Error::backend(BACKEND, format!("cannot connect to the server: {e}"))
}

/// The server has no Lua scripting (or it is renamed away).
pub(crate) fn unsupported_scripting() -> Error {
    Error::Unsupported {
        backend: BACKEND.to_owned(),
        what: "Lua scripting (EVAL/EVALSHA): the server does not accept it".to_owned(),
    }
}

fn is_missing_scripting(e: &RedisError, text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    e.code() == Some("ERR")
        && lower.contains("unknown command")
        && (lower.contains("evalsha") || lower.contains("'eval'") || lower.contains("`eval`"))
}

/// A reply of an unexpected shape (a different script under our SHA?).
pub(crate) fn unexpected_reply(op: &str, key: &str, reply: &impl std::fmt::Debug) -> Error {
    Error::backend(BACKEND, format!("{op} on {key:?}: unexpected reply {reply:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the client makes of the server's error reply `line`.
    fn server_error(line: &str) -> RedisError {
        let reply = format!("-{line}\r\n");
        match deadpool_redis::redis::parse_redis_value(reply.as_bytes()).map(|v| v.extract_error()) {
            Ok(Err(e)) => e,
            other => panic!("{line:?} parsed as {other:?}"),
        }
    }

    #[test]
    fn wrong_type_is_told_by_the_error_code() {
        let wrong = [
            // A command, and a command inside a script on Redis 7 / Valkey.
            "WRONGTYPE Operation against a key holding the wrong kind of value",
            "WRONGTYPE Operation against a key holding the wrong kind of value script: 4c9ef2, on @user_script:3.",
            // A command inside a script on Redis 6.
            "ERR Error running script (call to f_4c9ef2): @user_script:3: WRONGTYPE Operation against a key \
             holding the wrong kind of value",
        ];
        for line in wrong {
            let e = command_error(server_error(line), "renew", "k", Access::Write);
            assert!(is_wrong_type(&e), "{line:?} gave {e:?}");
            assert!(
                matches!(&e, Error::InvalidArgument(m) if m.contains("(WRONGTYPE)")),
                "{e:?}"
            );
        }
        let other = [
            "ERR wrong number of arguments for 'set' command mentioning WRONGTYPE",
            "ERR syntax error",
            "NOPERM this user has no permissions to run the 'evalsha' command",
            "NOSCRIPT No matching script. Please use EVAL.",
            "ERR Error running script (call to f_4c9ef2): @user_script:3: OOM command not allowed",
            "OOM command not allowed when used memory > 'maxmemory'. script: 4c9ef2, on @user_script:3.",
        ];
        for line in other {
            let e = command_error(server_error(line), "renew", "k", Access::Write);
            assert!(!is_wrong_type(&e), "{line:?} gave {e:?}");
        }
    }
}
