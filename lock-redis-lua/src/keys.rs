//! Names of the keys a lock key brings along (its fence counter), kept in
//! the lock key's cluster slot so one script can touch both.
//!
//! Redis Cluster hashes only a key's hash tag when it has one: the bytes
//! between the first `{` and the first `}` after it, if not empty.
//! - a key with a tag, `{user:7}:lock`, keeps it: `{user:7}:lock:fence`;
//! - a key without one, `orders:42`, becomes the tag: `{orders:42}:fence`.
//!
//! A key with no tag that contains `}` (e.g. `a}b`, `x{}y`) cannot be wrapped
//! that way; in cluster mode such keys are refused when fencing is on.

use deadpool_redis::redis::cluster_routing::Slot;

/// The hash tag of `key`, if it has a non-empty one.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let rest = &key[open + 1..];
    let close = rest.find('}')?;
    (close > 0).then(|| &rest[..close])
}

/// A key for `suffix` that lives in the same cluster slot as `key`
/// (whenever that is possible; see [`same_slot`]).
pub(crate) fn companion(key: &str, suffix: &str) -> String {
    if hash_tag(key).is_some() {
        format!("{key}:{suffix}")
    } else {
        format!("{{{key}}}:{suffix}")
    }
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
    fn tags_follow_redis_rules() {
        assert_eq!(hash_tag("{user:7}:lock"), Some("user:7"));
        assert_eq!(hash_tag("a{b}c{d}"), Some("b"));
        assert_eq!(hash_tag("plain"), None);
        assert_eq!(hash_tag("x{}y"), None);
        assert_eq!(hash_tag("x{y"), None);
    }

    #[test]
    fn companions_share_the_slot() {
        for key in ["orders:42", "{user:7}:lock", "a{b}c{d}", "x{y", "🔒:ü"] {
            let fence = companion(key, "fence");
            assert_ne!(fence, key);
            assert!(same_slot(key, &fence), "{key} -> {fence}");
        }
        assert_eq!(companion("orders:42", "fence"), "{orders:42}:fence");
        assert_eq!(companion("{user:7}:lock", "fence"), "{user:7}:lock:fence");
    }

    #[test]
    fn unwrappable_keys_are_detected() {
        for key in ["a}b", "x{}y", "}{", "{}"] {
            assert!(!same_slot(key, &companion(key, "fence")), "{key}");
        }
    }
}
