//! `verrou::connect` against live servers: every scheme, a 3-master cluster
//! (Lua and Tair), and a Redlock URL mixing Lua and Tair nodes.
#![cfg(all(feature = "redis-lua", feature = "tair", feature = "redlock", feature = "serde"))]
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_testkit::server::{Instances, RedisCluster, RedisServer};
use verrou::{Backend, CasOutcome, Error, LockOptions, VersionedStore};

fn hostport(url: &str) -> &str {
    url.trim_start_matches("redis://")
}

/// Lock, renew through the manager, release; and a versioned round trip when
/// the backend has a store.
/// Whether `server` has `key`, read until it does (up to 100 reads 20 ms
/// apart: a Redlock grant past the quorum lands after the acquire returns).
async fn holds_key(server: &RedisServer, key: &str) -> bool {
    for _ in 0..100 {
        if server.cmd(&["EXISTS", key]).await.expect("exists").as_int() == Some(1) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

async fn exercise(backend: &Backend, key: &str) {
    let locks = backend
        .manager(LockOptions::with_ttl(Duration::from_millis(500)).acquire_timeout(Duration::from_secs(5)))
        .expect("manager");
    let guard = locks.lock(key).await.expect("lock");
    assert!(
        locks.try_lock(key).await.expect("try_lock").is_none(),
        "{key} held twice"
    );
    guard.release().await.expect("release");
    assert!(
        locks.try_lock(key).await.expect("try_lock").is_some(),
        "{key} not freed"
    );
    if let Some(store) = backend.store() {
        let vkey = format!("{key}:value");
        let created = store.create(&vkey, b"1", verrou::Expiry::Keep).await.expect("create");
        let verrou::CreateOutcome::Created { version } = created else {
            panic!("{vkey}: {created:?}");
        };
        let cas = store
            .compare_and_set(&vkey, version, b"2", verrou::Expiry::Keep)
            .await
            .expect("cas");
        assert!(matches!(cas, CasOutcome::Written { .. }), "{cas:?}");
        assert_eq!(store.get(&vkey).await.expect("get").expect("present").value, b"2");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_servers_connect_by_scheme_with_their_parameters() {
    let redis = RedisServer::start().await.expect("redis-server");
    let tair = RedisServer::builder().tair_module().start().await.expect("tair");
    let params = "connect_timeout=2s&response_timeout=1s&fencing=true&ack_connections=2";
    for url in [
        format!("redis://{}?{params}&release_notifications=true", hostport(&redis.url())),
        format!("redis://{}/3?{params}", hostport(&redis.url())),
        format!("tair://{}?{params}", hostport(&tair.url())),
        format!("tair://{}?db=2&{params}", hostport(&tair.url())),
    ] {
        let backend = verrou::connect(&url).await.expect(&url);
        let caps = backend.locks().capabilities();
        assert!(caps.fencing_tokens, "{url}: fencing=true did not reach the builder");
        exercise(&backend, &format!("single:{url}")).await;
        let locks = backend.manager(LockOptions::default()).expect("manager");
        let guard = locks.lock("fenced").await.expect("lock");
        assert!(guard.fencing_token().is_some(), "{url}: no fencing token");
        guard.release().await.expect("release");
    }
    // The database in the path is the one written.
    let backend = verrou::connect(&format!("redis://{}/3", hostport(&redis.url())))
        .await
        .expect("db 3");
    let store = backend.store().expect("store");
    store
        .create("in-db-3", b"x", verrou::Expiry::Keep)
        .await
        .expect("create");
    let in_db0 = redis.cmd(&["EXISTS", "in-db-3"]).await.expect("exists");
    assert_eq!(in_db0.as_int(), Some(0), "the key landed in db 0");
    // Parameters off by default really are off.
    let plain = verrou::connect(&format!(
        "redis://{}?release_notifications=false",
        hostport(&redis.url())
    ))
    .await
    .expect("plain");
    let caps = plain.locks().capabilities();
    assert!(!caps.fencing_tokens && !caps.release_notifications, "{caps:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_connect_from_a_host_list() {
    let redis = RedisCluster::start(3, 0, RedisServer::builder())
        .await
        .expect("redis cluster");
    let hosts: Vec<String> = redis.urls().iter().map(|u| hostport(u).to_owned()).collect();
    let backend = verrou::connect(&format!("redis+cluster://{}?fencing=true", hosts.join(",")))
        .await
        .expect("redis+cluster");
    // Keys on every master: enough names to cover the three slot ranges.
    for i in 0..6 {
        exercise(&backend, &format!("cluster:{i}")).await;
    }
    drop(redis);
    let tair = RedisCluster::start(3, 0, RedisServer::builder().tair_module())
        .await
        .expect("tair cluster");
    let hosts: Vec<String> = tair.urls().iter().map(|u| hostport(u).to_owned()).collect();
    // One seed is enough; the rest are found by the client.
    let urls = [
        format!("tair+cluster://{}", hosts[0]),
        format!("tair+cluster://{}", hosts.join(",")),
    ];
    for (n, url) in urls.iter().enumerate() {
        let backend = verrou::connect(url).await.expect(url);
        for i in 0..6 {
            exercise(&backend, &format!("tcluster{n}:{i}")).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_mixes_lua_and_tair_nodes() {
    let lua = Instances::start(2, RedisServer::builder()).await.expect("lua nodes");
    let tair = RedisServer::builder().tair_module().start().await.expect("tair node");
    let url = format!(
        "redlock://?quorum=2&node_timeout=200ms&node={}&node={}&node=tair://{}%3Fresponse_timeout%3D500ms",
        lua.urls()[0],
        lua.urls()[1],
        hostport(&tair.url())
    );
    let backend = verrou::connect(&url).await.expect("redlock");
    assert!(backend.store().is_none(), "redlock has no versioned store");
    assert_eq!(backend.locks().capabilities().name, "redlock");
    exercise(&backend, "mixed").await;
    // The lock really sits on the Tair node too. The acquire returns at the
    // quorum (2 of 3); the third node's grant lands in the background (kept,
    // not given back), so each node is read until it shows the key.
    let locks = backend.manager(LockOptions::default()).expect("manager");
    let guard = locks.lock("mixed-check").await.expect("lock");
    assert!(holds_key(&tair, "mixed-check").await, "the Tair node holds the lock");
    assert!(
        holds_key(&lua.servers()[0], "mixed-check").await,
        "the first Lua node holds the lock"
    );
    guard.release().await.expect("release");
    // A minority quorum is refused before anything connects.
    let minority = format!(
        "redlock://?quorum=2&node={}&node={}&node=redis://127.0.0.1:1&node=redis://127.0.0.1:2",
        lua.urls()[0],
        lua.urls()[1]
    );
    match verrou::connect(&minority).await {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("not a majority"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_work_and_never_show() {
    let server = RedisServer::builder()
        .tair_module()
        .args(["--requirepass", "s3cret-pw"])
        .start()
        .await
        .expect("server");
    let port = server.port();
    for scheme in ["redis", "tair"] {
        let good = verrou::connect(&format!("{scheme}://:s3cret-pw@127.0.0.1:{port}"))
            .await
            .expect(scheme);
        assert!(!format!("{good:?}").contains("s3cret-pw"), "{good:?}");
        exercise(&good, &format!("auth:{scheme}")).await;
        let err = verrou::connect(&format!("{scheme}://:wrong-pw-xyz@127.0.0.1:{port}?connect_timeout=2s"))
            .await
            .expect_err("wrong password accepted");
        let mut text = format!("{err} / {err:?}");
        let mut source = std::error::Error::source(&err);
        while let Some(s) = source {
            text.push_str(&format!(" / {s}"));
            source = s.source();
        }
        assert!(
            !text.contains("wrong-pw-xyz"),
            "{scheme}: password in the error: {text}"
        );
        assert!(
            text.contains("***"),
            "{scheme}: the error does not name the (redacted) URL: {text}"
        );
    }
}

#[tokio::test]
async fn a_config_struct_maps_to_the_same_parameters() {
    let config: verrou::ConnectConfig =
        serde_json::from_str(r#"{"url": "redis://127.0.0.1:1", "connect_timeout": "100ms", "fencing": true}"#)
            .expect("config");
    assert_eq!(
        config.to_url(),
        "redis://127.0.0.1:1?connect_timeout=100ms&fencing=true"
    );
    let unknown: verrou::ConnectConfig =
        serde_json::from_str(r#"{"url": "tair://h", "timeout": "1s"}"#).expect("config");
    match unknown.connect().await {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("unknown parameter `timeout`"), "{m}"),
        other => panic!("{other:?}"),
    }
    let nodes: verrou::ConnectConfig =
        serde_json::from_str(r#"{"url": "redlock://", "quorum": 2, "node": ["memory://", "memory://", "memory://"]}"#)
            .expect("config");
    let backend = nodes.connect().await.expect("redlock over memory");
    exercise(&backend, "config").await;
    assert!(!format!("{:?}", verrou::ConnectConfig::new("redis://:pw@h")).contains("pw@"));
}

/// Through Redis Sentinel: `redis+sentinel://` and `tair+sentinel://` reach
/// the primary the sentinels name (the lock's key is on it), with the
/// standalone URL's parameters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_urls_reach_the_primary() {
    use lock_testkit::server::SentinelGroup;
    let group = SentinelGroup::start(RedisServer::builder().tair_module())
        .await
        .expect("a Sentinel group with the Tair module");
    let primary = group.primary().await.expect("the primary");
    let params = "fencing=true&replica_ack=1&replica_ack_timeout=2s";
    for scheme in ["redis+sentinel", "tair+sentinel"] {
        let url = format!("{}/1?{params}", group.url(scheme));
        let backend = verrou::connect(&url).await.expect(&url);
        assert!(backend.locks().capabilities().replica_ack, "{url}");
        exercise(&backend, &format!("{scheme}-key")).await;
        let locks = backend.manager(LockOptions::default()).expect("manager");
        let guard = locks.lock("held-on-primary").await.expect("lock");
        let mut client = primary.client().await.expect("a connection to the primary");
        client.cmd(&["SELECT", "1"]).await.expect("SELECT");
        let exists = client.cmd(&["EXISTS", "held-on-primary"]).await.expect("EXISTS");
        assert_eq!(exists.as_int(), Some(1), "{url}");
        guard.release().await.expect("release");
    }
}
