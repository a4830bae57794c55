//! Mapping client errors into `lock_core::Error`, and keeping credentials
//! out of every message.

use std::time::Duration;

use deadpool_redis::redis::{ErrorKind, RedisError};
use lock_core::Error;

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
    let text = e.to_string();
    if e.code().is_some() {
        // The server answered with an error. Our scripts do every read that
        // can fail (WRONGTYPE) before their first write, so WRONGTYPE means
        // nothing was applied.
        if text.contains("WRONGTYPE") {
            return wrong_type(op, key);
        }
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
                format!("{op} on {key:?}: the ACL user may not run this (needs EVAL, EVALSHA and the key): {text}"),
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

/// The error was raised by a command inside a script (Redis 7 and Valkey
/// append `script: <sha>, on @user_script:<line>.`; Redis 6 says
/// `Error running script (call to f_<sha>): @user_script:<line>: ...`),
/// rather than by the `EVAL`/`EVALSHA` call itself (NOSCRIPT, ACL on the
/// command or its keys, MOVED, OOM, BUSY, ...), which runs nothing.
fn raised_in_script(text: &str) -> bool {
    text.contains("@user_script")
}

/// `key` holds a value of another type than `op` expects.
pub(crate) fn wrong_type(op: &str, key: &str) -> Error {
    Error::invalid(format!(
        "{op}: key {key:?} holds a Redis value of another type (WRONGTYPE): a lock key must be a string written by \
         verrou, a versioned key a hash written by verrou"
    ))
}

/// True for [`wrong_type`]'s error.
pub(crate) fn is_wrong_type(e: &Error) -> bool {
    matches!(e, Error::InvalidArgument(m) if m.contains("(WRONGTYPE)"))
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

/// `url` with any user name, password and query string replaced by `***`.
pub(crate) fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => (&url[..i + 3], &url[i + 3..]),
        None => ("", url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let host = match authority.rfind('@') {
        Some(at) => format!("***@{}", &authority[at + 1..]),
        None => authority.to_owned(),
    };
    let tail = match tail.find(['?', '#']) {
        Some(q) => format!("{}?***", &tail[..q]),
        None => tail.to_owned(),
    };
    format!("{scheme}{host}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_redacted() {
        assert_eq!(redact_url("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact_url("redis://u:secret@h:1/0"), "redis://***@h:1/0");
        assert_eq!(redact_url("rediss://:p%40ss@h"), "rediss://***@h");
        assert_eq!(redact_url("redis://u:a@b@h/2"), "redis://***@h/2");
        assert_eq!(
            redact_url("redis+unix:///tmp/r.sock?pass=secret"),
            "redis+unix:///tmp/r.sock?***"
        );
        assert_eq!(redact_url("not a url secret@x"), "***@x");
    }
}
