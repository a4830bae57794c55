//! Reply parsing, by shape (RESP type and arity), never by error text.
//!
//! Each parser returns `None` for a reply of an unexpected shape; the caller
//! turns that into a protocol error naming the command.

use fred::types::Value;
use lock_core::{CasOutcome, Versioned};

/// `SET key token NX PX ms`: `OK` if set, nil if the key exists.
pub(crate) fn set_nx(reply: &Value) -> Option<bool> {
    match reply {
        Value::Null => Some(false),
        v if v.as_bytes() == Some(b"OK") => Some(true),
        _ => None,
    }
}

/// `CAD` / `CAS` / `EXCAD`: the integers 1 (done), 0 (mismatch), -1 (missing).
pub(crate) fn tri_state(reply: &Value) -> Option<TriState> {
    match reply {
        Value::Integer(1) => Some(TriState::Done),
        Value::Integer(0) => Some(TriState::Mismatch),
        Value::Integer(-1) => Some(TriState::Missing),
        _ => None,
    }
}

/// The three answers of the native compare-and-X commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TriState {
    /// 1: compared equal and applied.
    Done,
    /// 0: the key holds something else; untouched.
    Mismatch,
    /// -1: no such key (or expired).
    Missing,
}

/// A version as Tair replies it: a non-negative integer.
fn version(v: &Value) -> Option<u64> {
    match v {
        Value::Integer(i) => u64::try_from(*i).ok(),
        _ => None,
    }
}

fn bytes(v: &Value) -> Option<Vec<u8>> {
    v.as_bytes().map(<[u8]>::to_vec)
}

/// `EXGET key`: `[value, version]`, or nil for a missing key.
pub(crate) fn exget(reply: &Value) -> Option<Option<Versioned>> {
    match reply {
        Value::Null => Some(None),
        Value::Array(items) => match items.as_slice() {
            [value, ver, ..] => Some(Some(Versioned {
                value: bytes(value)?,
                version: version(ver)?,
            })),
            _ => None,
        },
        _ => None,
    }
}

/// `EXSET … NX … WITHVERSION`: the new version, or nil if the key exists.
pub(crate) fn exset_nx(reply: &Value) -> Option<Option<u64>> {
    match reply {
        Value::Null => Some(None),
        v => version(v).map(Some),
    }
}

