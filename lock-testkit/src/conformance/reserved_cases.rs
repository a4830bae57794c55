//! Reserved names: a backend that keeps key prefixes for itself (helper
//! keys: fence counters, waiter markers, the lock kinds' keys) refuses
//! every user key or name under them, for every lock kind, with
//! [`Error::InvalidArgument`], before anything is sent: such a key could be
//! (or become) another lock's helper key. The suite learns the prefixes
//! from its `reserved_prefixes` setting; a backend without reserved names
//! passes trivially. Re-exported by each kind's cases module.

use lock_core::raw::{ElectionBackend, MultiLockBackend, PermitRequest, RwLockBackend, SemaphoreBackend};
use lock_core::{Error, LockToken, Result, RwMode};

use super::{ElectionSuite, LockSuite, MultiSuite, RwSuite, SemaphoreSuite};

/// Keys under each of `reserved`: the prefix itself, a short key, one
/// shaped like a helper key, and one with this run's namespace.
fn reserved_keys(reserved: &[String], run_key: &str) -> Vec<String> {
    reserved
        .iter()
        .flat_map(|p| {
            [
                p.clone(),
                format!("{p}x"),
                format!("{p}fence:{{x}}"),
                format!("{p}sem:{{{run_key}}}"),
                format!("{p}{run_key}"),
            ]
        })
        .collect()
}

#[track_caller]
fn assert_refused<T: std::fmt::Debug>(what: &str, key: &str, result: Result<T>) {
    assert!(
        matches!(result, Err(Error::InvalidArgument(_))),
        "{what} of the reserved key {key:?}: expected InvalidArgument, got {result:?}"
    );
}

fn token() -> LockToken {
    LockToken::generate().expect("token")
}

/// The mutex: acquire, release, renew and the manager's `lock` refuse every
/// reserved key at once (`lock` does not retry it until its timeout).
pub async fn reserved_keys_are_refused(s: &LockSuite) {
    let raw = s.client().await;
    let locks = s.manager(s.manual()).await;
    for key in reserved_keys(&s.clients.reserved, &s.key("reserved")) {
        let token = token();
        assert_refused("try_acquire", &key, raw.try_acquire(&key, &token, s.ttl).await);
        assert_refused("release", &key, raw.release(&key, &token).await);
        assert_refused("renew", &key, raw.renew(&key, &token, s.ttl).await);
        assert_refused("lock", &key, locks.lock(&key).await);
    }
}

/// `renew_many` refuses each reserved key as `renew` does, and still
/// answers the ordinary keys of the same batch.
pub async fn reserved_keys_are_refused_by_renew_many(s: &LockSuite) {
    let raw = s.client().await;
    let ordinary = s.key("reserved-batch");
    let token = token();
    let acquired = raw.try_acquire(&ordinary, &token, s.ttl).await;
    assert!(
        matches!(acquired, Ok(lock_core::AcquireOutcome::Acquired(_))),
        "{acquired:?}"
    );
    let reserved = reserved_keys(&s.clients.reserved, &s.key("reserved"));
    let mut items: Vec<(&str, &LockToken)> = vec![(ordinary.as_str(), &token)];
    items.extend(reserved.iter().map(|key| (key.as_str(), &token)));
    let outcomes = raw.renew_many(&items, s.ttl).await;
    assert_eq!(outcomes.len(), items.len(), "one outcome per item");
    for ((key, _), outcome) in items.iter().zip(outcomes) {
        if *key == ordinary {
            // Renewed; a transport error is tolerated (a loaded machine can
            // time out a Redlock node's short per-node call), a refusal or a
            // wrong answer is not.
            assert!(
                matches!(outcome, Ok(lock_core::RenewOutcome::Renewed))
                    || matches!(&outcome, Err(e) if !matches!(e, Error::InvalidArgument(_) | Error::Unsupported { .. })),
                "renew_many of the ordinary key {key:?}: {outcome:?}"
            );
        } else {
            assert_refused("renew_many", key, outcome);
        }
    }
    let released = raw.release(&ordinary, &token).await;
    assert!(released.is_ok(), "{released:?}");
}

/// Semaphores: every operation refuses a name under a reserved prefix.
pub async fn reserved_semaphore_names_are_refused(s: &SemaphoreSuite) {
    let raw = s.client().await;
    let manager = s.manager(s.manual()).await;
    for name in reserved_keys(&s.clients.reserved, &s.key("reserved")) {
        let token = token();
        let request = PermitRequest::new(2, 1);
        assert_refused(
            "acquire_permits",
            &name,
            raw.acquire_permits(&name, &token, request, s.ttl).await,
        );
        assert_refused("release_permits", &name, raw.release_permits(&name, &token).await);
        assert_refused("renew_permits", &name, raw.renew_permits(&name, &token, s.ttl).await);
        let acquired = match manager.semaphore(&name, 2) {
            Ok(semaphore) => semaphore.acquire(1).await.map(|_| ()),
            Err(e) => Err(e),
        };
        assert_refused("Semaphore::acquire", &name, acquired);
    }
}

/// Multi-key locks: a set with a reserved key is refused, alone or beside
/// an ordinary key of the same slot.
pub async fn reserved_multi_keys_are_refused(s: &MultiSuite) {
    let raw = s.client().await;
    let ordinary = s.keys("reserved", 1).remove(0);
    let tag = s.key("reserved");
    for key in reserved_keys(&s.clients.reserved, &tag) {
        let tagged = format!("{key}{{{tag}}}:1");
        for set in [vec![key.as_str()], vec![ordinary.as_str(), tagged.as_str()]] {
            let token = token();
            let what = format!("{set:?}");
            assert_refused("try_acquire_all", &what, raw.try_acquire_all(&set, &token, s.ttl).await);
            assert_refused("release_all", &what, raw.release_all(&set, &token).await);
            assert_refused("renew_all", &what, raw.renew_all(&set, &token, s.ttl).await);
        }
    }
}

/// Read-write locks: both modes, release and renew refuse a reserved name.
pub async fn reserved_rw_names_are_refused(s: &RwSuite) {
    let raw = s.client().await;
    for name in reserved_keys(&s.clients.reserved, &s.key("reserved")) {
        let token = token();
        for mode in [RwMode::Read, RwMode::Write] {
            assert_refused(
                "try_acquire_rw",
                &name,
                raw.try_acquire_rw(&name, mode, false, &token, s.ttl).await,
            );
        }
        assert_refused("release_rw", &name, raw.release_rw(&name, &token).await);
        assert_refused("renew_rw", &name, raw.renew_rw(&name, &token, s.ttl).await);
    }
}

/// Elections: campaign, resign, renew and `leader` refuse a reserved name.
pub async fn reserved_election_names_are_refused(s: &ElectionSuite) {
    let raw = s.client().await;
    for name in reserved_keys(&s.clients.reserved, &s.key("reserved")) {
        let token = token();
        assert_refused("try_lead", &name, raw.try_lead(&name, &token, b"me", s.ttl).await);
        assert_refused("resign", &name, raw.resign(&name, &token).await);
        assert_refused("renew_lead", &name, raw.renew_lead(&name, &token, s.ttl).await);
        assert_refused("leader", &name, raw.leader(&name).await);
    }
}
