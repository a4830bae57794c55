//! Names of the helper keys a lock key brings along (its fence counter, its
//! waiter marker): all under one reserved prefix that user keys may not
//! use, and in the lock key's cluster slot so one script can touch both.
//!
//! Redis Cluster hashes only a key's hash tag when it has one: the bytes
//! between the first `{` and the first `}` after it, if not empty. The
//! prefix has no braces, so:
//! - a key with a tag, `{user:7}:lock`, keeps it: `verrou:lua:fence:t:{user:7}:lock`;
//! - a key without one, `orders:42`, becomes the tag: `verrou:lua:fence:{orders:42}`.
//!
//! The two shapes differ right after the kind (`t:` or `{`), so no two
//! lock keys share a helper key (`a` and `{a}` get different ones).
//! A key with no tag that contains `}` (e.g. `a}b`, `x{}y`) cannot be wrapped
//! that way; in cluster mode such keys are refused when fencing is on.

use deadpool_redis::redis::cluster_routing::Slot;
use lock_core::{Error, Result};
use lock_redis_family::keys::hash_tag;

/// Every helper key starts with this; user keys may not.
pub(crate) const RESERVED_PREFIX: &str = "verrou:lua:";

/// The key the connect-time `SET IFEQ` probe names (never written).
pub(crate) const IFEQ_PROBE: &str = "verrou:lua:probe:ifeq";

/// The kinds of helper keys.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Helper {
    /// The fence counter (no TTL).
    Fence,
    /// A waiter's marker, so the release publishes.
    Waiting,
    /// Barging waiters to wake, one per release (id → deadline).
    Wake,
    /// When the barging waiters registered (id → server ms): a release
    /// reserves the key for one that has waited long enough.
    WakeSince,
    /// The fair queue (waiter id → ticket).
    Queue,
    /// The fair queue's entry deadlines (waiter id → server ms).
    QueueDeadlines,
    /// The id of the last release (cluster), for a re-sent release.
    Released,
    /// The id of the last versioned delete (cluster), for a re-sent delete.
    Deleted,
}

impl Helper {
    fn name(self) -> &'static str {
        match self {
            Helper::Fence => "fence",
            Helper::Waiting => "waiting",
            Helper::Wake => "wake",
            Helper::WakeSince => "wake-since",
            Helper::Queue => "queue",
            Helper::QueueDeadlines => "queue-deadlines",
            Helper::Released => "released",
            Helper::Deleted => "deleted",
        }
    }
}

/// `key`'s helper key of kind `helper`, in the same cluster slot as `key`
/// whenever that is possible (see [`same_slot`]).
pub(crate) fn helper(key: &str, helper: Helper) -> String {
    let mut name = String::with_capacity(helper_len(key, helper));
    push_helper(&mut name, key, hash_tag(key).is_some(), helper);
    name
}

/// The length of `key`'s helper name of kind `helper` (an upper bound).
fn helper_len(key: &str, helper: Helper) -> usize {
    RESERVED_PREFIX.len() + helper.name().len() + key.len() + 3
}

/// Appends `key`'s helper name of kind `helper` (`tagged`: `key` has a
/// hash tag) to `buf`, as [`helper`] names it.
fn push_helper(buf: &mut String, key: &str, tagged: bool, helper: Helper) {
    buf.push_str(RESERVED_PREFIX);
    buf.push_str(helper.name());
    if tagged {
        buf.push_str(":t:");
        buf.push_str(key);
    } else {
        buf.push_str(":{");
        buf.push_str(key);
        buf.push('}');
    }
}

/// The helper keys a release wakes waiters with (the marker, the wake set,
/// the fair queue and its deadlines), built in one buffer: a release needs
/// all four, and one allocation is cheaper than four.
pub(crate) struct WakeKeys {
    buf: String,
    ends: [usize; 4],
}

impl WakeKeys {
    const KINDS: [Helper; 4] = [Helper::Waiting, Helper::Wake, Helper::Queue, Helper::QueueDeadlines];

    /// `key`'s wake keys.
    pub(crate) fn new(key: &str) -> Self {
        let tagged = hash_tag(key).is_some();
        let mut buf = String::with_capacity(Self::KINDS.iter().map(|&h| helper_len(key, h)).sum());
        let mut ends = [0; 4];
        for (end, kind) in ends.iter_mut().zip(Self::KINDS) {
            push_helper(&mut buf, key, tagged, kind);
            *end = buf.len();
        }
        WakeKeys { buf, ends }
    }

    /// The marker, the wake set, the fair queue and its deadlines.
    pub(crate) fn names(&self) -> [&str; 4] {
        let [a, b, c, d] = self.ends;
        [&self.buf[..a], &self.buf[a..b], &self.buf[b..c], &self.buf[c..d]]
    }
}

/// Refuses a user key inside the reserved prefix: it could be (or become)
/// another lock's helper key.
pub(crate) fn check_user_key(key: &str) -> Result<()> {
    if key.starts_with(RESERVED_PREFIX) {
        return Err(Error::invalid(format!(
            "key {key:?} starts with {RESERVED_PREFIX:?}, which is reserved for the redis-lua backend's helper keys \
             (fence counters, waiter markers)"
        )));
    }
    Ok(())
}

/// True when both keys hash to the same cluster slot.
pub(crate) fn same_slot(a: &str, b: &str) -> bool {
    Slot::for_key(a) == Slot::for_key(b)
}

/// The cluster slot of `key`.
pub(crate) fn slot(key: &str) -> Slot {
    Slot::for_key(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_keys_are_the_helper_names() {
        for key in ["orders:42", "{user:7}:lock", "x{y", "🔒:ü"] {
            let expected = WakeKeys::KINDS.map(|h| helper(key, h));
            assert_eq!(WakeKeys::new(key).names(), expected.each_ref().map(String::as_str));
        }
    }

    #[test]
    fn helpers_share_the_slot_and_the_reserved_prefix() {
        for key in ["orders:42", "{user:7}:lock", "a{b}c{d}", "x{y", "🔒:ü"] {
            for kind in [Helper::Fence, Helper::Waiting] {
                let h = helper(key, kind);
                assert_ne!(h, key);
                assert!(h.starts_with(RESERVED_PREFIX));
                assert!(check_user_key(&h).is_err());
                assert!(same_slot(key, &h), "{key} -> {h}");
            }
        }
        assert_eq!(helper("orders:42", Helper::Fence), "verrou:lua:fence:{orders:42}");
        assert_eq!(
            helper("{user:7}:lock", Helper::Fence),
            "verrou:lua:fence:t:{user:7}:lock"
        );
        assert!(check_user_key("orders:42").is_ok());
    }

    #[test]
    fn distinct_keys_get_distinct_helpers() {
        let keys = ["a", "{a}", "{a}:waiting", "{a}:fence", "t:{a}", "{t:{a}}", "a}", "{a}}"];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                for kind in [Helper::Fence, Helper::Waiting] {
                    assert_ne!(helper(a, kind), helper(b, kind), "{a} / {b}");
                }
            }
        }
        assert_ne!(helper("a", Helper::Fence), helper("a", Helper::Waiting));
    }

    #[test]
    fn unwrappable_keys_are_detected() {
        for key in ["a}b", "x{}y", "}{", "{}"] {
            assert!(!same_slot(key, &helper(key, Helper::Fence)), "{key}");
        }
    }
}