/// `EXCAS key value version [...]`, three shapes:
/// - `[OK, "", new_version]`: written;
/// - `[CAS_FAILED, current_value, current_version]`: version mismatch, with
///   what the key holds now (a status string, not an error reply);
/// - the integer -1: no such key.
pub(crate) fn excas(reply: &Value) -> Option<CasOutcome> {
    match reply {
        Value::Integer(-1) => Some(CasOutcome::Missing),
        Value::Array(items) => match items.as_slice() {
            [status, value, ver] => match status.as_bytes()? {
                b"OK" => Some(CasOutcome::Written { version: version(ver)? }),
                b"CAS_FAILED" => Some(CasOutcome::Conflict(Versioned {
                    value: bytes(value)?,
                    version: version(ver)?,
                })),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

/// The fenced-acquire script: `[1, fence]` if acquired, `[0, pttl]` if held.
pub(crate) fn fenced_acquire(reply: &Value) -> Option<FencedReply> {
    let Value::Array(items) = reply else { return None };
    match items.as_slice() {
        [Value::Integer(1), Value::Integer(fence)] => Some(FencedReply::Acquired {
            fence: u64::try_from(*fence).ok()?,
        }),
        [Value::Integer(0), Value::Integer(pttl)] => Some(FencedReply::Held {
            pttl_ms: u64::try_from(*pttl).ok().filter(|ms| *ms > 0),
        }),
        _ => None,
    }
}

/// What the fenced-acquire script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FencedReply {
    /// Acquired with this fencing token.
    Acquired { fence: u64 },
    /// Held; the holder's remaining TTL when it has one.
    Held { pttl_ms: Option<u64> },
}

/// `PTTL key`: milliseconds left, or `None` (no key, no TTL, odd reply).
pub(crate) fn pttl(reply: &Value) -> Option<u64> {
    match reply {
        Value::Integer(ms) if *ms > 0 => u64::try_from(*ms).ok(),
        _ => None,
    }
}

/// `WAIT n timeout`: the number of replicas that acknowledged.
pub(crate) fn wait(reply: &Value) -> Option<u32> {
    match reply {
        Value::Integer(n) => u32::try_from(*n).ok(),
        _ => None,
    }
}

/// `COMMAND INFO a b c`: one entry per name, nil for an unknown command.
/// Returns the names whose entry is nil.
pub(crate) fn missing_commands<'a>(reply: &Value, names: &[&'a str]) -> Option<Vec<&'a str>> {
    let Value::Array(items) = reply else { return None };
    if items.len() != names.len() {
        return None;
    }
    Some(
        names
            .iter()
            .zip(items)
            .filter(|(_, info)| info.is_null() || matches!(info, Value::Array(a) if a.is_empty()))
            .map(|(name, _)| *name)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> Value {
        Value::from(x)
    }

    fn arr(items: Vec<Value>) -> Value {
        Value::Array(items)
    }

    #[test]
    fn excas_shapes() {
        assert_eq!(
            excas(&arr(vec![s("OK"), s(""), Value::Integer(2)])),
            Some(CasOutcome::Written { version: 2 })
        );
        assert_eq!(
            excas(&arr(vec![
                s("CAS_FAILED"),
                Value::from(&b"\x00v\xff"[..]),
                Value::Integer(7)
            ])),
            Some(CasOutcome::Conflict(Versioned {
                value: b"\x00v\xff".to_vec(),
                version: 7
            }))
        );
        assert_eq!(excas(&Value::Integer(-1)), Some(CasOutcome::Missing));
        assert_eq!(excas(&Value::Integer(0)), None);
        assert_eq!(excas(&arr(vec![s("NOPE"), s(""), Value::Integer(1)])), None);
        assert_eq!(excas(&arr(vec![s("OK"), Value::Integer(1)])), None);
        assert_eq!(excas(&arr(vec![s("OK"), s(""), Value::Integer(-3)])), None);
    }

    #[test]
    fn exget_shapes() {
        assert_eq!(exget(&Value::Null), Some(None));
        assert_eq!(
            exget(&arr(vec![s(""), Value::Integer(1)])),
            Some(Some(Versioned {
                value: Vec::new(),
                version: 1
            }))
        );
        assert_eq!(exget(&Value::Integer(1)), None);
    }

    #[test]
    fn native_replies() {
        assert_eq!(set_nx(&s("OK")), Some(true));
        assert_eq!(set_nx(&Value::Null), Some(false));
        assert_eq!(set_nx(&Value::Integer(1)), None);
        assert_eq!(tri_state(&Value::Integer(-1)), Some(TriState::Missing));
        assert_eq!(tri_state(&Value::Integer(2)), None);
        assert_eq!(exset_nx(&Value::Integer(5)), Some(Some(5)));
        assert_eq!(exset_nx(&Value::Null), Some(None));
        assert_eq!(exset_nx(&s("OK")), None);
        assert_eq!(pttl(&Value::Integer(-2)), None);
        assert_eq!(wait(&Value::Integer(1)), Some(1));
    }

    #[test]
    fn fenced_replies() {
        assert_eq!(
            fenced_acquire(&arr(vec![Value::Integer(1), Value::Integer(9)])),
            Some(FencedReply::Acquired { fence: 9 })
        );
        assert_eq!(
            fenced_acquire(&arr(vec![Value::Integer(0), Value::Integer(-1)])),
            Some(FencedReply::Held { pttl_ms: None })
        );
        assert_eq!(fenced_acquire(&Value::Integer(1)), None);
    }

    #[test]
    fn command_info() {
        let names = ["CAD", "CAS"];
        let reply = arr(vec![Value::Null, arr(vec![s("cas")])]);
        assert_eq!(missing_commands(&reply, &names), Some(vec!["CAD"]));
        assert_eq!(missing_commands(&arr(vec![]), &names), None);
    }
}
