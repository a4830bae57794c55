//! Every numeric parameter of every backend at its limits: 0 where zero
//! makes no sense, its maximum + 1, `u64::MAX` and `NaN` give
//! `InvalidArgument` naming the parameter, never a panic, from
//! `check_url`, from `connect` and from the builders; `check_url` and
//! `connect` agree; a parameter given twice with different values is
//! refused. Nothing listens on the URLs' ports: every case fails before
//! connecting.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use verrou::{Error, LockOptions};

const MAX_TIMEOUT: Duration = LockOptions::MAX_TIMEOUT;

const MAX: &str = "18446744073709551615";

/// A duration one second above [`LockOptions::MAX_TIMEOUT`], as a URL value.
fn over_max_timeout() -> String {
    format!("{}s", MAX_TIMEOUT.as_secs() + 1)
}

/// `(base URL, parameter, bad values)` for every numeric parameter.
fn bad_urls() -> Vec<(String, &'static str)> {
    let over = over_max_timeout();
    let durations = ["0s".to_owned(), over.clone(), format!("{MAX}s"), "NaN".to_owned()];
    let mut cases: Vec<(String, &'static str)> = Vec::new();
    for base in [
        "redis://127.0.0.1:1",
        "redis+cluster://127.0.0.1:1",
        "tair://127.0.0.1:1",
        "tair+cluster://127.0.0.1:1",
    ] {
        for name in ["connect_timeout", "response_timeout"] {
            for d in &durations {
                cases.push((format!("{base}?{name}={d}"), name));
                // The largest arithmetic: with a replica acknowledgement.
                cases.push((format!("{base}?replica_ack=1&replica_ack_timeout=1s&{name}={d}"), name));
            }
        }
        for d in ["0s", "3601s", &format!("{MAX}s"), "NaN"] {
            cases.push((
                format!("{base}?replica_ack=1&replica_ack_timeout={d}"),
                "replica_ack_timeout",
            ));
        }
        for n in ["0", "4294967296", MAX, "NaN"] {
            cases.push((format!("{base}?replica_ack={n}&replica_ack_timeout=1s"), "replica_ack"));
        }
        for n in ["0", "1025", MAX, "NaN"] {
            cases.push((format!("{base}?ack_connections={n}"), "ack_connections"));
            cases.push((
                format!("{base}?replica_ack=1&replica_ack_timeout=1s&ack_connections={n}"),
                "ack_connections",
            ));
        }
    }
    for base in ["redis://127.0.0.1:1", "tair://127.0.0.1:1"] {
        for n in ["4294967296", MAX, "NaN"] {
            cases.push((format!("{base}?db={n}"), "db"));
        }
    }
    // Through Sentinel: the same family parameters, read by the same parser.
    for base in [
        "redis+sentinel://127.0.0.1:1/mymaster",
        "tair+sentinel://127.0.0.1:1/mymaster",
    ] {
        for name in ["connect_timeout", "response_timeout"] {
            for d in &durations {
                cases.push((format!("{base}?{name}={d}"), name));
            }
        }
        for n in ["0", "1025", MAX, "NaN"] {
            cases.push((format!("{base}?ack_connections={n}"), "ack_connections"));
        }
    }
    for base in ["nats://127.0.0.1:1", "tls://127.0.0.1:1"] {
        for name in ["connect_timeout", "response_timeout"] {
            for d in &durations {
                cases.push((format!("{base}?{name}={d}"), name));
            }
        }
        for n in ["0", "6", MAX, "NaN"] {
            cases.push((format!("{base}?replicas={n}"), "replicas"));
        }
        for d in ["0s", "1500ms", "86401s", &format!("{MAX}s"), "NaN"] {
            cases.push((format!("{base}?marker_ttl={d}"), "marker_ttl"));
        }
    }
    let nodes = "node=memory://&node=memory://&node=memory://";
    for d in &durations {
        cases.push((format!("redlock://?{nodes}&node_timeout={d}"), "node_timeout"));
    }
    for n in ["0", "4", MAX, "NaN"] {
        cases.push((format!("redlock://?{nodes}&quorum={n}"), "quorum"));
    }
    for x in ["0.5", "0.9", "-0.1", "1e400", "NaN", "inf"] {
        cases.push((format!("redlock://?{nodes}&drift_factor={x}"), "drift_factor"));
    }
    for d in &durations {
        cases.push((
            format!("postgres://app@127.0.0.1:1/db?response_timeout={d}"),
            "response_timeout",
        ));
        cases.push((format!("etcd://127.0.0.1:1?connect_timeout={d}"), "connect_timeout"));
        cases.push((format!("etcd://127.0.0.1:1?response_timeout={d}"), "response_timeout"));
    }
    for n in ["0", "1025", MAX, "NaN"] {
        cases.push((format!("postgres://app@127.0.0.1:1/db?pool_size={n}"), "pool_size"));
    }
    // libpq's own `connect_timeout` (whole seconds), read by tokio-postgres,
    // whose message quotes the option's name: without credentials in the URL,
    // as with them the redaction hides every quoted piece of the URL.
    for n in [MAX, "NaN"] {
        cases.push((
            format!("postgres://127.0.0.1:1/db?connect_timeout={n}"),
            "connect_timeout",
        ));
    }
    cases
}

/// Conflicting repeats: the same parameter twice with different values.
fn repeated_urls() -> Vec<(String, &'static str)> {
    let mut cases: Vec<(String, &'static str)> = Vec::new();
    for base in ["redis://127.0.0.1:1", "tair://127.0.0.1:1"] {
        cases.push((format!("{base}?fencing=true&fencing=false"), "fencing"));
        cases.push((
            format!("{base}?connect_timeout=1s&connect_timeout=2s"),
            "connect_timeout",
        ));
        cases.push((
            format!("{base}?response_timeout=1s&response_timeout=2s"),
            "response_timeout",
        ));
        cases.push((
            format!("{base}?release_notifications=true&release_notifications=false"),
            "release_notifications",
        ));
        cases.push((format!("{base}?ack_connections=1&ack_connections=2"), "ack_connections"));
        cases.push((
            format!("{base}?replica_ack=1&replica_ack=2&replica_ack_timeout=1s"),
            "replica_ack",
        ));
    }
    let nodes = "node=memory://&node=memory://&node=memory://";
    cases.push((format!("redlock://?{nodes}&quorum=2&quorum=3"), "quorum"));
    cases.push((
        format!("redlock://?{nodes}&drift_factor=0.01&drift_factor=0.02"),
        "drift_factor",
    ));
    cases.push((
        format!("redlock://?{nodes}&node_timeout=1s&node_timeout=2s"),
        "node_timeout",
    ));
    cases.push((
        "postgres://app@127.0.0.1:1/db?pool_size=1&pool_size=2".to_owned(),
        "pool_size",
    ));
    cases.push(("postgres://app@127.0.0.1:1/db?schema=a&schema=b".to_owned(), "schema"));
    cases.push((
        "redis+sentinel://127.0.0.1:1/mymaster?fencing=true&fencing=false".to_owned(),
        "fencing",
    ));
    cases.push(("nats://127.0.0.1:1?replicas=1&replicas=3".to_owned(), "replicas"));
    cases.push(("nats://127.0.0.1:1?bucket=a&bucket=b".to_owned(), "bucket"));
    cases.push(("etcd://127.0.0.1:1?namespace=a/&namespace=b/".to_owned(), "namespace"));
    cases.push((
        "etcd://127.0.0.1:1?response_timeout=1s&response_timeout=2s".to_owned(),
        "response_timeout",
    ));
    cases
}

fn assert_invalid(what: &str, name: &str, r: Result<(), Error>) {
    match r {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(name), "{what}: the message does not name `{name}`: {m}"),
        other => panic!("{what}: expected InvalidArgument naming `{name}`, got {other:?}"),
    }
}

#[tokio::test]
async fn absurd_numbers_are_refused_by_check_url_and_connect_alike() {
    for (url, name) in bad_urls() {
        assert_invalid(&format!("check_url({url})"), name, verrou::connect::check_url(&url));
        let connected = tokio::time::timeout(Duration::from_secs(20), verrou::connect(&url))
            .await
            .unwrap_or_else(|_| panic!("connect({url}) hangs"));
        assert_invalid(&format!("connect({url})"), name, connected.map(drop));
    }
}

#[tokio::test]
async fn a_parameter_given_twice_with_different_values_is_refused() {
    for (url, name) in repeated_urls() {
        assert_invalid(&format!("check_url({url})"), name, verrou::connect::check_url(&url));
        let connected = tokio::time::timeout(Duration::from_secs(20), verrou::connect(&url))
            .await
            .unwrap_or_else(|_| panic!("connect({url}) hangs"));
        assert_invalid(&format!("connect({url})"), name, connected.map(drop));
    }
    // The same value twice says the same thing: accepted.
    for url in [
        "redis://127.0.0.1:1?fencing=true&fencing=true",
        "redlock://?node=memory://&node=memory://&quorum=2&quorum=2",
    ] {
        verrou::connect::check_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    }
}

/// The durations a builder must refuse: zero, the maximum + 1, the largest.
fn bad_durations() -> [Duration; 3] {
    [Duration::ZERO, MAX_TIMEOUT + Duration::from_secs(1), Duration::MAX]
}

fn ack() -> verrou::ReplicaAck {
    verrou::ReplicaAck::new(1, Duration::from_secs(1))
}

#[tokio::test]
async fn the_redis_lua_builder_refuses_absurd_numbers() {
    use verrou::redis_lua::RedisLuaBuilder;
    let url = "redis://127.0.0.1:1";
    let cluster = || RedisLuaBuilder::cluster(["redis://127.0.0.1:1"]);
    for d in bad_durations() {
        for (name, b) in [
            ("connect_timeout", RedisLuaBuilder::url(url).connect_timeout(d)),
            (
                "connect_timeout",
                RedisLuaBuilder::url(url).connect_timeout(d).replica_ack(ack()),
            ),
            ("connect_timeout", cluster().connect_timeout(d).replica_ack(ack())),
            ("response_timeout", RedisLuaBuilder::url(url).response_timeout(d)),
            (
                "response_timeout",
                RedisLuaBuilder::url(url).response_timeout(d).replica_ack(ack()),
            ),
            ("response_timeout", cluster().response_timeout(d).replica_ack(ack())),
        ] {
            assert_invalid(&format!("redis-lua {name}={d:?}"), name, b.build().await.map(drop));
        }
    }
    for n in [0, 1025, usize::MAX] {
        let b = RedisLuaBuilder::url(url).replica_ack(ack()).ack_connections(n);
        assert_invalid(
            &format!("redis-lua ack_connections={n}"),
            "ack_connections",
            b.build().await.map(drop),
        );
        let b = cluster().replica_ack(ack()).ack_connections(n);
        assert_invalid(
            &format!("redis-lua cluster ack_connections={n}"),
            "ack_connections",
            b.build().await.map(drop),
        );
    }
}

#[tokio::test]
async fn the_tair_builder_refuses_absurd_numbers() {
    use verrou::tair::TairBuilder;
    let url = "redis://127.0.0.1:1";
    for d in bad_durations() {
        for (name, b) in [
            ("connect_timeout", TairBuilder::url(url).connect_timeout(d)),
            ("response_timeout", TairBuilder::url(url).response_timeout(d)),
            (
                "response_timeout",
                TairBuilder::url(url).response_timeout(d).replica_ack(ack()),
            ),
        ] {
            assert_invalid(&format!("tair {name}={d:?}"), name, b.build().await.map(drop));
        }
    }
    for n in [0, 1025, usize::MAX] {
        let b = TairBuilder::url(url).replica_ack(ack()).ack_connections(n);
        assert_invalid(
            &format!("tair ack_connections={n}"),
            "ack_connections",
            b.build().await.map(drop),
        );
    }
}

#[tokio::test]
async fn the_redlock_options_refuse_absurd_numbers() {
    use verrou::redlock::RedlockOptions;
    for d in bad_durations() {
        let o = RedlockOptions::default().node_timeout(d);
        assert_invalid(
            &format!("redlock node_timeout={d:?}"),
            "node_timeout",
            o.validate(3).map(drop),
        );
    }
    for x in [0.5, 0.9, -0.1, f64::NAN, f64::INFINITY] {
        let o = RedlockOptions::default().drift_factor(x);
        assert_invalid(
            &format!("redlock drift_factor={x}"),
            "drift_factor",
            o.validate(3).map(drop),
        );
    }
    for q in [0, 4, usize::MAX] {
        let o = RedlockOptions::default().quorum(q);
        assert_invalid(&format!("redlock quorum={q}"), "quorum", o.validate(3).map(drop));
    }
}

#[tokio::test]
async fn the_postgres_builder_refuses_absurd_numbers() {
    use verrou::postgres::PostgresBuilder;
    let url = "postgres://app@127.0.0.1:1/db";
    for d in bad_durations() {
        for (name, b) in [
            (
                "connect_timeout",
                PostgresBuilder::url(url).expect("url").connect_timeout(d),
            ),
            (
                "response_timeout",
                PostgresBuilder::url(url).expect("url").response_timeout(d),
            ),
        ] {
            assert_invalid(&format!("postgres {name}={d:?}"), name, b.build().await.map(drop));
        }
    }
    for n in [0, 1025, usize::MAX] {
        let b = PostgresBuilder::url(url).expect("url").pool_size(n);
        assert_invalid(
            &format!("postgres pool_size={n}"),
            "pool_size",
            b.build().await.map(drop),
        );
    }
}

#[tokio::test]
async fn the_etcd_builder_refuses_absurd_numbers() {
    use verrou::etcd::EtcdBuilder;
    let endpoints = ["http://127.0.0.1:1"];
    for d in bad_durations() {
        for (name, b) in [
            ("connect_timeout", EtcdBuilder::new(endpoints).connect_timeout(d)),
            ("response_timeout", EtcdBuilder::new(endpoints).response_timeout(d)),
        ] {
            assert_invalid(&format!("etcd {name}={d:?}"), name, b.build().await.map(drop));
        }
    }
}

#[tokio::test]
async fn the_nats_builder_refuses_absurd_numbers() {
    use verrou::nats::NatsBackend;
    let url = "nats://127.0.0.1:1";
    for d in bad_durations() {
        for (name, b) in [
            (
                "connect_timeout",
                NatsBackend::builder(url).expect("url").connect_timeout(d),
            ),
            (
                "response_timeout",
                NatsBackend::builder(url).expect("url").response_timeout(d),
            ),
        ] {
            assert_invalid(&format!("nats {name}={d:?}"), name, b.build().await.map(drop));
        }
    }
    for n in [0, 6, usize::MAX] {
        let b = NatsBackend::builder(url).expect("url").replicas(n);
        assert_invalid(&format!("nats replicas={n}"), "replicas", b.build().await.map(drop));
    }
}
