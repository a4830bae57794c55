//! The RESP wire format: parsed replies ([`RespValue`]), command encoding,
//! framing and parsing (the client is in `resp_client.rs`).

use std::fmt;

use super::error::{HarnessError, HarnessResult};

const MAX_DEPTH: usize = 64;

/// A parsed RESP2 reply.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum RespValue {
    /// `+OK\r\n`
    Simple(String),
    /// `-ERR message\r\n` (the text after the `-`).
    Error(String),
    /// `:42\r\n`
    Integer(i64),
    /// `$3\r\nfoo\r\n`; `None` for the null bulk string `$-1\r\n`.
    Bulk(Option<Vec<u8>>),
    /// `*2\r\n...`; `None` for the null array `*-1\r\n`.
    Array(Option<Vec<RespValue>>),
}

impl RespValue {
    /// A non-null bulk string.
    pub fn bulk(bytes: impl Into<Vec<u8>>) -> Self {
        RespValue::Bulk(Some(bytes.into()))
    }

    /// True for `+OK`.
    pub fn is_ok(&self) -> bool {
        matches!(self, RespValue::Simple(s) if s == "OK")
    }

    /// True for an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, RespValue::Error(_))
    }

    /// True for the null bulk string or null array.
    pub fn is_null(&self) -> bool {
        matches!(self, RespValue::Bulk(None) | RespValue::Array(None))
    }

    /// The bytes of a bulk or simple string.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            RespValue::Bulk(Some(b)) => Some(b),
            RespValue::Simple(s) => Some(s.as_bytes()),
            _ => None,
        }
    }

    /// A bulk or simple string as UTF-8 text.
    pub fn as_str(&self) -> Option<&str> {
        self.as_bytes().and_then(|b| std::str::from_utf8(b).ok())
    }

    /// An integer reply.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            RespValue::Integer(i) => Some(*i),
            _ => None,
        }
    }

    /// The elements of a non-null array.
    pub fn as_array(&self) -> Option<&[RespValue]> {
        match self {
            RespValue::Array(Some(a)) => Some(a),
            _ => None,
        }
    }

    /// The message of an error reply.
    pub fn as_error(&self) -> Option<&str> {
        match self {
            RespValue::Error(e) => Some(e),
            _ => None,
        }
    }

    /// The exact RESP2 encoding of this value.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            RespValue::Simple(s) => {
                out.push(b'+');
                out.extend_from_slice(s.as_bytes());
            }
            RespValue::Error(s) => {
                out.push(b'-');
                out.extend_from_slice(s.as_bytes());
            }
            RespValue::Integer(i) => {
                out.push(b':');
                out.extend_from_slice(i.to_string().as_bytes());
            }
            RespValue::Bulk(None) => out.extend_from_slice(b"$-1"),
            RespValue::Bulk(Some(b)) => {
                out.push(b'$');
                out.extend_from_slice(b.len().to_string().as_bytes());
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(b);
            }
            RespValue::Array(None) => out.extend_from_slice(b"*-1"),
            RespValue::Array(Some(items)) => {
                out.push(b'*');
                out.extend_from_slice(items.len().to_string().as_bytes());
                out.extend_from_slice(b"\r\n");
                for item in items {
                    item.encode_into(out);
                }
                return;
            }
        }
        out.extend_from_slice(b"\r\n");
    }

    /// Turns an error reply into [`HarnessError::Reply`], for admin code.
    pub(crate) fn into_result(self, command: &str) -> HarnessResult<RespValue> {
        match self {
            RespValue::Error(message) => Err(HarnessError::Reply {
                command: command.to_owned(),
                message,
            }),
            v => Ok(v),
        }
    }
}

impl fmt::Debug for RespValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RespValue::Simple(s) => write!(f, "Simple({s:?})"),
            RespValue::Error(s) => write!(f, "Error({s:?})"),
            RespValue::Integer(i) => write!(f, "Integer({i})"),
            RespValue::Bulk(None) => write!(f, "Bulk(None)"),
            RespValue::Bulk(Some(b)) => match std::str::from_utf8(b) {
                Ok(s) => write!(f, "Bulk({s:?})"),
                Err(_) => write!(f, "Bulk({b:?})"),
            },
            RespValue::Array(None) => write!(f, "Array(None)"),
            RespValue::Array(Some(items)) => f.debug_list().entries(items).finish(),
        }
    }
}

