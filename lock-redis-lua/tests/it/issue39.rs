//! Issue 39, safety findings on the Lua backend: election terms that went
//! backwards after a restart without data.

#![allow(clippy::expect_used, clippy::panic)] // test helpers

use std::time::Duration;

use lock_core::raw::ElectionBackend;

use lock_core::AcquireOutcome;
use lock_core::{LockToken, Result};
use lock_redis_lua::{RedisLuaBackend, RedisLuaBuilder};
use lock_testkit::server::RedisServer;

/// Generous bound for anything a loaded machine should finish well within.
const PATIENCE: Duration = Duration::from_secs(20);

async fn lead(backend: &RedisLuaBackend, name: &str) -> Result<u64> {
    let token = LockToken::generate()?;
    match backend
        .try_lead(name, &token, b"node", Duration::from_millis(500))
        .await?
    {
        AcquireOutcome::Acquired(lease) => {
            backend.resign(name, &token).await?;
            Ok(lease.fencing_token.expect("a term").0)
        }
        other => panic!("{name} should have no leader, got {other:?}"),
    }
}

/// Issue 39 finding 1: the term counter restarted at 1 when the server
/// lost its data, so a stalled old leader's term beat the new one's.
#[tokio::test]
async fn election_terms_keep_increasing_after_a_restart_without_data() {
    let server = RedisServer::builder().start().await.expect("start redis-server");
    let backend = RedisLuaBuilder::url(server.url()).build().await.expect("connect");
    let mut terms = Vec::new();
    for _ in 0..3 {
        terms.push(lead(&backend, "e").await.expect("campaign"));
    }
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "not increasing: {terms:?}");
    let highest = *terms.iter().max().expect("three terms");
    server.restart_empty().await.expect("restart without data");
    let give_up = tokio::time::Instant::now() + PATIENCE;
    let next = loop {
        match lead(&backend, "e").await {
            Ok(term) => break term,
            Err(e) if tokio::time::Instant::now() < give_up => {
                eprintln!("campaign after restart failed (reconnecting): {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("no campaign after the restart: {e}"),
        }
    };
    assert!(
        next > highest,
        "the first term after a restart without data ({next}) is not above the earlier ones {terms:?}"
    );
}

/// Issue 39 finding 6: on a cluster, a multi-key set whose fence counters
/// cannot share its slot (a key with `}` and no hash tag) reached the
/// server, which answered CROSSSLOT (and `lock_all` retried it until its
/// timeout); now `InvalidArgument` before anything is sent, as the plain
/// fenced mutex does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_key_set_whose_fence_keys_leave_its_slot_is_refused_on_a_cluster() {
    use lock_core::raw::MultiLockBackend;
    let cluster = lock_testkit::server::RedisCluster::start(3, 0, RedisServer::builder())
        .await
        .expect("start a 3-master cluster");
    let urls: Vec<String> = cluster.masters().iter().map(|m| m.url()).collect();
    let backend = RedisLuaBuilder::cluster(urls)
        .build()
        .await
        .expect("connect to the cluster");
    for set in [["a}b"], ["x{}y"]] {
        let token = LockToken::generate().expect("token");
        let taken = backend.try_acquire_all(&set, &token, Duration::from_secs(5)).await;
        assert!(
            matches!(taken, Err(lock_core::Error::InvalidArgument(_))),
            "{set:?}: {taken:?}"
        );
    }
}

/// Issue 39 finding 5: a user whose ACL allows only its own keys could take
/// a lock but never release it (the release script with notifications
/// names helper keys under `verrou:lua:`). Now every configuration either
/// releases what it acquires, or is refused at build with
/// `InvalidArgument` naming the missing permission.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_can_acquire_can_release_or_the_build_is_refused() {
    use lock_core::LockBackend;
    use lock_core::ReleaseOutcome;
    let server = RedisServer::builder().start().await.expect("start redis-server");
    let reply = server
        .cmd(&["ACL", "SETUSER", "u", "on", ">pw", "~app:*", "&*", "+@all"])
        .await
        .expect("ACL SETUSER");
    assert!(reply.is_ok(), "{reply:?}");
    let url = format!("redis://u:pw@127.0.0.1:{}", server.port());
    let configurations = [
        ("defaults", RedisLuaBuilder::url(url.clone())),
        (
            "notifications",
            RedisLuaBuilder::url(url.clone()).release_notifications(true),
        ),
        (
            "no notifications",
            RedisLuaBuilder::url(url.clone()).release_notifications(false),
        ),
        ("fencing", RedisLuaBuilder::url(url.clone()).fencing(true)),
    ];
    let mut released = 0;
    for (what, builder) in configurations {
        let backend = match builder.build().await {
            Ok(backend) => backend,
            Err(lock_core::Error::InvalidArgument(message)) => {
                assert!(message.contains("verrou:lua:"), "{what}: {message}");
                continue;
            }
            Err(e) => panic!("{what}: build failed with {e:?}"),
        };
        let token = LockToken::generate().expect("token");
        let key = "app:lock";
        let Ok(AcquireOutcome::Acquired(_)) = backend.try_acquire(key, &token, Duration::from_secs(30)).await else {
            continue; // cannot acquire: nothing to release
        };
        let outcome = backend.release(key, &token).await;
        assert!(matches!(outcome, Ok(ReleaseOutcome::Released)), "{what}: {outcome:?}");
        released += 1;
    }
    assert!(released >= 1, "without notifications the user locks and releases");
}

