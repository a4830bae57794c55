//! Issue 39, safety findings on the Tair backend: election terms that went
//! backwards after a restart without data, reserved names that collided
//! with user keys, a fence prefix that made a key its own counter.

#![allow(clippy::expect_used, clippy::panic)] // test helpers

use crate::common;

use std::time::Duration;

use lock_core::raw::ElectionBackend;

use lock_core::AcquireOutcome;
use lock_core::{LockToken, Result};
use lock_tair::TairBackend;

/// Generous bound for anything a loaded machine should finish well within.
const PATIENCE: Duration = Duration::from_secs(20);

async fn lead(backend: &TairBackend, name: &str) -> Result<u64> {
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
    let server = common::tair_server().await;
    let backend = common::connect(common::builder(&server.url())).await;
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

/// Issue 39 finding 4: an empty fence prefix made a hash-tagged key its own
/// fence counter; a prefix over the kinds' keys would make fence counters
/// of them. Refused at build.
#[tokio::test]
async fn fence_prefixes_that_overlap_lock_or_kind_keys_are_refused() {
    let server = common::tair_server().await;
    for prefix in ["", "verrou:", "verrou:tair:", "verrou:tair:fence:"] {
        let built = common::builder(&server.url()).fence_prefix(prefix).build().await;
        assert!(
            matches!(built, Err(lock_core::Error::InvalidArgument(_))),
            "fence prefix {prefix:?}: {built:?}"
        );
    }
    common::connect(common::builder(&server.url()).fence_prefix("app:fence:")).await;
}

/// Issue 39 finding 3: a held user lock named like a fence counter was
/// overwritten by a fenced `lock` of the key it fences (value a fence
/// number, TTL gone). Now the user key is refused.
#[tokio::test]
async fn a_user_key_named_like_a_fence_counter_is_refused() {
    use lock_core::LockBackend;
    let server = common::tair_server().await;
    let backend = common::connect(common::builder(&server.url()).fencing(true)).await;
    let token = LockToken::generate().expect("token");
    let taken = backend
        .try_acquire("verrou:fence:{x}", &token, Duration::from_secs(30))
        .await;
    assert!(matches!(taken, Err(lock_core::Error::InvalidArgument(_))), "{taken:?}");
}

/// Issue 39 finding 6: on a cluster, a multi-key set whose fence counters
/// cannot share its slot (a key with `}` and no hash tag) reached the
/// server, which answered CROSSSLOT; now `InvalidArgument` before anything
/// is sent.
#[tokio::test]
async fn a_multi_key_set_whose_fence_keys_leave_its_slot_is_refused_on_a_cluster() {
    use lock_core::raw::MultiLockBackend;
    let cluster = common::shared_cluster().await;
    let backend = common::connect(common::builder(&common::cluster_url(&cluster))).await;
    for set in [["a}b"], ["x{}y"]] {
        let token = LockToken::generate().expect("token");
        let taken = backend.try_acquire_all(&set, &token, Duration::from_secs(5)).await;
        assert!(
            matches!(taken, Err(lock_core::Error::InvalidArgument(_))),
            "{set:?}: {taken:?}"
        );
    }
}

/// Issue 39 finding 2: under `ReplicaAck` a read-write, election or
/// multi-key grant went out on the shared WAIT connection, queued behind
/// another grant's `WAIT`; when its caller gave up, the clean-up release
/// went out on the command connection, ran first (finding nothing), and the
/// grant then left a holder nobody owns for its whole TTL. Now the clean-up
/// follows the grant on its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_grant_given_up_under_replica_ack_leaves_no_ghost() {
    ghost_scenario(true).await;
}

/// The same, with the grants' scripts cached and the replica left paused
/// until the clean-ups came back: they time out while queued behind the
/// blocker's `WAIT`, and still run after the grants. They went out as `EVALSHA` of scripts the fresh server
/// had not cached: the `NOSCRIPT` reply came after the caller had given
/// up, so the `EVAL` with the source was never sent and the election grant
/// was left with no release behind it (1 run in 3-4 of the test above,
/// when the replica's acknowledgement came late). Now a clean-up on its
/// grant's connection goes out as `EVAL` with the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_clean_up_that_times_out_behind_a_wait_still_runs_after_its_grant() {
    ghost_scenario(false).await;
}

