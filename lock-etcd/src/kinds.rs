//! Key layout and compares shared by the lock kinds (semaphores,
//! read-write locks, elections): each name owns a key range of its own.

use etcd_client::{Compare, CompareOp, EventType, WatchOptions};
use lock_core::raw::validate_key;
use lock_core::{Error, LockToken, Result};

use crate::Inner;
use crate::error::{NAME, failed};

/// The key range `[start, end)` of one name of one kind, or of a part of it.
#[derive(Debug, Clone)]
pub(crate) struct Prefix {
    pub(crate) start: Vec<u8>,
    pub(crate) end: Vec<u8>,
}

impl Prefix {
    /// `<namespace><kind>/<len>:<name>/`: the name's length first, so no
    /// name's range holds another's.
    pub(crate) fn new(inner: &Inner, kind: &str, name: &str) -> Result<Prefix> {
        validate_key(name)?;
        Ok(Prefix::of(
            format!("{}{kind}/{}:{name}/", inner.namespace, name.len()).into_bytes(),
        ))
    }

    fn of(start: Vec<u8>) -> Prefix {
        let end = range_end(&start);
        Prefix { start, end }
    }

    /// The part of this range under `part` (`"r/"`).
    pub(crate) fn sub(&self, part: &str) -> Prefix {
        let mut start = self.start.clone();
        start.extend_from_slice(part.as_bytes());
        Prefix::of(start)
    }

    /// The entry of `token` in this range.
    pub(crate) fn entry(&self, token: &LockToken) -> Vec<u8> {
        let mut k = self.start.clone();
        k.extend_from_slice(&token.hex_bytes());
        k
    }

    /// The token hex of an entry key of this range, if it is one.
    pub(crate) fn owner<'a>(&self, key: &'a [u8]) -> Option<&'a [u8]> {
        key.strip_prefix(self.start.as_slice())
    }
}

/// etcd's end of the range of keys starting with `prefix`.
fn range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0] // every key
}

/// "No key exists in `range`" (a range compare on an empty range compares
/// a zero entry: create revision 0).
pub(crate) fn no_entry_in(range: &Prefix) -> Compare {
    Compare::create_revision(range.start.clone(), CompareOp::Equal, 0).with_range(range.end.clone())
}

/// "No key exists in `range` but `except`" (two range compares around it).
pub(crate) fn no_entry_in_except(range: &Prefix, except: &[u8]) -> Vec<Compare> {
    let mut after = except.to_vec();
    after.push(0);
    vec![
        Compare::create_revision(range.start.clone(), CompareOp::Equal, 0).with_range(except.to_vec()),
        Compare::create_revision(after, CompareOp::Equal, 0).with_range(range.end.clone()),
    ]
}

/// "No key in `range` changed after `revision`" (keys deleted since are
/// not seen: a deletion only frees).
pub(crate) fn unchanged_since(range: &Prefix, revision: i64) -> Compare {
    Compare::mod_revision(range.start.clone(), CompareOp::Less, revision.saturating_add(1))
        .with_range(range.end.clone())
}

impl Inner {
    /// Until an event on `key` (or in `range`, with `range_end`) at or
    /// after `start_revision` — a delete only, with `deletes_only` — or
    /// until the server cancels the watch: one watch, no polling.
    pub(crate) async fn watch_for(
        &self,
        key: Vec<u8>,
        range_end: Option<Vec<u8>>,
        start_revision: i64,
        deletes_only: bool,
    ) -> Result<()> {
        let mut opts = WatchOptions::new().with_start_revision(start_revision);
        if let Some(end) = range_end {
            opts = opts.with_range(end);
        }
        let mut events = self
            .client
            .watch_client()
            .watch(key, Some(opts))
            .await
            .map_err(|e| failed("watch", e))?;
        loop {
            match events.message().await {
                Ok(Some(resp)) if resp.canceled() => return Ok(()),
                Ok(Some(resp))
                    if resp
                        .events()
                        .iter()
                        .any(|e| !deletes_only || e.event_type() == EventType::Delete) =>
                {
                    return Ok(());
                }
                Ok(Some(_)) => {}
                Ok(None) => return Err(Error::backend(NAME, "the watch stream closed")),
                Err(e) => return Err(failed("watch", e)),
            }
        }
    }
}
