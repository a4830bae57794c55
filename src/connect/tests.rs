#![allow(clippy::expect_used, clippy::panic)]

use super::url::{Family, Features, Target, parse};
use lock_core::Error;

const ALL: Features = Features {
    memory: true,
    redis_lua: true,
    redis_lua_tls: true,
    tair: true,
    tair_tls: true,
    redlock: true,
    postgres: true,
    etcd: true,
    etcd_tls: true,
};

const NONE: Features = Features {
    memory: false,
    redis_lua: false,
    redis_lua_tls: false,
    tair: false,
    tair_tls: false,
    redlock: false,
    postgres: false,
    etcd: false,
    etcd_tls: false,
};

/// The message of an `InvalidArgument`, or a panic naming what came instead.
fn invalid(url: &str) -> String {
    match parse(url, &ALL) {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("{url}: expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn every_scheme_parses() {
    assert!(matches!(parse("memory://", &ALL), Ok(Target::Memory)));
    for (url, family, tls, cluster, hosts) in [
        ("redis://127.0.0.1:7000", Family::RedisLua, false, false, 1),
        ("rediss://h", Family::RedisLua, true, false, 1),
        ("redis+cluster://a:1,b:2,c:3", Family::RedisLua, false, true, 3),
        ("rediss+cluster://a:1,b:2", Family::RedisLua, true, true, 2),
        ("tair://h:1/2", Family::Tair, false, false, 1),
        ("tairs://h:1", Family::Tair, true, false, 1),
        ("tair+cluster://a:1,b:2", Family::Tair, false, true, 2),
        ("tairs+cluster://a:1", Family::Tair, true, true, 1),
    ] {
        match parse(url, &ALL) {
            Ok(Target::Server(s)) => {
                assert_eq!(
                    (s.family, s.tls, s.cluster, s.hosts.len()),
                    (family, tls, cluster, hosts),
                    "{url}"
                );
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    match parse(
        "redlock://?quorum=2&node=redis://a:1&node=tair://b:2&node=redis://c:3%3Ffencing%3Dtrue",
        &ALL,
    ) {
        Ok(Target::Redlock(r)) => {
            assert_eq!(r.nodes.len(), 3);
            assert_eq!(r.quorum, Some(2));
            match &r.nodes[2] {
                Target::Server(s) => assert_eq!(s.options.fencing, Some(true)),
                other => panic!("{other:?}"),
            }
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn hosts_ports_and_databases_are_normalised() {
    let Ok(Target::Server(s)) = parse("redis://u:p@example.com/3?connect_timeout=250ms", &ALL) else {
        panic!("parse");
    };
    assert_eq!(s.node_urls(), vec!["redis://u:p@example.com:6379/3".to_owned()]);
    assert_eq!(s.options.connect_timeout, Some(std::time::Duration::from_millis(250)));
    let Ok(Target::Server(s)) = parse("tair+cluster://[::1]:7000,b", &ALL) else {
        panic!("parse");
    };
    assert_eq!(s.fred_url(), "redis-cluster://[::1]:7000?node=b:6379");
    let Ok(Target::Server(s)) = parse("tairs://h?db=4", &ALL) else {
        panic!("parse");
    };
    assert_eq!(s.fred_url(), "rediss://h:6379/4");
}

#[test]
fn malformed_urls_get_errors_that_say_what_to_fix() {
    let cases: &[(&str, &str)] = &[
        ("127.0.0.1:6379", "start it with one of"),
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
fn passwords_never_appear_in_errors_or_debug() {
    for url in [
        "redis://user:hunter2@h?colour=blue",
        "redis://user:hunter2@h/x",
        "redis://:hunter2@a,b",
        "bogus://user:hunter2@h",
        "redis://user:hunter2@h#x",
        "redlock://?node=redis://u:hunter2@a&node=redis://u:hunter2@b:x",
    ] {
        let message = invalid(url);
        assert!(!message.contains("hunter2"), "{url}: {message}");
    }
    let parsed = parse("redlock://?node=redis://u:hunter2@a&node=tairs://hunter2@b", &ALL).expect("parse");
    let debug = format!("{parsed:?}");
    assert!(!debug.contains("hunter2"), "{debug}");
    assert!(debug.contains("redis://u:***@a:6379"), "{debug}");
}

#[test]
fn a_disabled_feature_is_named() {
    for (url, feature) in [
        ("memory://", "`memory`"),
        ("redis://h", "`redis-lua`"),
        ("redis+cluster://h", "`redis-lua`"),
        ("rediss://h", "`redis-lua-tls`"),
        ("tair://h", "`tair`"),
        ("tairs+cluster://h", "`tair-tls`"),
        ("redlock://?node=redis://a&node=redis://b", "`redlock`"),
    ] {
        match parse(url, &NONE) {
            Err(e @ Error::Unsupported { .. }) => {
                let message = e.to_string();
                assert!(message.contains(feature), "{url}: {message}");
                assert!(message.contains("Cargo feature"), "{url}: {message}");
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    // A redlock whose nodes need a missing feature names that feature.
    let only_redlock = Features { redlock: true, ..NONE };
    match parse("redlock://?node=redis://a&node=tair://b", &only_redlock) {
        Err(e @ Error::Unsupported { .. }) => assert!(e.to_string().contains("`redis-lua`"), "{e}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn etcd_urls_parse() {
    match parse(
        "etcd://u:p%40ss@h1,h2:2380,[::1]?namespace=app/&response_timeout=2s",
        &ALL,
    ) {
        Ok(Target::Etcd(t)) => {
            assert_eq!(t.hosts, ["h1:2379", "h2:2380", "[::1]:2379"]);
            assert!(!t.tls);
            assert_eq!(t.user, Some(("u".to_owned(), "p@ss".to_owned())));
            assert_eq!(t.namespace.as_deref(), Some("app/"));
            assert_eq!(t.describe(), "etcd://u:***@h1:2379,h2:2380,[::1]:2379");
            assert!(!format!("{t:?}").contains("p@ss"), "no password in Debug");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(parse("etcds://h?tls_ca=/ca.pem", &ALL), Ok(Target::Etcd(t)) if t.tls));
    assert!(invalid("etcd://h?tls_ca=/ca.pem").contains("etcds://"));
    assert!(invalid("etcd://h?fencing=true").contains("response_timeout"));
    assert!(invalid("etcd://").contains("no host"));
    assert!(invalid("etcd://h/db").contains("no path"));
    assert!(invalid("etcd://:secret@h").contains("USER:PASSWORD"));
    assert!(invalid("etcd://h:0").contains("port"));
    assert!(matches!(parse("etcd://h", &NONE), Err(Error::Unsupported { what, .. }) if what.contains("`etcd`")));
    assert!(matches!(parse("etcds://h", &NONE), Err(Error::Unsupported { what, .. }) if what.contains("`etcd-tls`")));
}
