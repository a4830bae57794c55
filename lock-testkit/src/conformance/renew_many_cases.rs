//! Batched renewal (`renew_many`) of a script-based Redis backend, checked
//! on real servers: one script call per chunk of keys (per hash slot on a
//! cluster), with the outcomes and TTLs of single renews. The outcomes alone
//! are checked for every backend by `lock_cases::renew_many_matches_renew`.

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use lock_core::{Error, LockBackend, LockToken};

use lock_core::{AcquireOutcome, RenewOutcome};

use super::{RenewManySuite, RenewManyTarget};
use crate::server::{RedisServer, RespValue};

/// TTL the locks are taken with: long enough that no key can expire while a
/// loaded machine sets up hundreds of them (the expiry case uses a key
/// expired on purpose). Renewals extend them to [`RENEWED`], so a PTTL above
/// `TAKEN` proves a renewal.
const TAKEN: Duration = Duration::from_secs(60);
const RENEWED: Duration = Duration::from_secs(120);
const TAKEN_MS: i64 = 60_000;
const RENEWED_MS: i64 = 120_000;

fn token() -> LockToken {
    LockToken::generate().expect("token")
}

async fn take(backend: &dyn LockBackend, key: &str, token: &LockToken) {
    assert!(
        matches!(
            backend.try_acquire(key, token, TAKEN).await.expect("acquire"),
            AcquireOutcome::Acquired(_)
        ),
        "{key} is free"
    );
}

async fn pttl(server: &RedisServer, key: &str) -> i64 {
    server
        .cmd(&["PTTL", key])
        .await
        .unwrap()
        .as_int()
        .expect("PTTL is an integer")
}

fn assert_all_renewed(results: &[lock_core::Result<RenewOutcome>]) {
    assert!(
        results.iter().all(|r| matches!(r, Ok(RenewOutcome::Renewed))),
        "{results:?}"
    );
}

/// A command and its arguments, without the empty placeholders.
fn args_of(args: &[String; 3]) -> Vec<&str> {
    args.iter().map(String::as_str).filter(|a| !a.is_empty()).collect()
}

/// Calls of `command` since the last `CONFIG RESETSTAT`.
async fn calls(server: &RedisServer, command: &str) -> u64 {
    server.command_calls(command).await.expect("INFO commandstats")
}