/// Kind grants queued behind a blocker's `WAIT`, given up by their callers,
/// then cleaned up; the replica resumes before the clean-ups answered
/// (`resume_early`) or only after they came back (timed out).
async fn ghost_scenario(resume_early: bool) {
    use lock_core::raw::{MultiLockBackend, RwLockBackend};
    use lock_core::{ReplicaAck, RwMode};
    use lock_testkit::server::ReplicatedPair;

    let pair = ReplicatedPair::start(common::tair())
        .await
        .expect("start a primary and a replica with the Tair module");
    let primary = pair.primary();
    let backend = common::connect(
        common::builder(&primary.url())
            .replica_ack(ReplicaAck::new(1, Duration::from_secs(2)))
            .ack_connections(1),
    )
    .await;
    let ttl = Duration::from_secs(30);
    if !resume_early {
        // The grants' scripts cached (not the releases'), so that every
        // grant runs rather than answering NOSCRIPT to a caller gone.
        use lock_redis_family::kinds::scripted::KindScript;
        for script in KindScript::ALL.iter().filter(|s| s.is_grant()) {
            primary
                .cmd(&["SCRIPT", "LOAD", script.source()])
                .await
                .expect("SCRIPT LOAD");
        }
    }
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
            let started = tokio::time::Instant::now();
            let released = backend.release_rw("ghost", &rw).await;
            eprintln!("release_rw after {:?}: {released:?}", started.elapsed());
            let released = backend.resign("ghost", &lead).await;
            eprintln!("resign after {:?}: {released:?}", started.elapsed());
            let released = backend.release_all(&keys, &multi).await;
            eprintln!("release_all after {:?}: {released:?}", started.elapsed());
        })
    };
    if resume_early {
        tokio::time::sleep(Duration::from_millis(200)).await;
        pair.replica().resume().expect("resume the replica");
        let _ = blocker.await;
        let _ = cleanups.await;
    } else {
        let _ = cleanups.await;
        pair.replica().resume().expect("resume the replica");
        let _ = blocker.await;
    }
    // Everything queued has run once the clean-ups answered (or within the
    // WAIT timeouts): no key of "ghost" may be left.
    let ghosts = [
        "verrou:tair:rw:writer:{ghost}",
        "verrou:tair:leader:{ghost}",
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

/// Issue 39, the note on a dead server: a release queued behind fred's
/// reconnection waited the whole operation timeout and came back "outcome
/// unknown" (the queued `CAD` could even run after a later reconnect). Now
/// a command waits for the next connection attempt only, is never queued,
/// and a dead server gives a definite error: nothing was sent.
#[tokio::test]
async fn a_release_with_the_server_dead_is_a_definite_error() {
    use lock_core::LockBackend;
    let server = common::tair_server().await;
    for notifications in [true, false] {
        let backend = common::connect(common::builder(&server.url()).release_notifications(notifications)).await;
        let token = LockToken::generate().expect("token");
        let taken = backend.try_acquire("dead", &token, Duration::from_secs(30)).await;
        assert!(matches!(taken, Ok(AcquireOutcome::Acquired(_))), "{taken:?}");
        server.kill().expect("kill the server");
        // Let the client see the connection close and start reconnecting
        // (a release racing the close fails on the dead socket instead:
        // outcome unknown, rightly, as a write may have been cut).
        tokio::time::sleep(Duration::from_millis(500)).await;
        let released = backend.release("dead", &token).await;
        match released {
            Err(e) => assert!(
                !e.is_outcome_unknown(),
                "notifications {notifications}: nothing could be sent, yet the outcome is unknown: {e}"
            ),
            Ok(outcome) => panic!("notifications {notifications}: released with the server dead: {outcome:?}"),
        }
        server.restart_empty().await.expect("restart");
    }
}