/// Encodes a command as a RESP array of bulk strings.
pub fn encode_command<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + args.iter().map(|a| a.as_ref().len() + 16).sum::<usize>());
    out.push(b'*');
    out.extend_from_slice(args.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for a in args {
        let a = a.as_ref();
        out.push(b'$');
        out.extend_from_slice(a.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Length of the complete reply at the start of `buf`, `None` if more bytes
/// are needed. Understands RESP2 and RESP3 framing, so raw reads work after
/// `HELLO 3` too.
pub fn frame_len(buf: &[u8]) -> HarnessResult<Option<usize>> {
    frame_end(buf, 0, 0)
}

fn frame_end(buf: &[u8], pos: usize, depth: usize) -> HarnessResult<Option<usize>> {
    if depth > MAX_DEPTH {
        return Err(HarnessError::Protocol("reply nested too deeply".into()));
    }
    let Some((line, after)) = line_at(buf, pos) else {
        return Ok(None);
    };
    let Some((&kind, rest)) = line.split_first() else {
        return Err(HarnessError::Protocol("empty line where a reply was expected".into()));
    };
    match kind {
        // Line types: simple, error, integer; RESP3 null, boolean, double, big number.
        b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => Ok(Some(after)),
        // Length-prefixed: bulk; RESP3 blob error, verbatim string.
        b'$' | b'!' | b'=' => {
            let n = parse_int(rest)?;
            if n < 0 {
                return Ok(Some(after));
            }
            let end = after
                .checked_add(usize::try_from(n).map_err(|_| bad_len(n))?)
                .and_then(|e| e.checked_add(2))
                .ok_or_else(|| bad_len(n))?;
            if buf.len() < end {
                return Ok(None);
            }
            if &buf[end - 2..end] != b"\r\n" {
                return Err(HarnessError::Protocol("bulk string not followed by CRLF".into()));
            }
            Ok(Some(end))
        }
        // Aggregates: array; RESP3 set, push, map, attribute.
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = parse_int(rest)?;
            let mut pos = after;
            if n > 0 {
                let mut count = usize::try_from(n).map_err(|_| bad_len(n))?;
                if kind == b'%' || kind == b'|' {
                    count = count.checked_mul(2).ok_or_else(|| bad_len(n))?;
                }
                for _ in 0..count {
                    match frame_end(buf, pos, depth + 1)? {
                        Some(p) => pos = p,
                        None => return Ok(None),
                    }
                }
            }
            if kind == b'|' {
                // An attribute is followed by the reply it annotates.
                return frame_end(buf, pos, depth + 1);
            }
            Ok(Some(pos))
        }
        other => Err(HarnessError::Protocol(format!(
            "unknown reply type byte {:?}",
            char::from(other)
        ))),
    }
}

/// Parses one complete RESP2 reply (as delimited by [`frame_len`]).
///
/// # Errors
/// [`HarnessError::Protocol`] for malformed input or RESP3-only types.
pub fn parse_reply(frame: &[u8]) -> HarnessResult<RespValue> {
    let (v, used) = parse_at(frame, 0, 0)?;
    if used != frame.len() {
        return Err(HarnessError::Protocol(format!(
            "{} trailing bytes after the reply",
            frame.len() - used
        )));
    }
    Ok(v)
}

fn parse_at(buf: &[u8], pos: usize, depth: usize) -> HarnessResult<(RespValue, usize)> {
    let incomplete = || HarnessError::Protocol("incomplete reply".into());
    if depth > MAX_DEPTH {
        return Err(HarnessError::Protocol("reply nested too deeply".into()));
    }
    let (line, after) = line_at(buf, pos).ok_or_else(incomplete)?;
    let Some((&kind, rest)) = line.split_first() else {
        return Err(HarnessError::Protocol("empty line where a reply was expected".into()));
    };
    let text = || String::from_utf8_lossy(rest).into_owned();
    match kind {
        b'+' => Ok((RespValue::Simple(text()), after)),
        b'-' => Ok((RespValue::Error(text()), after)),
        b':' => Ok((RespValue::Integer(parse_int(rest)?), after)),
        b'$' => {
            let n = parse_int(rest)?;
            if n < 0 {
                return Ok((RespValue::Bulk(None), after));
            }
            let len = usize::try_from(n).map_err(|_| bad_len(n))?;
            let end = after.checked_add(len).ok_or_else(|| bad_len(n))?;
            let data = buf.get(after..end).ok_or_else(incomplete)?;
            if buf.get(end..end + 2) != Some(b"\r\n".as_slice()) {
                return Err(incomplete());
            }
            Ok((RespValue::Bulk(Some(data.to_vec())), end + 2))
        }
        b'*' => {
            let n = parse_int(rest)?;
            if n < 0 {
                return Ok((RespValue::Array(None), after));
            }
            let count = usize::try_from(n).map_err(|_| bad_len(n))?;
            let mut items = Vec::with_capacity(count.min(1024));
            let mut pos = after;
            for _ in 0..count {
                let (v, p) = parse_at(buf, pos, depth + 1)?;
                items.push(v);
                pos = p;
            }
            Ok((RespValue::Array(Some(items)), pos))
        }
        b'_' | b'#' | b',' | b'(' | b'!' | b'=' | b'~' | b'>' | b'%' | b'|' => Err(HarnessError::Protocol(format!(
            "RESP3 reply type {:?} is not representable as RespValue; \
                 use the raw methods of RespClient",
            char::from(kind)
        ))),
        other => Err(HarnessError::Protocol(format!(
            "unknown reply type byte {:?}",
            char::from(other)
        ))),
    }
}

/// The line starting at `pos` (without CRLF) and the index after its CRLF.
fn line_at(buf: &[u8], pos: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(pos..)?;
    let i = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..i], pos + i + 2))
}

