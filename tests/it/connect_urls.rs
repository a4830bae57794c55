#![allow(clippy::panic)]
//! `connect` URLs through the dispatch table: each scheme reaches its own
//! crate's grammar, and every malformed URL gets an error that says what to
//! fix, with no password in it (each crate's own URL tests are beside its
//! config type).

use verrou::Error;
use verrou::connect::check_url;

/// The message of an `InvalidArgument`, or a panic naming what came instead.
fn invalid(url: &str) -> String {
    match check_url(url) {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("{url}: expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn every_scheme_is_dispatched_to_its_crate() {
    for url in [
        "memory://",
        "redis://127.0.0.1:7000",
        "rediss://h",
        "redis+cluster://a:1,b:2,c:3",
        "rediss+cluster://a:1,b:2",
        "tair://h:1/2",
        "tairs://h:1",
        "tair+cluster://a:1,b:2",
        "tairs+cluster://a:1",
        "redis+sentinel://s1,s2:26380,s3/mymaster/2?sentinel_password=x&replica_ack=1&replica_ack_timeout=100ms",
        "rediss+sentinel://u:p@s1/mymaster",
        "tair+sentinel://s1,s2/mymaster?sentinel_username=w&sentinel_password=x",
        "tairs+sentinel://s1/mymaster",
        "redlock://?quorum=2&node=redis://a:1&node=tair://b:2&node=redis://c:3%3Ffencing%3Dtrue",
        "postgres://app@db/app?schema=locks",
        "postgresql://app@db/app",
        "etcd://h1,h2:2380",
        "etcds://h?tls_ca=/ca.pem",
        "nats://h1,h2:4333?bucket=locks&replicas=3",
        "tls://h?tls_ca=/ca.pem",
    ] {
        check_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    }
}

#[test]
fn malformed_urls_get_errors_that_say_what_to_fix() {
    let cases: &[(&str, &str)] = &[
        ("127.0.0.1:7000", "start it with one of"),
        ("mysql://h", "unknown scheme `mysql://`"),
        ("redis://", "has no host: write redis://HOST[:PORT]"),
        ("redis://:pw@", "has no host"),
        ("redis+cluster://", "[,HOST[:PORT]…]"),
        ("redis://h:notaport", "a port is a number from 1 to 65535"),
        ("redis://h:0", "a port is a number"),
        ("redis://:7000", "no host name"),
        ("redis://a:1,b:2", "use redis+cluster://"),
        ("rediss://a:1,b:2", "use rediss+cluster://"),
        ("tair://a,b", "use tair+cluster://"),
        ("tair+cluster://a,,b", "empty host"),
        ("redis://[::1:7000", "close the bracket"),
        ("redis://h/x", "is not a number: write /N or db=N"),
        ("redis://h/1?db=2", "two databases"),
        ("redis+cluster://a,b/1", "only database 0"),
        ("redis+sentinel://s1", "/MASTER_NAME"),
        ("tair+sentinel://", "/MASTER_NAME (the sentinels)"),
        ("redis+sentinel://s1/m/x", "is not a number"),
        ("redis://h?sentinel_password=x", "are for redis+sentinel://"),
        (
            "redis://h?colour=blue",
            "unknown parameter `colour` for redis://: the parameters are connect_timeout",
        ),
        ("tair://h?timeout=1s", "unknown parameter `timeout` for tair://"),
        ("redis://h?connect_timeout=soon", "is not a duration"),
        ("redis://h?response_timeout=0s", "must be above zero"),
        ("redis://h?fencing=maybe", "write fencing=true or fencing=false"),
        (
            "redis://h?ack_connections=-1",
            "ack_connections must be a whole number from 1 to",
        ),
        ("redis://h?replica_ack=1", "needs replica_ack_timeout"),
        ("redis://h?replica_ack_timeout=1s", "without replica_ack=N"),
        ("redis://h?tls_ca=/ca.pem", "use rediss://"),
        ("tair+cluster://a?release_notifications=true", "one standalone server"),
        ("redis+cluster://a?release_notifications=true", "one standalone server"),
        ("redis://h#frag", "#fragment"),
        ("memory://host", "takes no host"),
        ("memory://?x=1", "unknown parameter `x` for memory://"),
        ("redlock://h:1?node=redis://a", "takes no host"),
        ("redlock://?node=redis://a", "at least 2 nodes"),
        ("redlock://", "at least 2 nodes"),
        (
            "redlock://?node=redis://a&node=redis://b&node=redis://c&node=redis://d&quorum=2",
            "not a majority",
        ),
        (
            "redlock://?node=redis://a&node=redis://b&quorum=1",
            "use a quorum from 2 to 2",
        ),
        ("redlock://?node=redis://a&node=redis://b&quorum=3", "above the 2 nodes"),
        (
            "redlock://?node=redis://a&node=redlock://?node=x",
            "cannot itself be redlock://",
        ),
        (
            "redlock://?node=redis://a&node=redis://b?x=1",
            "redlock node 2: unknown parameter `x`",
        ),
        (
            "redlock://?node=redis://a&node=redis://b&fencing=true",
            "percent-encode",
        ),
        ("redlock://?node=redis://a&node=nope://b", "unknown scheme `nope://`"),
        (
            "redlock://?node=redis://a&node=redis://b&drift_factor=x",
            "is not a number",
        ),
    ];
    for (url, expected) in cases {
        let message = invalid(url);
        assert!(message.contains(expected), "{url}: {message:?} lacks {expected:?}");
    }
}

#[test]
fn passwords_never_appear_in_errors() {
    for url in [
        "redis://user:hunter2@h?colour=blue",
        "redis://user:hunter2@h/x",
        "redis://:hunter2@a,b",
        "bogus://user:hunter2@h",
        "redis://user:hunter2@h#x",
        "redlock://?node=redis://u:hunter2@a&node=redis://u:hunter2@b:x",
        "etcd://u:hunter2@h?nope=1",
        "nats://u:hunter2@h?nope=1",
        "postgres://u:hunter2@h/db?nope=1",
        "redis+sentinel://u:hunter2@s/m/x",
        "redis+sentinel://s/m/x?sentinel_password=hunter2",
        "redis+sentinel://s/m?sentinel_password=hunter2&sentinel_password=hunter3",
        "tair+sentinel://s/m?colour=blue&sentinel_password=hunter2",
    ] {
        let message = invalid(url);
        assert!(!message.contains("hunter2"), "{url}: {message}");
    }
}