/// Owned keys are renewed to the new TTL; a key held by another token and a
/// missing (or expired) key keep what they had, each with its own outcome,
/// in one call. `on_node` runs a command on the node that owns its key.
async fn check_mixed_batch<F, Fut>(backend: &dyn LockBackend, owned: &[&str], foreign: &str, missing: &str, on_node: F)
where
    F: Fn([String; 3]) -> Fut,
    Fut: Future<Output = RespValue>,
{
    let pttl_of = |key: String| {
        let reply = on_node(["PTTL".to_owned(), key, String::new()]);
        async move { reply.await.as_int().expect("PTTL is an integer") }
    };
    let mine = token();
    for key in owned {
        take(backend, key, &mine).await;
    }
    let theirs = token();
    take(backend, foreign, &theirs).await;
    // Expired on purpose, not by a race with the set-up.
    let expired = format!("{}-expired", owned[0]);
    take(backend, &expired, &mine).await;
    let set = on_node(["PEXPIRE".to_owned(), expired.clone(), "1".to_owned()]).await;
    assert_eq!(set.as_int(), Some(1), "PEXPIRE");
    for _ in 0..1000 {
        if pttl_of(expired.clone()).await == -2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(pttl_of(expired.clone()).await, -2, "{expired} expired");

    let mut items: Vec<(&str, &LockToken)> = owned.iter().map(|k| (*k, &mine)).collect();
    items.insert(1, (foreign, &mine));
    items.insert(2, (missing, &mine));
    items.push((&expired, &mine));
    let results = backend.renew_many(&items, RENEWED).await;
    assert_eq!(results.len(), items.len());
    for ((key, _), result) in items.iter().zip(&results) {
        let want = if *key == foreign {
            RenewOutcome::HeldByOther
        } else if *key == missing || *key == expired {
            RenewOutcome::Missing
        } else {
            RenewOutcome::Renewed
        };
        assert_eq!(result.as_ref().ok(), Some(&want), "{key}: {result:?}");
    }
    for key in owned {
        let ttl = pttl_of((*key).to_owned()).await;
        assert!(ttl > TAKEN_MS && ttl <= RENEWED_MS, "{key} renewed, PTTL {ttl}");
    }
    let ttl = pttl_of(foreign.to_owned()).await;
    assert!(
        ttl > 0 && ttl <= TAKEN_MS,
        "another holder's TTL is untouched, PTTL {ttl}"
    );
    for key in [missing, expired.as_str()] {
        let ttl = pttl_of(key.to_owned()).await;
        assert_eq!(ttl, -2, "{key}: a missing key is not created");
    }
}

/// On one server: per-key outcomes in one script call; a key of another
/// type answers as a single renew does and is left untouched, an invalid
/// key fails alone, a TTL out of range fails every item; 50 keys are one
/// `EVALSHA` running the backend's per-key command 50 times, 300 keys are
/// three chunks.
pub async fn renew_many_on_a_server_gives_per_key_outcomes_in_one_script_call(s: &RenewManySuite) {
    let server = s.server().await;
    let backend = s.connect(RenewManyTarget::server(&server)).await;
    let backend = backend.as_ref();

    let owned = ["a", "b", "c", "d"];
    check_mixed_batch(backend, &owned, "foreign", "missing", |args| {
        let server = &server;
        async move { server.cmd(&args_of(&args)).await.expect("command") }
    })
    .await;

    assert!(
        server
            .cmd(&["HSET", "a-hash", "f", "v"])
            .await
            .unwrap()
            .as_int()
            .is_some()
    );
    let mine = token();
    take(backend, "e", &mine).await;
    let items: [(&str, &LockToken); 3] = [("a-hash", &mine), ("", &mine), ("e", &mine)];
    let results = backend.renew_many(&items, RENEWED).await;
    assert_eq!(
        results[0].as_ref().ok(),
        backend.renew("a-hash", &mine, RENEWED).await.as_ref().ok(),
        "same outcome as a single renew"
    );
    assert_eq!(results[0].as_ref().ok(), Some(&RenewOutcome::HeldByOther));
    assert!(matches!(results[1], Err(Error::InvalidArgument(_))), "{:?}", results[1]);
    assert_eq!(results[2].as_ref().ok(), Some(&RenewOutcome::Renewed));
    assert_eq!(pttl(&server, "a-hash").await, -1, "the other key is left untouched");
    let results = backend.renew_many(&items[2..], Duration::ZERO).await;
    assert!(matches!(results[0], Err(Error::InvalidArgument(_))), "{:?}", results[0]);
    assert!(backend.renew_many(&[], RENEWED).await.is_empty());

    let keys: Vec<String> = (0..300).map(|i| format!("batch:{i}")).collect();
    for key in &keys {
        take(backend, key, &mine).await;
    }
    assert!(server.cmd(&["CONFIG", "RESETSTAT"]).await.unwrap().is_ok());
    let items: Vec<(&str, &LockToken)> = keys.iter().take(50).map(|k| (k.as_str(), &mine)).collect();
    let results = backend.renew_many(&items, RENEWED).await;
    assert_all_renewed(&results);
    assert_eq!(calls(&server, "evalsha").await, 1, "one script call for 50 leases");
    assert_eq!(calls(&server, "eval").await, 0);
    assert_eq!(calls(&server, s.per_key_command).await, 50);

    assert!(server.cmd(&["CONFIG", "RESETSTAT"]).await.unwrap().is_ok());
    let items: Vec<(&str, &LockToken)> = keys.iter().map(|k| (k.as_str(), &mine)).collect();
    let results = backend.renew_many(&items, RENEWED).await;
    assert_all_renewed(&results);
    assert_eq!(calls(&server, "evalsha").await, 3, "chunks of at most 128 keys");
    let ttl = pttl(&server, "batch:299").await;
    assert!(ttl > TAKEN_MS, "the last chunk renewed too, PTTL {ttl}");
}

/// After `SCRIPT FLUSH` the batch loads its script again and renews.
pub async fn renew_many_after_a_script_flush_reloads_the_script(s: &RenewManySuite) {
    let server = s.server().await;
    let backend = s.connect(RenewManyTarget::server(&server)).await;
    let mine = token();
    take(backend.as_ref(), "k", &mine).await;
    assert!(server.cmd(&["SCRIPT", "FLUSH"]).await.unwrap().is_ok());
    let results = backend.renew_many(&[("k", &mine), ("gone", &mine)], RENEWED).await;
    assert_eq!(results[0].as_ref().ok(), Some(&RenewOutcome::Renewed));
    assert_eq!(results[1].as_ref().ok(), Some(&RenewOutcome::Missing));
    assert!(pttl(&server, "k").await > TAKEN_MS);
}

/// A call that times out (paused server) fails every item with an unknown
/// outcome.
pub async fn a_failed_call_fails_every_item_of_the_batch(s: &RenewManySuite) {
    let server = s.server().await;
    let target = RenewManyTarget::server(&server).response_timeout(Duration::from_millis(200));
    let backend = s.connect(target).await;
    let mine = token();
    take(backend.as_ref(), "x", &mine).await;
    take(backend.as_ref(), "y", &mine).await;
    server.pause().expect("pause");
    let results = backend.renew_many(&[("x", &mine), ("y", &mine)], RENEWED).await;
    server.resume().expect("resume");
    assert_eq!(results.len(), 2);
    for r in &results {
        assert!(
            matches!(r, Err(e) if e.is_outcome_unknown()),
            "a timed-out renew has an unknown outcome: {r:?}"
        );
    }
}

/// On a 3-master cluster: the mixed batch across masters, and 50 tagged keys
/// in two slots cost one script call per slot.
pub async fn renew_many_on_a_cluster_sends_one_call_per_slot(s: &RenewManySuite) {
    let cluster = s.cluster().await;
    let backend = s.connect(RenewManyTarget::Cluster(cluster.clone())).await;
    let backend = backend.as_ref();

    // Keys on several masters, two of them sharing a slot through a tag.
    let owned = ["alpha", "{t}:one", "bravo", "{t}:two", "charlie", "delta"];
    check_mixed_batch(backend, &owned, "foreign", "missing", |args| {
        let cluster = &cluster;
        async move {
            let node = cluster.master_for_key(args[1].as_bytes()).await.expect("node");
            node.cmd(&args_of(&args)).await.expect("command")
        }
    })
    .await;

    let mine = token();
    let keys: Vec<String> = (0..50)
        .map(|i| {
            if i % 2 == 0 {
                format!("{{even}}:{i}")
            } else {
                format!("{{odd}}:{i}")
            }
        })
        .collect();
    for key in &keys {
        take(backend, key, &mine).await;
    }
    let mut slots = HashSet::new();
    for key in &keys {
        let node = cluster.master_for_key(key.as_bytes()).await.expect("node");
        slots.insert(
            node.cmd(&["CLUSTER", "KEYSLOT", key])
                .await
                .unwrap()
                .as_int()
                .expect("slot"),
        );
    }
    for node in cluster.masters() {
        assert!(node.cmd(&["CONFIG", "RESETSTAT"]).await.unwrap().is_ok());
    }
    let items: Vec<(&str, &LockToken)> = keys.iter().map(|k| (k.as_str(), &mine)).collect();
    let results = backend.renew_many(&items, RENEWED).await;
    assert_all_renewed(&results);
    let mut scripts = 0;
    for node in cluster.masters() {
        scripts += calls(node, "evalsha").await + calls(node, "eval").await;
    }
    assert_eq!(scripts, slots.len() as u64, "one script call per slot");
    for key in &keys {
        let node = cluster.master_for_key(key.as_bytes()).await.expect("node");
        let ttl = pttl(node, key).await;
        assert!(ttl > TAKEN_MS, "{key} renewed, PTTL {ttl}");
    }
}