fn parse_int(s: &[u8]) -> HarnessResult<i64> {
    std::str::from_utf8(s)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| HarnessError::Protocol(format!("invalid integer {:?}", String::from_utf8_lossy(s))))
}

fn bad_len(n: i64) -> HarnessError {
    HarnessError::Protocol(format!("invalid length {n}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn frames_and_parses_resp2() {
        let cases: &[(&[u8], RespValue)] = &[
            (b"+OK\r\n", RespValue::Simple("OK".into())),
            (b"-ERR x y\r\n", RespValue::Error("ERR x y".into())),
            (b":-12\r\n", RespValue::Integer(-12)),
            (b"$-1\r\n", RespValue::Bulk(None)),
            (b"$0\r\n\r\n", RespValue::bulk("")),
            (b"$4\r\na\r\nb\r\n", RespValue::bulk("a\r\nb")),
            (b"*-1\r\n", RespValue::Array(None)),
            (b"*0\r\n", RespValue::Array(Some(vec![]))),
            (
                b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n",
                RespValue::Array(Some(vec![
                    RespValue::bulk("a"),
                    RespValue::Array(Some(vec![RespValue::Integer(1)])),
                ])),
            ),
        ];
        for (bytes, value) in cases {
            assert_eq!(frame_len(bytes).unwrap(), Some(bytes.len()));
            assert_eq!(&parse_reply(bytes).unwrap(), value);
            assert_eq!(&value.to_bytes(), bytes);
            for cut in 0..bytes.len() {
                assert_eq!(frame_len(&bytes[..cut]).unwrap(), None, "{cut}");
            }
        }
    }

    #[test]
    fn frames_resp3_but_does_not_parse_it() {
        let cases: &[&[u8]] = &[
            b"_\r\n",
            b"#t\r\n",
            b",1.5\r\n",
            b"(123\r\n",
            b"!3\r\nerr\r\n",
            b"=7\r\ntxt:abc\r\n",
            b"%1\r\n+a\r\n:1\r\n",
            b"~2\r\n+a\r\n+b\r\n",
            b"|1\r\n+k\r\n+v\r\n:5\r\n",
        ];
        for bytes in cases {
            assert_eq!(frame_len(bytes).unwrap(), Some(bytes.len()));
            assert!(parse_reply(bytes).is_err());
        }
    }

    #[test]
    fn rejects_garbage() {
        assert!(frame_len(b"?x\r\n").is_err());
        assert!(frame_len(b"$x\r\n").is_err());
        assert!(frame_len(b"$1\r\nab\r\n").is_err());
        assert!(parse_reply(b"+OK\r\n+OK\r\n").is_err());
    }

    #[test]
    fn encodes_commands() {
        assert_eq!(
            encode_command(&["SET", "k", ""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n".to_vec()
        );
    }
}
