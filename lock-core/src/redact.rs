//! URLs in messages without their secrets (for backend authors and the
//! facade's `connect`, through [`crate::raw`]).

/// `url` with any user name, password and query string replaced by `***`,
/// for error messages and `Debug` output. Works on text that does not even
/// parse as a URL (everything up to the last `@` of the authority goes).
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => (&url[..i + 3], &url[i + 3..]),
        None => ("", url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let host = match authority.rfind('@') {
        Some(at) => format!("***@{}", &authority[at + 1..]),
        None => authority.to_owned(),
    };
    let tail = match tail.find(['?', '#']) {
        Some(q) => format!("{}?***", &tail[..q]),
        None => tail.to_owned(),
    };
    format!("{scheme}{host}{tail}")
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
}
