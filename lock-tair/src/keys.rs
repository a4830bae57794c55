//! Key and version helpers: the fence counter's key, the prefix of the lock
//! kinds' keys, and the random initial version of a versioned key.

use lock_core::{Error, Result};
use lock_redis_family::keys::hash_tag;

/// Prefix of the semaphore's, read-write lock's and election's keys
/// (`verrou:tair:sem:{name}`, `verrou:tair:leader:t:{a}x`; see
/// `lock_redis_family::kinds::semaphore::SemaphoreKeys::prefixed`).
pub(crate) const KIND_PREFIX: &str = "verrou:tair:";

/// Lowest initial version handed to `EXSET … ABS`. Far above the small
/// versions (1, 2, …) that plain `EXSET` gives a recreated key, so a version
/// read from a key written by other tools cannot match ours by accident.
pub(crate) const MIN_INITIAL_VERSION: u64 = 1 << 32;

/// Highest initial version (exclusive). Tair replies versions as signed
/// 64-bit integers and rejects `ABS` above `i64::MAX`; starting below 2^62
/// leaves 2^62 increments of headroom.
pub(crate) const MAX_INITIAL_VERSION: u64 = 1 << 62;

/// A fresh initial version from the OS CSPRNG, uniform (up to a negligible
/// modulo bias) in `[MIN_INITIAL_VERSION, MAX_INITIAL_VERSION)`.
///
/// Tair restarts a key's version at 1 after a delete or expiry, so a
/// compare-and-set holding a version read before the delete could match the
/// recreated key (ABA). Creating every key at a random version makes such a
/// match need the old and new version ranges to overlap: with `n` writes on
/// each side, a chance of about `2n / 2^62`.
pub(crate) fn random_initial_version() -> Result<u64> {
    let r = getrandom::u64().map_err(|e| Error::backend("os-rng", format!("cannot read the OS random source: {e}")))?;
    Ok(MIN_INITIAL_VERSION + r % (MAX_INITIAL_VERSION - MIN_INITIAL_VERSION))
}

/// The key of `key`'s fence counter: `prefix` + `key` when `key` has a hash
/// tag (the tag, hence the cluster slot, is kept), else `prefix{key}` so the
/// whole key becomes the tag and the slot is the same as `key`'s. A key
/// without a tag but with a `}` cannot be wrapped; it gets `prefix + key`,
/// which is fine on a single server and refused on a cluster (the caller
/// checks the slots).
pub(crate) fn fence_key(prefix: &str, key: &str) -> String {
    if hash_tag(key).is_some() || key.contains('}') {
        format!("{prefix}{key}")
    } else {
        format!("{prefix}{{{key}}}")
    }
}

/// Check a fence key prefix: braces would change the hash tag; an empty
/// prefix would make a hash-tagged key its own fence counter; a prefix over
/// [`KIND_PREFIX`] (or under it) would make fence counters of the kinds'
/// keys (or user keys that are refused under it).
pub(crate) fn validate_fence_prefix(prefix: &str) -> Result<()> {
    if prefix.contains('{') || prefix.contains('}') {
        return Err(Error::invalid(format!(
            "fence key prefix {prefix:?} must not contain braces (they would change the cluster hash tag)"
        )));
    }
    if prefix.is_empty() {
        return Err(Error::invalid(
            "the fence key prefix must not be empty: a hash-tagged key would be its own fence counter",
        ));
    }
    if prefix.starts_with(KIND_PREFIX) || KIND_PREFIX.starts_with(prefix) {
        return Err(Error::invalid(format!(
            "fence key prefix {prefix:?} overlaps {KIND_PREFIX:?}, the prefix of the backend's own keys: fence \
             counters could be the lock kinds' keys"
        )));
    }
    Ok(())
}

/// Refuses a user key (a lock's, a lock kind's name, a versioned key) under
/// the backend's reserved names: [`KIND_PREFIX`] and `fence_prefix` (the
/// fence counters'). Such a key could be another lock's helper key: a
/// fenced acquire would overwrite it with a fence number, a kind's counter
/// would refuse every campaign.
pub(crate) fn check_user_key(key: &str, fence_prefix: &str) -> Result<()> {
    for (prefix, what) in [
        (KIND_PREFIX, "the lock kinds' keys and waiter markers"),
        (fence_prefix, "fence counters"),
    ] {
        if key.starts_with(prefix) {
            return Err(Error::invalid(format!(
                "key {key:?} starts with {prefix:?}, which is reserved for the tair backend's {what}"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fred::util::redis_keyslot;

    #[test]
    fn fence_key_shares_the_slot() {
        for key in [
            "orders:42",
            "{user:7}:cart",
            "a{b",
            "a{}b{c}",
            "x{y}z",
            "plain",
            "é{ü}",
            "{}{x}",
        ] {
            let fence = fence_key("verrou:fence:", key);
            assert_ne!(fence, key);
            if hash_tag(key).is_some() || !key.contains('}') {
                assert_eq!(
                    redis_keyslot(fence.as_bytes()),
                    redis_keyslot(key.as_bytes()),
                    "{key} -> {fence}"
                );
            }
        }
        assert_eq!(fence_key("f:", "k"), "f:{k}");
        assert_eq!(fence_key("f:", "{t}k"), "f:{t}k");
    }

    #[test]
    fn initial_versions_are_in_range_and_differ() -> Result<()> {
        let a = random_initial_version()?;
        let b = random_initial_version()?;
        assert_ne!(a, b);
        for v in [a, b] {
            assert!((MIN_INITIAL_VERSION..MAX_INITIAL_VERSION).contains(&v));
            assert!(i64::try_from(v).is_ok());
        }
        Ok(())
    }

    #[test]
    fn braces_in_the_prefix_are_refused() {
        assert!(validate_fence_prefix("fence:").is_ok());
        assert!(validate_fence_prefix("{fence}:").is_err());
    }

    #[test]
    fn empty_and_overlapping_prefixes_are_refused() {
        for prefix in ["", "v", "verrou:", "verrou:tair:", "verrou:tair:fence:"] {
            assert!(validate_fence_prefix(prefix).is_err(), "{prefix:?}");
        }
        assert!(validate_fence_prefix(crate::DEFAULT_FENCE_PREFIX).is_ok());
    }

    #[test]
    fn keys_under_reserved_prefixes_are_refused_and_no_fence_key_is_a_user_key() {
        let fence = crate::DEFAULT_FENCE_PREFIX;
        for key in [
            "verrou:tair:sem:{x}",
            "verrou:tair:",
            "verrou:fence:{x}",
            "verrou:fence:",
        ] {
            assert!(check_user_key(key, fence).is_err(), "{key}");
        }
        for key in ["x", "{x}", "verrou:fenc", "verrou:tai", "a}b"] {
            assert!(check_user_key(key, fence).is_ok(), "{key}");
            assert!(check_user_key(&fence_key(fence, key), fence).is_err(), "{key}");
        }
    }
}
