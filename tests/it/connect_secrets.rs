//! No byte of a URL's password reaches a message, however malformed the URL:
//! passwords holding an unencoded `/`, `?`, `#` or `@` (each ends a URL's
//! authority, so a parser cuts the password into a "host", a "path" or a
//! "parameter") or percent-escapes, in every scheme, through `check_url`,
//! `connect`, `ConnectConfig`'s `Debug` and the errors' sources.
#![cfg(all(
    feature = "redis-lua",
    feature = "tair",
    feature = "redlock",
    feature = "postgres",
    feature = "etcd",
    feature = "serde"
))]
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

/// The password's two halves: neither may appear in any output.
const HALVES: [&str; 2] = ["Sq7Kw", "Vx4Ym"];

/// Passwords as a user might paste them, delimiters unencoded.
fn passwords() -> Vec<String> {
    ["/", "?", "#", "@", "%2F", "%40", "%3F%23", "/x?y#z@", ":"]
        .iter()
        .map(|mid| format!("{}{mid}{}", HALVES[0], HALVES[1]))
        .collect()
}

/// The URLs to try for one password: every scheme, with a port nothing
/// listens on and short timeouts (a URL that parses fails to connect).
fn urls(password: &str) -> Vec<String> {
    let mut urls = Vec::new();
    for scheme in ["redis", "rediss", "redis+cluster", "tair", "tairs", "tair+cluster"] {
        urls.push(format!("{scheme}://app:{password}@127.0.0.1:1/0?connect_timeout=200ms"));
        urls.push(format!("{scheme}://:{password}@127.0.0.1:1?connect_timeout=200ms"));
    }
    urls.push(format!("postgres://app:{password}@127.0.0.1:1/db?connect_timeout=1"));
    urls.push(format!("postgresql://app:{password}@127.0.0.1:1/db"));
    for scheme in ["etcd", "etcds"] {
        urls.push(format!("{scheme}://app:{password}@127.0.0.1:1?connect_timeout=200ms"));
    }
    urls.push(format!(
        "redlock://?node=redis://app:{password}@127.0.0.1:1&node=redis://127.0.0.1:2&node=redis://127.0.0.1:3"
    ));
    urls
}

/// An error's text, `Debug` and every source.
fn all_text(err: &verrou::Error) -> String {
    let mut text = format!("{err} / {err:?}");
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        text.push_str(&format!(" / {s} / {s:?}"));
        source = s.source();
    }
    text
}

fn assert_hidden(url: &str, text: &str) {
    for half in HALVES {
        assert!(
            !text.contains(half),
            "a piece of the password of {url:?} is shown: {text}"
        );
    }
}

#[tokio::test]
async fn a_password_with_delimiters_is_never_shown() {
    for password in passwords() {
        for url in urls(&password) {
            if let Err(e) = verrou::connect::check_url(&url) {
                assert_hidden(&url, &all_text(&e));
            }
            assert_hidden(&url, &format!("{:?}", verrou::ConnectConfig::new(url.clone())));
            match tokio::time::timeout(Duration::from_secs(20), verrou::connect(&url)).await {
                Ok(Err(e)) => assert_hidden(&url, &all_text(&e)),
                Ok(Ok(backend)) => panic!("{url:?} connected to nothing: {}", backend.description()),
                Err(_) => panic!("connect({url:?}) hung"),
            }
        }
    }
}

#[test]
fn the_redaction_never_keeps_the_user_info() {
    for password in passwords() {
        for url in urls(&password) {
            assert_hidden(&url, &verrou::raw::redact_url(&url));
        }
    }
}
