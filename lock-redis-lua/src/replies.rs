//! Reading the server's replies (script status arrays, `HELLO`) and the
//! expiry argument of versioned writes. Numbers go into commands through
//! `itoa` buffers, without allocating.

use deadpool_redis::redis::{self, Value};
use lock_core::raw::{ttl_millis, validate_ttl};
use lock_core::{Error, Expiry, Result};

/// The client error inside a backend error, if any.
pub(crate) fn redis_error(source: &lock_core::BoxError) -> Option<&redis::RedisError> {
    source.downcast_ref::<redis::RedisError>()
}

/// A server that does not know `NX` with `GET` (before 7.0) answers this.
pub(crate) fn refuses_set_nx_get(e: &redis::RedisError) -> bool {
    e.code() == Some("ERR") && e.to_string().contains("syntax error")
}

/// The lowest `(major, minor)` server version in a `HELLO` reply (a map, or
/// a flat list of fields and values in RESP2; one per node from a cluster).
pub(crate) fn server_version(reply: &Value) -> Option<(u32, u32)> {
    fn text(v: &Value) -> Option<&str> {
        match v {
            Value::BulkString(b) => std::str::from_utf8(b).ok(),
            Value::SimpleString(s) => Some(s),
            _ => None,
        }
    }
    fn parse(v: &Value) -> Option<(u32, u32)> {
        let mut parts = text(v)?.split('.');
        Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
    }
    let mut lowest: Option<(u32, u32)> = None;
    let mut found = |v: Option<(u32, u32)>| {
        if let Some(v) = v {
            lowest = Some(lowest.map_or(v, |l| l.min(v)));
        }
    };
    match reply {
        Value::Map(fields) => {
            for (name, value) in fields {
                match text(name) {
                    Some("version") => found(parse(value)),
                    // A cluster's replies, keyed by node.
                    _ => found(server_version(value)),
                }
            }
        }
        Value::Array(items) => {
            for pair in items.chunks_exact(2) {
                if text(&pair[0]) == Some("version") {
                    found(parse(&pair[1]));
                }
            }
            for item in items {
                if matches!(item, Value::Map(_) | Value::Array(_)) {
                    found(server_version(item));
                }
            }
        }
        _ => {}
    }
    lowest
}

pub(crate) fn int_at(items: &[Value], i: usize) -> Option<i64> {
    match items.get(i)? {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

pub(crate) fn u64_at(items: &[Value], i: usize) -> Option<u64> {
    int_at(items, i).and_then(|n| u64::try_from(n).ok())
}

pub(crate) fn bytes_of(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.as_bytes().to_vec()),
        Value::Okay => Some(b"OK".to_vec()),
        _ => None,
    }
}

pub(crate) fn array(v: &Value) -> Option<&[Value]> {
    match v {
        Value::Array(items) => Some(items),
        _ => None,
    }
}

/// First element of a script's status array.
pub(crate) fn status(v: &Value) -> Option<i64> {
    array(v).and_then(|a| int_at(a, 0))
}

pub(crate) fn not_versioned(key: &str) -> Error {
    Error::invalid(format!(
        "key {key:?} holds a hash that was not written by verrou's versioned store (no version field)"
    ))
}

/// The scripts' expiry argument: milliseconds, `-1` to persist, empty to
/// keep the TTL. Written into `buf`, without allocating.
pub(crate) fn expiry_arg(expiry: Expiry, buf: &mut itoa::Buffer) -> Result<&str> {
    match expiry {
        Expiry::After(ttl) => {
            validate_ttl(ttl)?;
            Ok(buf.format(ttl_millis(ttl)))
        }
        Expiry::Persist => Ok("-1"),
        _ => Ok(""),
    }
}

/// A call's result says whether the server answered (a value or an error
/// reply): then the command's outcome is known.
pub(crate) fn answered<T>(r: &redis::RedisResult<T>) -> bool {
    match r {
        Ok(_) => true,
        Err(e) => e.code().is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::LockToken;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn tokens_and_expiries_are_written_as_before() {
        let token = LockToken::generate().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&token.hex_bytes()[..], token.to_hex().as_bytes());
        let mut buf = itoa::Buffer::new();
        let after = Expiry::After(std::time::Duration::from_millis(30_000));
        assert_eq!(expiry_arg(after, &mut buf).ok(), Some("30000"));
        assert_eq!(expiry_arg(Expiry::Persist, &mut buf).ok(), Some("-1"));
        assert_eq!(expiry_arg(Expiry::Keep, &mut buf).ok(), Some(""));
    }

    #[test]
    fn hello_replies_give_the_lowest_version() {
        let resp3 = Value::Map(vec![(bulk("server"), bulk("redis")), (bulk("version"), bulk("7.0.15"))]);
        assert_eq!(server_version(&resp3), Some((7, 0)));
        let resp2 = Value::Array(vec![bulk("server"), bulk("valkey"), bulk("version"), bulk("8.1.0")]);
        assert_eq!(server_version(&resp2), Some((8, 1)));
        let cluster = Value::Map(vec![
            (bulk("a:1"), resp3.clone()),
            (bulk("b:2"), Value::Map(vec![(bulk("version"), bulk("6.2.14"))])),
        ]);
        assert_eq!(server_version(&cluster), Some((6, 2)));
        assert_eq!(server_version(&Value::Okay), None);
    }
}
