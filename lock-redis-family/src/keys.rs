//! Key names as Redis Cluster routes them.

/// The hash tag of `key` as Redis Cluster computes it: the bytes between the
/// first `{` and the first `}` after it, if that is not empty.
#[must_use]
pub fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let rest = &key[open + 1..];
    let close = rest.find('}')?;
    (close > 0).then(|| &rest[..close])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_follow_redis_rules() {
        assert_eq!(hash_tag("{user:7}:lock"), Some("user:7"));
        assert_eq!(hash_tag("a{b}c{d}"), Some("b"));
        assert_eq!(hash_tag("x{a}b{c}"), Some("a"));
        assert_eq!(hash_tag("{a}b"), Some("a"));
        assert_eq!(hash_tag("plain"), None);
        assert_eq!(hash_tag("x{}y"), None);
        assert_eq!(hash_tag("{}a"), None);
        assert_eq!(hash_tag("x{y"), None);
        assert_eq!(hash_tag("a}b{"), None);
    }
}