/// Review of issue 39, finding 3: the build-time ACL probe refused users
/// who can release and accepted some who cannot. Now the release falls back
/// to the plain release when the server refuses the helper keys, so every
/// user who can acquire releases: with only `~app:*`, with `~app:*` plus
/// `~verrou:lua:*`, and with write-only helper keys (`%W~verrou:lua:*`,
/// where EVAL's declared keys need read as well).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acl_user_who_acquires_builds_and_releases() {
    use lock_core::LockBackend;
    use lock_core::ReleaseOutcome;
    let server = RedisServer::builder().start().await.expect("start redis-server");
    let users: [(&str, &[&str]); 3] = [
        ("own", &["~app:*"]),
        ("helpers", &["~app:*", "~verrou:lua:*"]),
        ("write_only_helpers", &["~app:*", "%W~verrou:lua:*"]),
    ];
    for (user, patterns) in users {
        let mut acl = vec!["ACL", "SETUSER", user, "on", ">pw", "&*", "+@all"];
        acl.extend_from_slice(patterns);
        let reply = server.cmd(&acl).await.expect("ACL SETUSER");
        assert!(reply.is_ok(), "{reply:?}");
        let url = format!("redis://{user}:pw@127.0.0.1:{}", server.port());
        for notifications in [true, false] {
            let what = format!("{user}, notifications {notifications}");
            let backend = RedisLuaBuilder::url(url.clone())
                .release_notifications(notifications)
                .build()
                .await
                .unwrap_or_else(|e| panic!("{what}: build failed with {e:?}"));
            let token = LockToken::generate().expect("token");
            let key = "app:lock";
            let acquired = backend.try_acquire(key, &token, Duration::from_secs(30)).await;
            assert!(
                matches!(acquired, Ok(AcquireOutcome::Acquired(_))),
                "{what}: {acquired:?}"
            );
            let outcome = backend.release(key, &token).await;
            assert!(matches!(outcome, Ok(ReleaseOutcome::Released)), "{what}: {outcome:?}");
            let again = backend.try_acquire(key, &token, Duration::from_secs(30)).await;
            assert!(
                matches!(again, Ok(AcquireOutcome::Acquired(_))),
                "{what}: the key is free: {again:?}"
            );
            let outcome = backend.release(key, &token).await;
            assert!(matches!(outcome, Ok(ReleaseOutcome::Released)), "{what}: {outcome:?}");
        }
    }
}

/// Issue 39 finding 2, its sibling on the Lua backend: under `ReplicaAck`
/// a read-write, election or multi-key grant went out on a dedicated WAIT
/// connection, queued behind
/// another grant's `WAIT`; when its caller gave up, the clean-up release
/// went out on the shared connection, ran first (finding nothing), and the
/// grant then left a holder nobody owns for its whole TTL. Now the clean-up
/// follows the grant on its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_grant_given_up_under_replica_ack_leaves_no_ghost() {
    use lock_core::raw::{MultiLockBackend, RwLockBackend};
    use lock_core::{ReplicaAck, RwMode};
    use lock_testkit::server::ReplicatedPair;

    let pair = ReplicatedPair::start(RedisServer::builder())
        .await
        .expect("start a primary and a replica");
    let primary = pair.primary();
    let backend = RedisLuaBuilder::url(primary.url())
        .replica_ack(ReplicaAck::new(1, Duration::from_secs(2)))
        .ack_connections(1)
        .build()
        .await
        .expect("connect");
    let ttl = Duration::from_secs(30);
    pair.replica().pause().expect("pause the replica");
    // A grant whose WAIT holds the one WAIT connection for 2 s.
    let blocker = {
        let backend = backend.clone();
        tokio::spawn(async move {
            let token = LockToken::generate().expect("token");
            backend.try_lead("blocker", &token, b"a", ttl).await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Grants queued behind it, given up by their callers (as a manager's
    // acquire timeout drops them), then cleaned up as the manager does.
    let give_up = Duration::from_millis(100);
    let (rw, lead, multi) = (
        LockToken::generate().expect("token"),
        LockToken::generate().expect("token"),
        LockToken::generate().expect("token"),
    );
    let keys = ["{ghost}:1", "{ghost}:2"];
    let _ = tokio::time::timeout(give_up, backend.try_acquire_rw("ghost", RwMode::Write, false, &rw, ttl)).await;
    let _ = tokio::time::timeout(give_up, backend.try_lead("ghost", &lead, b"b", ttl)).await;
    let _ = tokio::time::timeout(give_up, backend.try_acquire_all(&keys, &multi, ttl)).await;
    let cleanups = {
        let backend = backend.clone();
        tokio::spawn(async move {
            let _ = backend.release_rw("ghost", &rw).await;
            let _ = backend.resign("ghost", &lead).await;
            let _ = backend.release_all(&keys, &multi).await;
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    pair.replica().resume().expect("resume the replica");
    let _ = blocker.await;
    let _ = cleanups.await;
    // Everything queued has run once the clean-ups answered (or within the
    // WAIT timeouts): no key of "ghost" may be left.
    let ghosts = [
        "verrou:lua:rw:writer:{ghost}",
        "verrou:lua:leader:{ghost}",
        "{ghost}:1",
        "{ghost}:2",
    ];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut left = Vec::new();
        for key in ghosts {
            if primary.cmd(&["EXISTS", key]).await.expect("EXISTS").as_int() == Some(1) {
                left.push(key);
            }
        }
        if left.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "keys held by nobody after every caller gave up and cleaned up: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
