//! The key-value primitives on the bucket's stream, written here rather than
//! through `async_nats::jetstream::kv::Store`: every write is one publish
//! carrying exactly the headers the operation needs (the expected last
//! sequence of the key's subject, the per-key TTL in whole seconds rounded
//! up), and every read goes to the stream leader.
//!
//! Why not the client's own calls: `create_with_ttl` re-creates a key after
//! a delete through `update`, which sends no TTL (a lock taken that way would
//! never expire), and every TTL it sends is `as_secs()` (rounded down: a
//! 1.5 s lease would end on the server after 1 s, before the holder's local
//! deadline).

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::StreamMessage;
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use bytes::Bytes;
use lock_core::raw::validate_key;
use lock_core::{Error, Result};

use crate::Inner;
use crate::error::{NAME, NotStored, failed, publish_failed};

/// Longest key subject (after escaping) this backend writes: the server
/// refuses protocol lines above 4 KiB (`max_control_line`), and the
/// subject shares its line with the reply inbox.
pub const MAX_SUBJECT_KEY_LEN: usize = 3072;

/// The last message of a key's subject.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// The stream sequence: the key's revision.
    pub(crate) revision: u64,
    /// A value (`PUT`), not a delete or purge marker (the client's, or the
    /// server's when a TTL ran out).
    pub(crate) live: bool,
    pub(crate) value: Bytes,
    /// `Nats-TTL` of the message, in seconds.
    pub(crate) ttl_secs: Option<u64>,
    /// When the server stored it.
    pub(crate) stored_at: time::OffsetDateTime,
}

/// What a write sends besides its value.
pub(crate) enum Op {
    Put,
    Delete,
}

/// [`escape_into`] a new string.
#[cfg(test)]
pub(crate) fn escape(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    escape_into(&mut out, key);
    out
}

/// Appends `key` to `out` as a subject token of `[A-Za-z0-9_-]` plus `=XX` escapes: NATS
/// subjects split on `.` and reserve `*`, `>` and white space, and key-value
/// keys allow only `[-/_=.A-Za-z0-9]`. One-to-one, so two keys never share a
/// subject.
fn escape_into(out: &mut String, key: &str) {
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(char::from(b));
        } else {
            out.push('=');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
}

/// Length of `key` once escaped.
fn escaped_len(key: &str) -> usize {
    key.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
                1
            } else {
                3
            }
        })
        .sum()
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// `ttl` in whole seconds, rounded up: the server's expiry is never earlier
/// than the TTL asked for, so the holder's local deadline (sent + TTL −
/// drift) stays before it. Below one second is refused (the server's
/// smallest TTL).
pub(crate) fn ttl_secs(ttl: Duration, what: &str) -> Result<u64> {
    lock_core::raw::validate_ttl(ttl)?;
    if ttl < Duration::from_secs(1) {
        return Err(Error::invalid(format!(
            "{what} {ttl:?} is below the NATS backend's minimum of 1 s (per-key TTLs are whole seconds)"
        )));
    }
    Ok(ttl.as_secs().saturating_add(u64::from(ttl.subsec_nanos() > 0)))
}

impl Inner {
    /// The bucket key (after the bucket's subject prefix) of `key` in the
    /// namespace `ns` (`l` locks, `v` values).
    pub(crate) fn bucket_key(&self, ns: &str, key: &str) -> Result<String> {
        self.key_subject("", ns, key)
    }

    /// The subject of `key` in the namespace `ns`: the bucket's subject
    /// prefix and [`Inner::bucket_key`], built in one string.
    pub(crate) fn subject_of(&self, ns: &str, key: &str) -> Result<String> {
        self.key_subject(&self.subject_prefix, ns, key)
    }

    fn key_subject(&self, prefix: &str, ns: &str, key: &str) -> Result<String> {
        validate_key(key)?;
        let escaped = escaped_len(key);
        if escaped > MAX_SUBJECT_KEY_LEN {
            return Err(Error::invalid(format!(
                "a key of {} bytes is {escaped} bytes as a NATS subject, above this backend's limit of \
                 {MAX_SUBJECT_KEY_LEN} (bytes other than letters, digits, '-' and '_' take three)",
                key.len(),
            )));
        }
        let mut out = String::with_capacity(prefix.len() + ns.len() + 1 + escaped);
        out.push_str(prefix);
        out.push_str(ns);
        out.push('.');
        escape_into(&mut out, key);
        Ok(out)
    }

    pub(crate) fn subject(&self, bucket_key: &str) -> String {
        format!("{}{bucket_key}", self.subject_prefix)
    }

