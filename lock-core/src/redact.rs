//! URLs in messages without their secrets (for backend authors and the
//! facade's `connect`, through [`crate::raw`]).

/// `url` with any user name, password and query string replaced by `***`,
/// for error messages and `Debug` output.
///
/// Works on text that does not even parse as a URL: everything between the
/// scheme's `://` and the *last* `@` of the whole text goes, so a password
/// holding an unencoded `/`, `?`, `#` or `@` is never split into a "host" or
/// a "path" that would be shown (a `@` further on, in a query value, only
/// hides more); then everything from the first `?` or `#` after that point
/// goes. The output does not depend on any byte before that `@` (the fuzz
/// target `redact_url` checks this over arbitrary input).
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => (&url[..i + 3], &url[i + 3..]),
        None => ("", url),
    };
    let (hidden, visible) = match rest.rfind('@') {
        Some(at) => ("***@", &rest[at + 1..]),
        None => ("", rest),
    };
    let visible = match visible.find(['?', '#']) {
        Some(q) => format!("{}?***", &visible[..q]),
        None => visible.to_owned(),
    };
    format!("{scheme}{hidden}{visible}")
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
        assert_eq!(redact_url("postgres://app:pw@db/x#frag"), "postgres://***@db/x?***");
        assert_eq!(redact_url("not a url secret@x"), "***@x");
    }

    /// A password holding an unencoded `/`, `?` or `#` (each ends a URL's
    /// authority) is hidden whole, not cut into a host and a path.
    #[test]
    fn unencoded_delimiters_in_a_password_are_hidden_too() {
        for password in [
            "s3cr/etPW",
            "s3cr?etPW",
            "s3cr#etPW",
            "s3cr@etPW",
            "s3cr%2FetPW",
            "a/b?c#d@e",
        ] {
            for scheme in ["redis", "postgres", "etcd", "tair+cluster"] {
                let url = format!("{scheme}://app:{password}@db.example:5432/x?y=1");
                let shown = redact_url(&url);
                assert_eq!(shown, format!("{scheme}://***@db.example:5432/x?***"), "{url}");
                for piece in ["s3cr", "etPW", "a/b"] {
                    assert!(!shown.contains(piece), "{url} -> {shown}");
                }
            }
        }
    }
}