    /// Publish `value` to `subject` only if the subject's last sequence is
    /// `expected` (0: no message), with a TTL of `ttl` seconds when given.
    /// The new revision, or why nothing was stored.
    pub(crate) async fn write(
        &self,
        subject: &str,
        op: Op,
        value: Bytes,
        expected: u64,
        ttl: Option<u64>,
        what: &str,
    ) -> std::result::Result<u64, NotStored> {
        let mut headers = HeaderMap::new();
        headers.insert(
            async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
            expected.to_string(),
        );
        if let Some(secs) = ttl {
            headers.insert(async_nats::header::NATS_MESSAGE_TTL, format!("{secs}s"));
        }
        if let Op::Delete = op {
            headers.insert("KV-Operation", "DEL");
        }
        // "No responders": no server took the message, so nothing was
        // stored (on a cluster: right after the bucket is created, until
        // the stream's interest reaches every server, and while the stream
        // has no leader). Sent again until the response timeout.
        let started = tokio::time::Instant::now();
        let mut attempt = 0;
        loop {
            let sent = self
                .js
                .publish_with_headers(subject.to_owned(), headers.clone(), value.clone())
                .await;
            let acked = match sent {
                Ok(ack) => ack.await,
                Err(e) => Err(e),
            };
            match acked {
                Ok(ack) => return Ok(ack.sequence),
                Err(e) if e.kind() == PublishErrorKind::StreamNotFound && started.elapsed() < self.response_timeout => {
                    attempt += 1;
                    crate::lock::back_off(attempt + 2).await;
                }
                Err(e) if e.kind() == PublishErrorKind::StreamNotFound => {
                    return Err(publish_failed(
                        &format!("{what} ({} attempts in {:?})", attempt + 1, started.elapsed()),
                        e,
                    ));
                }
                Err(e) => return Err(publish_failed(what, e)),
            }
        }
    }

    /// A delete marker expecting `revision`: it ends after the bucket's
    /// marker TTL, so nothing of a released lock outlives its release by
    /// more than that.
    pub(crate) async fn delete_marker(
        &self,
        subject: &str,
        revision: u64,
        what: &str,
    ) -> std::result::Result<u64, NotStored> {
        let ttl = self.marker_ttl_secs;
        self.write(subject, Op::Delete, Bytes::new(), revision, Some(ttl), what)
            .await
    }

    /// The last message of `subject`, read from the stream leader (a direct
    /// get may be answered by a replica that lags).
    pub(crate) async fn last(&self, subject: &str) -> Result<Option<Entry>> {
        match self.stream.get_last_raw_message_by_subject(subject).await {
            Ok(m) => Ok(Some(entry(m))),
            Err(e) if matches!(e.kind(), LastRawMessageErrorKind::NoMessageFound) => Ok(None),
            Err(e) => Err(failed("reading a key", e)),
        }
    }
}

fn entry(m: StreamMessage) -> Entry {
    let header = |name: &str| m.headers.get(name).map(|v| v.as_str().to_owned());
    let marker =
        header("Nats-Marker-Reason").is_some() || matches!(header("KV-Operation").as_deref(), Some("DEL" | "PURGE"));
    let ttl_secs = header(async_nats::header::NATS_MESSAGE_TTL.as_ref()).and_then(|t| parse_ttl(&t));
    Entry {
        revision: m.sequence,
        live: !marker,
        value: m.payload,
        ttl_secs,
        stored_at: m.time,
    }
}

/// A `Nats-TTL` value in seconds: `30`, `30s`, `1m`, `1h` (`never`: none).
fn parse_ttl(text: &str) -> Option<u64> {
    let text = text.trim();
    if let Ok(secs) = text.parse::<u64>() {
        return Some(secs);
    }
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = text.split_at(split);
    let n: u64 = n.parse().ok()?;
    match unit {
        "s" => Some(n),
        "m" => n.checked_mul(60),
        "h" => n.checked_mul(3600),
        _ => None,
    }
}

/// An error for a write that could not be applied after a few conflicting
/// rounds (the key kept changing under it).
pub(crate) fn busy(what: &str) -> Error {
    Error::backend(NAME, format!("{what}: the key changed under every attempt"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_is_one_to_one_and_subject_safe() {
        assert_eq!(escape("invoice-42_a"), "invoice-42_a");
        assert_eq!(escape("a.b"), "a=2Eb");
        assert_eq!(escape("a=2Eb"), "a=3D2Eb");
        assert_eq!(escape("x:*> é"), "x=3A=2A=3E=20=C3=A9");
        assert_ne!(escape("a.b"), escape("a=2Eb"));
        for key in ["invoice-42_a", "a.b", "x:*> é", ""] {
            assert_eq!(escaped_len(key), escape(key).len(), "{key:?}");
        }
    }

    #[test]
    fn ttls_round_up_to_whole_seconds() {
        assert_eq!(ttl_secs(Duration::from_secs(1), "ttl").unwrap(), 1);
        assert_eq!(ttl_secs(Duration::from_millis(1001), "ttl").unwrap(), 2);
        assert_eq!(ttl_secs(Duration::from_millis(2500), "ttl").unwrap(), 3);
        let err = ttl_secs(Duration::from_millis(999), "ttl").unwrap_err();
        assert!(err.to_string().contains("minimum of 1 s"), "{err}");
    }

    #[test]
    fn ttl_headers_parse() {
        assert_eq!(parse_ttl("5"), Some(5));
        assert_eq!(parse_ttl("5s"), Some(5));
        assert_eq!(parse_ttl("2m"), Some(120));
        assert_eq!(parse_ttl("never"), None);
    }
}
