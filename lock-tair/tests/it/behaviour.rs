//! Tair-specific behaviour on real servers: round trips under contention,
//! TTLs on every write, ABA, fencing keys, wrong key types, a server without
//! the module, replica acknowledgement, and the PTTL hint.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_core::{
    CasOutcome, CreateOutcome, DeleteOutcome, Error, Expiry, LockBackend, LockManager, LockOptions, LockToken,
    Replication, Result, UpdateOptions, Versioned, VersionedStore, VersionedStoreExt,
};

use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_tair::{OnShortfall, ReplicaAck, TairBackend};
use lock_testkit::server::{RedisServer, ReplicatedPair};
use tokio::time::Instant;

async fn pttl(server: &RedisServer, key: &str) -> i64 {
    server.cmd(&["PTTL", key]).await.unwrap().as_int().unwrap()
}

fn token() -> LockToken {
    LockToken::generate().unwrap()
}

fn calls(stats: &std::collections::HashMap<String, String>, command: &str) -> u64 {
    let Some(line) = stats.get(&format!("cmdstat_{command}")) else {
        return 0;
    };
    line.split(',')
        .find_map(|f| f.strip_prefix("calls="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Counts what the update loop asks of the store.
#[derive(Default)]
struct Counts {
    gets: AtomicU64,
    creates_lost: AtomicU64,
    cas_written: AtomicU64,
    cas_conflicts: AtomicU64,
    cas_missing: AtomicU64,
}

struct CountingStore {
    inner: TairBackend,
    counts: Arc<Counts>,
}

#[lock_core::raw::async_trait]
impl VersionedStore for CountingStore {
    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        self.counts.gets.fetch_add(1, Ordering::Relaxed);
        self.inner.get(key).await
    }
    async fn create(&self, key: &str, value: &[u8], expiry: Expiry) -> Result<CreateOutcome> {
        let out = self.inner.create(key, value, expiry).await?;
        if out == CreateOutcome::Exists {
            self.counts.creates_lost.fetch_add(1, Ordering::Relaxed);
        }
        Ok(out)
    }
    async fn compare_and_set(&self, key: &str, expected: u64, value: &[u8], expiry: Expiry) -> Result<CasOutcome> {
        let out = self.inner.compare_and_set(key, expected, value, expiry).await?;
        let counter = match out {
            CasOutcome::Written { .. } => &self.counts.cas_written,
            CasOutcome::Conflict(_) => &self.counts.cas_conflicts,
            _ => &self.counts.cas_missing,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(out)
    }
    async fn delete(&self, key: &str, expected: u64) -> Result<DeleteOutcome> {
        self.inner.delete(key, expected).await
    }
    fn name(&self) -> &str {
        "counting-tair"
    }
}

/// 8 tasks × 100 `update` increments: exact, and the server's own command
/// counts show one EXCAS per attempt and no EXGET between retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_round_trip_per_attempt_under_contention() {
    let server = common::tair_server().await;
    let counts = Arc::new(Counts::default());
    let (tasks, increments) = (8u64, 100u64);
    let key = "contended-counter";
    let mut handles = Vec::new();
    let started = Instant::now();
    for _ in 0..tasks {
        let store = CountingStore {
            inner: common::connect(common::builder(&server.url())).await,
            counts: counts.clone(),
        };
        handles.push(tokio::spawn(async move {
            let opts = UpdateOptions::default().max_attempts(10_000);
            for _ in 0..increments {
                store
                    .update_opts(key, &opts, |old| {
                        let n: u64 = old.and_then(|b| std::str::from_utf8(b).ok()?.parse().ok()).unwrap_or(0);
                        Some((n + 1).to_string().into_bytes())
                    })
                    .await
                    .expect("update")
                    .expect("written");
            }
        }));
    }
    for h in handles {
        h.await.expect("task");
    }
    let elapsed = started.elapsed();
    let reader = common::connect(common::builder(&server.url())).await;
    let value = reader.get(key).await.unwrap().expect("present");
    assert_eq!(
        value.value,
        (tasks * increments).to_string().into_bytes(),
        "lost updates"
    );

    let stats = server.info("commandstats").await.unwrap();
    let updates = tasks * increments;
    let gets = counts.gets.load(Ordering::Relaxed);
    let creates_lost = counts.creates_lost.load(Ordering::Relaxed);
    let written = counts.cas_written.load(Ordering::Relaxed);
    let conflicts = counts.cas_conflicts.load(Ordering::Relaxed);
    let missing = counts.cas_missing.load(Ordering::Relaxed);
    println!(
        "{updates} updates in {elapsed:?}: EXGET {} (client gets {gets}), EXCAS {} = {written} written + \
         {conflicts} conflicts + {missing} missing, EXSET {}, lost creates {creates_lost}",
        calls(&stats, "exget"),
        calls(&stats, "excas"),
        calls(&stats, "exset"),
    );
    // Our final check read went through `reader`, not the counting store.
    assert_eq!(
        calls(&stats, "exget"),
        gets + 1,
        "every EXGET the server saw came from the update loop"
    );
    assert_eq!(
        gets,
        updates + creates_lost,
        "one EXGET per update call (plus one after a lost create race), none between retries"
    );
    assert_eq!(
        calls(&stats, "excas"),
        written + conflicts + missing,
        "one EXCAS per attempt"
    );
    assert_eq!(
        written + calls(&stats, "exset"),
        updates + creates_lost,
        "each update wrote once"
    );
}

/// Renew and every versioned write keep, set or remove the TTL exactly as
/// asked; nothing is dropped by accident.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttls_survive_renew_and_versioned_writes() {
    let server = common::tair_server().await;
    let b = common::connect(common::builder(&server.url())).await;

    // Lock: acquire and renew always carry PX.
    let t = token();
    assert!(matches!(
        b.try_acquire("lock", &t, Duration::from_secs(10)).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    let p = pttl(&server, "lock").await;
    assert!((9_000..=10_000).contains(&p), "acquire PTTL {p}");
    assert_eq!(
        b.renew("lock", &t, Duration::from_secs(20)).await.unwrap(),
        RenewOutcome::Renewed
    );
    let p = pttl(&server, "lock").await;
    assert!((19_000..=20_000).contains(&p), "renew PTTL {p}");
    assert_eq!(
        b.renew("lock", &t, Duration::from_millis(1500)).await.unwrap(),
        RenewOutcome::Renewed
    );
    let p = pttl(&server, "lock").await;
    assert!((1_000..=1_500).contains(&p), "renew may also shorten: PTTL {p}");
    let stored = server.cmd(&["GET", "lock"]).await.unwrap();
    assert_eq!(stored.as_str(), Some(t.to_hex().as_str()), "token stored as hex");

    // Versioned writes.
    let CreateOutcome::Created { version: v } = b
        .create("v", b"a", Expiry::After(Duration::from_secs(10)))
        .await
        .unwrap()
    else {
        panic!("create")
    };
    let p = pttl(&server, "v").await;
    assert!((9_000..=10_000).contains(&p), "create PTTL {p}");
    let CasOutcome::Written { version: v } = b.compare_and_set("v", v, b"b", Expiry::Keep).await.unwrap() else {
        panic!("cas keep")
    };
    let p = pttl(&server, "v").await;
    assert!((8_000..=10_000).contains(&p), "Keep kept the TTL: PTTL {p}");
    // A failed CAS leaves the TTL alone too.
    assert!(matches!(
        b.compare_and_set("v", v + 1000, b"x", Expiry::Persist).await.unwrap(),
        CasOutcome::Conflict(_)
    ));
    assert!(pttl(&server, "v").await > 8_000, "a conflict must not touch the TTL");
    let CasOutcome::Written { version: v } = b
        .compare_and_set("v", v, b"c", Expiry::After(Duration::from_secs(30)))
        .await
        .unwrap()
    else {
        panic!("cas after")
    };
    let p = pttl(&server, "v").await;
    assert!((29_000..=30_000).contains(&p), "After set the TTL: PTTL {p}");
    let CasOutcome::Written { version: v } = b.compare_and_set("v", v, b"d", Expiry::Persist).await.unwrap() else {
        panic!("cas persist")
    };
    assert_eq!(pttl(&server, "v").await, -1, "Persist removed the TTL");
    let CasOutcome::Written { .. } = b.compare_and_set("v", v, b"e", Expiry::Keep).await.unwrap() else {
        panic!("cas keep on persistent")
    };
    assert_eq!(
        pttl(&server, "v").await,
        -1,
        "Keep on a persistent key keeps it persistent"
    );
    for (key, expiry) in [("new-keep", Expiry::Keep), ("new-persist", Expiry::Persist)] {
        assert!(matches!(
            b.create(key, b"x", expiry).await.unwrap(),
            CreateOutcome::Created { .. }
        ));
        assert_eq!(
            pttl(&server, key).await,
            -1,
            "{key}: a new key without After has no TTL"
        );
    }
}

/// A lock expires, another client takes the key: the stale holder's release
/// and renew must not touch it. A versioned key expires and is recreated: a
/// version read before must not match (Tair alone would restart at 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aba_after_expiry() {
    let server = common::tair_server().await;
    let a = common::connect(common::builder(&server.url())).await;
    let b = common::connect(common::builder(&server.url())).await;

    let (ta, tb) = (token(), token());
    assert!(matches!(
        a.try_acquire("k", &ta, Duration::from_millis(150)).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(matches!(
        b.try_acquire("k", &tb, Duration::from_secs(10)).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    assert_eq!(a.release("k", &ta).await.unwrap(), ReleaseOutcome::HeldByOther);
    assert_eq!(
        a.renew("k", &ta, Duration::from_secs(60)).await.unwrap(),
        RenewOutcome::HeldByOther
    );
    assert_eq!(
        server.cmd(&["GET", "k"]).await.unwrap().as_str(),
        Some(tb.to_hex().as_str())
    );
    let p = pttl(&server, "k").await;
    assert!(
        (9_000..=10_000).contains(&p),
        "the stale renew must not move B's TTL: {p}"
    );

    let CreateOutcome::Created { version: old } = a
        .create("v", b"first", Expiry::After(Duration::from_millis(150)))
        .await
        .unwrap()
    else {
        panic!("create")
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(a.get("v").await.unwrap(), None, "expired");
    let CreateOutcome::Created { version: new } = b.create("v", b"second", Expiry::Keep).await.unwrap() else {
        panic!("recreate")
    };
    assert_ne!(old, new);
    assert!(new > 1, "created at a random version, not Tair's restart value 1");
    assert_eq!(
        a.delete("v", old).await.unwrap(),
        DeleteOutcome::Conflict { current_version: new }
    );
    match a.compare_and_set("v", old, b"stale", Expiry::Keep).await.unwrap() {
        CasOutcome::Conflict(now) => assert_eq!((now.value.as_slice(), now.version), (&b"second"[..], new)),
        other => panic!("a pre-expiry version must not match: {other:?}"),
    }
    let raw = server.cmd(&["EXGET", "v"]).await.unwrap();
    let raw = raw.as_array().unwrap();
    assert_eq!(raw[0].as_bytes(), Some(&b"second"[..]));
    assert_eq!(raw[1].as_int(), Some(i64::try_from(new).unwrap()));

    // What the random initial version protects against: plain EXSET restarts at 1.
    server.cmd(&["DEL", "plain"]).await.unwrap();
    server.cmd(&["EXSET", "plain", "x"]).await.unwrap();
    assert_eq!(b.get("plain").await.unwrap().unwrap().version, 1);
}

/// Fence counters share the lock key's slot, outlive the lock, and the
/// tokens keep increasing across release and expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_counter_outlives_the_lock() {
    let server = common::tair_server().await;
    let b = common::connect(common::builder(&server.url()).fencing(true)).await;
    let mut last = 0;
    for key in ["job:1", "{tenant:9}:job", "odd}key"] {
        for _ in 0..2 {
            let t = token();
            let AcquireOutcome::Acquired(lease) = b.try_acquire(key, &t, Duration::from_millis(200)).await.unwrap()
            else {
                panic!("acquire {key}")
            };
            let fence = lease.fencing_token.expect("fencing token").0;
            assert!(fence >= 1);
            if key == "job:1" {
                assert!(fence > last);
                last = fence;
            }
            // Held: the fenced script hands the holder's TTL back for free.
            match b.try_acquire(key, &token(), Duration::from_millis(200)).await.unwrap() {
                AcquireOutcome::Held { retry_after } => {
                    let hint = retry_after.expect("retry hint from the fenced script");
                    assert!(hint <= Duration::from_millis(200));
                }
                other => panic!("expected Held, got {other:?}"),
            }
            assert_eq!(b.release(key, &t).await.unwrap(), ReleaseOutcome::Released);
        }
    }
    let fence_key = "verrou:fence:{job:1}";
    let stored = last.to_string();
    assert_eq!(
        server.cmd(&["GET", fence_key]).await.unwrap().as_str(),
        Some(stored.as_str())
    );
    assert_eq!(pttl(&server, fence_key).await, -1, "the fence counter has no TTL");
    assert_eq!(
        server
            .cmd(&["EXISTS", "verrou:fence:{tenant:9}:job"])
            .await
            .unwrap()
            .as_int(),
        Some(1)
    );
}

/// On a cluster, the fence counter lands in the lock's slot; a key that
/// cannot share a slot with its counter is refused clearly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_fencing_keys() {
    let cluster = common::shared_cluster().await;
    let b = common::connect(common::builder(&common::cluster_url(&cluster)).fencing(true)).await;
    for key in ["alpha", "beta:7", "{t}gamma"] {
        let t = token();
        assert!(matches!(
            b.try_acquire(key, &t, Duration::from_millis(300)).await.unwrap(),
            AcquireOutcome::Acquired(lease) if lease.fencing_token.is_some()
        ));
        assert_eq!(b.release(key, &t).await.unwrap(), ReleaseOutcome::Released);
    }
    let err = b
        .try_acquire("no}tag", &token(), Duration::from_millis(300))
        .await
        .expect_err("no shared slot");
    assert!(
        matches!(err, Error::InvalidArgument(ref m) if m.contains("hash tag")),
        "{err}"
    );
}

/// Keys of the wrong type: versioned operations on a plain string fail
/// clearly; lock operations on a non-string key treat it as someone else's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_type_keys() {
    let server = common::tair_server().await;
    let b = common::connect(common::builder(&server.url())).await;
    server.cmd(&["SET", "plain", "v"]).await.unwrap();
    let wrongtype = |r: Result<()>| match r {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("WRONGTYPE") && m.contains("plain"), "{m}"),
        other => panic!("expected a WRONGTYPE InvalidArgument, got {other:?}"),
    };
    wrongtype(b.get("plain").await.map(drop));
    wrongtype(b.create("plain", b"x", Expiry::Keep).await.map(drop));
    wrongtype(b.compare_and_set("plain", 1, b"x", Expiry::Keep).await.map(drop));
    wrongtype(b.delete("plain", 1).await.map(drop));
    assert_eq!(server.cmd(&["GET", "plain"]).await.unwrap().as_str(), Some("v"));

    server.cmd(&["EXSET", "ex", "v"]).await.unwrap();
    server.cmd(&["RPUSH", "list", "v"]).await.unwrap();
    for key in ["ex", "list"] {
        let t = token();
        assert!(matches!(
            b.try_acquire(key, &t, Duration::from_secs(1)).await.unwrap(),
            AcquireOutcome::Held { .. }
        ));
        assert_eq!(b.release(key, &t).await.unwrap(), ReleaseOutcome::HeldByOther);
        assert_eq!(
            b.renew(key, &t, Duration::from_secs(1)).await.unwrap(),
            RenewOutcome::HeldByOther
        );
        assert_eq!(
            server.cmd(&["EXISTS", key]).await.unwrap().as_int(),
            Some(1),
            "{key} untouched"
        );
    }
}

/// A server without the TairString commands is refused at connect, naming
/// them; with the check off, the first use names the missing command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_without_the_module_is_unsupported() {
    let server = RedisServer::start()
        .await
        .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"));
    let err = common::builder(&server.url()).build().await.expect_err("no module");
    match &err {
        Error::Unsupported { backend, what } => {
            assert_eq!(backend, "tair");
            for command in ["CAD", "CAS", "EXGET", "EXSET", "EXCAS", "EXCAD"] {
                assert!(what.contains(command), "{what}");
            }
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    println!("{err}");
    // Without release notifications release is `CAD` (with them, a script
    // of plain `GET` and `DEL`, which needs no module).
    let unchecked = common::connect(
        common::builder(&server.url())
            .check_commands(false)
            .release_notifications(false),
    )
    .await;
    let t = token();
    let err = unchecked.release("k", &t).await.expect_err("no CAD");
    assert!(
        matches!(&err, Error::Unsupported { what, .. } if what.starts_with("command CAD")),
        "{err:?}"
    );
    let err = unchecked.get("k").await.expect_err("no EXGET");
    assert!(
        matches!(&err, Error::Unsupported { what, .. } if what.starts_with("command EXGET")),
        "{err:?}"
    );
}

/// WAIT after acquire and versioned writes: confirmed with a replica, a
/// shortfall either marked or released-and-failed, and WAIT never stalls
/// the shared connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_acknowledgement() {
    let pair = ReplicatedPair::start(common::tair())
        .await
        .unwrap_or_else(|e| panic!("cannot start a replicated pair: {e}"));
    let url = pair.primary().url();
    let wait = Duration::from_millis(300);

    // A live replica acknowledges at once; the generous timeout only matters on a loaded machine.
    let one = common::connect(common::builder(&url).replica_ack(ReplicaAck::new(1, Duration::from_secs(3)))).await;
    assert!(one.capabilities().replica_ack);
    let t = token();
    let AcquireOutcome::Acquired(lease) = one.try_acquire("a", &t, Duration::from_secs(5)).await.unwrap() else {
        panic!("acquire")
    };
    assert_eq!(lease.replication, Replication::Confirmed { replicas: 1 });
    let on_replica = pair.replica().cmd(&["GET", "a"]).await.unwrap();
    assert_eq!(
        on_replica.as_str(),
        Some(t.to_hex().as_str()),
        "acknowledged means on the replica"
    );
    let CreateOutcome::Created { version } = one.create("v", b"x", Expiry::Keep).await.unwrap() else {
        panic!("create")
    };
    let raw = pair.replica().cmd(&["EXGET", "v"]).await.unwrap();
    assert_eq!(
        raw.as_array().unwrap()[1].as_int(),
        Some(i64::try_from(version).unwrap())
    );

    // Two replicas asked, one exists: WAIT blocks for its whole timeout,
    // long here so the probe below runs while it is pending on any machine.
    let pending_wait = Duration::from_secs(3);
    let marked = common::connect(
        common::builder(&url).replica_ack(ReplicaAck::new(2, pending_wait).on_shortfall(OnShortfall::MarkUnconfirmed)),
    )
    .await;
    let shared = common::connect(common::builder(&url)).await;
    let t2 = token();
    let acquiring = {
        let marked = marked.clone();
        tokio::spawn(async move { marked.try_acquire("b", &t2, Duration::from_secs(5)).await })
    };
    // Synchronise on the server: the WAIT is blocked there.
    let blocked = || async { pair.primary().info("clients").await.unwrap()["blocked_clients"].clone() };
    let give_up = Instant::now() + pending_wait;
    while blocked().await == "0" {
        assert!(Instant::now() < give_up, "WAIT never blocked");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Meanwhile, the shared connections answer: both replies come back
    // while the WAIT is still blocked.
    assert_eq!(shared.get("v").await.unwrap().map(|v| v.version), Some(version));
    let _ = marked.get("v").await.unwrap(); // same backend, its command connection
    assert_eq!(blocked().await, "1", "the probe ran while WAIT was pending");
    assert!(!acquiring.is_finished(), "the probe did not wait for the WAIT");
    let AcquireOutcome::Acquired(lease) = acquiring.await.unwrap().unwrap() else {
        panic!("acquire")
    };
    assert_eq!(
        lease.replication,
        Replication::Unconfirmed {
            acknowledged: 1,
            requested: 2
        }
    );
    assert!(matches!(
        marked.create("w", b"x", Expiry::Keep).await.unwrap(),
        CreateOutcome::Created { .. }
    ));

    let strict = common::connect(common::builder(&url).replica_ack(ReplicaAck::new(2, wait))).await;
    let err = strict
        .try_acquire("c", &token(), Duration::from_secs(5))
        .await
        .expect_err("shortfall fails");
    assert!(
        matches!(&err, Error::Backend { outcome_unknown: false, message, .. } if message.contains("released")),
        "{err:?}"
    );
    assert_eq!(
        pair.primary().cmd(&["EXISTS", "c"]).await.unwrap().as_int(),
        Some(0),
        "released"
    );
    let err = strict
        .create("x", b"x", Expiry::Keep)
        .await
        .expect_err("shortfall fails");
    assert!(err.is_outcome_unknown(), "{err:?}");
    // Through the manager: it keeps trying, then reports the shortfall.
    let manager = LockManager::with_options(
        strict.clone(),
        LockOptions::with_ttl(Duration::from_secs(5)).acquire_timeout(Duration::from_millis(500)),
    )
    .unwrap();
    let err = manager.lock("d").await.expect_err("shortfall");
    assert!(err.is_backend(), "{err:?}");
    assert_eq!(pair.primary().cmd(&["EXISTS", "d"]).await.unwrap().as_int(), Some(0));
}

/// The optional PTTL hint: off by default, and when on, the holder's
/// remaining TTL (checked against the server's PTTL). What the hint buys a
/// waiter (a retry at the holder's expiry instead of up to one backoff step
/// later) is asserted exactly, on the paused clock, by lock-core's
/// `waiting_is_capped_by_the_holders_remaining_ttl`; here a waiter using it
/// on a real server gets a crashed holder's key once it expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pttl_hint_after_a_crashed_holder() {
    let server = common::tair_server().await;
    let ttl = Duration::from_secs(2);
    let hinted = common::connect(common::builder(&server.url()).retry_after_hint(true)).await;
    let plain = common::connect(common::builder(&server.url())).await;
    let t = token();
    assert!(matches!(
        plain.try_acquire("h", &t, ttl).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    let before = pttl(&server, "h").await;
    let hint = match hinted.try_acquire("h", &token(), ttl).await.unwrap() {
        AcquireOutcome::Held { retry_after } => retry_after.expect("hint"),
        other => panic!("expected Held, got {other:?}"),
    };
    let after = pttl(&server, "h").await;
    let hint_ms = i64::try_from(hint.as_millis()).unwrap();
    assert!(
        after <= hint_ms && hint_ms <= before,
        "the hint is the holder's PTTL: {after} <= {hint_ms} <= {before}"
    );
    match plain.try_acquire("h", &token(), ttl).await.unwrap() {
        AcquireOutcome::Held { retry_after } => assert_eq!(retry_after, None, "no hint by default"),
        other => panic!("expected Held, got {other:?}"),
    }
    assert_eq!(plain.release("h", &t).await.unwrap(), ReleaseOutcome::Released);

    // A crashed holder (never releases, never renews): the hinted waiter
    // gets the key after it expires, not before.
    let short = Duration::from_millis(300);
    let waiter =
        LockManager::with_options(hinted.clone(), LockOptions::with_ttl(short).acquire_timeout(short * 20)).unwrap();
    let crashed = token();
    assert!(matches!(
        plain.try_acquire("crash", &crashed, short).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    let guard = waiter.lock("crash").await.expect("acquired after the expiry");
    assert_ne!(guard.token(), &crashed);
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

/// The backend runs on the application's own fred client or pool, with
/// its own per-command attempts and timeout, and WAIT connections cloned
/// from the application's client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn application_client_and_pool() {
    use lock_tair::fred::prelude::{Builder, ClientLike, Config, ReconnectPolicy};

    let pair = ReplicatedPair::start(common::tair())
        .await
        .unwrap_or_else(|e| panic!("cannot start a replicated pair: {e}"));
    let config = Config::from_url(&pair.primary().url()).unwrap();
    let mut builder = Builder::from_config(config);
    builder.set_policy(ReconnectPolicy::new_constant(0, 100));

    // Not connected yet: the backend connects it.
    let client = builder.build().unwrap();
    let b = common::connect(
        lock_tair::TairBuilder::connection(client.clone()).replica_ack(ReplicaAck::new(1, Duration::from_secs(3))),
    )
    .await;
    assert!(client.is_connected());
    let t = token();
    let AcquireOutcome::Acquired(lease) = b.try_acquire("app", &t, Duration::from_secs(5)).await.unwrap() else {
        panic!("acquire")
    };
    assert_eq!(lease.replication, Replication::Confirmed { replicas: 1 });
    assert_eq!(b.release("app", &t).await.unwrap(), ReleaseOutcome::Released);

    let pool = builder.build_pool(3).unwrap();
    pool.init().await.unwrap();
    let p = common::connect(lock_tair::TairBuilder::pool(pool.clone())).await;
    for _ in 0..6 {
        p.update("pooled", |old| Some([old.unwrap_or_default(), b"x"].concat()))
            .await
            .unwrap();
    }
    assert_eq!(p.get("pooled").await.unwrap().unwrap().value, b"xxxxxx");
    let connected = || async { pair.primary().info("clients").await.unwrap()["connected_clients"].clone() };
    let before: u32 = connected().await.parse().unwrap();
    drop(p);
    drop(b);
    // Synchronise on the drop's effect: the connections the backend opened
    // itself (its WAIT clones) are closed on the server...
    let give_up = Instant::now() + Duration::from_secs(10);
    while connected().await.parse::<u32>().unwrap() >= before {
        assert!(
            Instant::now() < give_up,
            "the backend's own connections were never closed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // ...and the application's connections stay the application's.
    assert!(client.is_connected() && pool.is_connected());
    let pong: String = client.ping(None).await.unwrap();
    assert_eq!(pong, "PONG");
}

/// README: every lock operation is one command, seen on the server's
/// MONITOR stream: `SET NX PX`, `CAS … PX`, and release `CAD` (without
/// release notifications) or one script call (with them); with fencing the
/// acquire is one script call; the PTTL hint, when asked, adds its one
/// `PTTL` to a refused acquire only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_lock_operation_is_one_command() {
    use lock_testkit::server::Monitor;
    async fn sent(monitor: &mut Monitor, server: &RedisServer) -> Vec<String> {
        let commands = monitor.client_commands(server).await.unwrap();
        commands.into_iter().map(|args| args[0].clone()).collect()
    }
    let server = common::tair_server().await;
    let ttl = Duration::from_secs(30);
    // Backends stay alive to the end: a dropped one's QUIT would show up in
    // the next one's stream.
    let mut alive = Vec::new();
    for (fencing, hint, notify) in [(false, false, false), (true, false, true), (false, true, true)] {
        let b = common::connect(
            common::builder(&server.url())
                .fencing(fencing)
                .retry_after_hint(hint)
                .release_notifications(notify),
        )
        .await;
        // Warm-up: connections open, scripts cached.
        let t = token();
        b.try_acquire("warm", &t, ttl).await.unwrap();
        b.release("warm", &t).await.unwrap();
        let mut monitor = Monitor::start(&server).await.unwrap();
        let acquire = if fencing { "evalsha" } else { "set" };
        let mine = token();
        let AcquireOutcome::Acquired(_) = b.try_acquire("k", &mine, ttl).await.unwrap() else {
            panic!("acquire")
        };
        assert_eq!(
            sent(&mut monitor, &server).await,
            [acquire],
            "acquire (fencing {fencing})"
        );
        let AcquireOutcome::Held { .. } = b.try_acquire("k", &token(), ttl).await.unwrap() else {
            panic!("held")
        };
        let refused: &[&str] = if hint { &["set", "pttl"] } else { &[acquire] };
        assert_eq!(
            sent(&mut monitor, &server).await,
            refused,
            "refused acquire (hint {hint})"
        );
        assert_eq!(b.renew("k", &mine, ttl).await.unwrap(), RenewOutcome::Renewed);
        assert_eq!(sent(&mut monitor, &server).await, ["cas"], "renew");
        assert_eq!(b.release("k", &mine).await.unwrap(), ReleaseOutcome::Released);
        // The native compare-and-delete alone, with release notifications
        // or without: nobody waited.
        assert_eq!(
            sent(&mut monitor, &server).await,
            ["cad"],
            "release (notifications {notify})"
        );
        alive.push(b);
    }
}

/// A contended release on Tair is still the native `CAD`, which misses the
/// value the waiter marked, and only then one release script that deletes
/// the key and wakes the waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contended_release_is_cad_then_one_wake_script() {
    use lock_testkit::server::Monitor;
    let server = common::tair_server().await;
    let holder = common::connect(common::builder(&server.url())).await;
    let waiter = Arc::new(common::connect(common::builder(&server.url())).await);
    let ttl = Duration::from_secs(30);
    let mine = token();
    let AcquireOutcome::Acquired(_) = holder.try_acquire("k", &mine, ttl).await.unwrap() else {
        panic!("acquire")
    };
    let w = waiter.clone();
    let woken = tokio::spawn(async move { w.wait_for_release("k", Duration::from_secs(60)).await });
    // The waiter is registered once its marker exists.
    let mut raw = server.client().await.unwrap();
    for _ in 0..500 {
        if raw.cmd(&["EXISTS", "verrou:tair:waiting:k"]).await.unwrap().as_int() == Some(1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut monitor = Monitor::start(&server).await.unwrap();
    assert_eq!(holder.release("k", &mine).await.unwrap(), ReleaseOutcome::Released);
    tokio::time::timeout(Duration::from_secs(20), woken)
        .await
        .expect("the release woke the waiter (its own timer is 60 s)")
        .unwrap();
    let commands: Vec<String> = monitor
        .client_commands(&server)
        .await
        .unwrap()
        .into_iter()
        // The waiter's one look at the key (a script on the key alone,
        // RECHECK_MS after its registration) can land among the release's
        // commands on a loaded machine; the release script has six keys.
        .filter(|args| !(args[0] == "evalsha" && args.get(2).is_some_and(|n| n == "1")))
        .map(|args| args[0].clone())
        .collect();
    assert_eq!(commands[..2], ["cad", "evalsha"], "{commands:?}");
}

/// A waiter that registers while the key is being released is never left
/// asleep: its registration (`MARK_WAITING`) either runs before the `CAD`,
/// which then misses the value it marked and leaves the release to the
/// script that sees its marker, or after it, and finds the key gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_registering_during_a_release_is_never_left_asleep() {
    let server = common::tair_server().await;
    let holder = Arc::new(common::connect(common::builder(&server.url())).await);
    let waiter = Arc::new(common::connect(common::builder(&server.url())).await);
    let ttl = Duration::from_secs(30);
    // Warm-up: the waiter's subscription is open, the scripts are cached.
    let t = token();
    holder.try_acquire("warm", &t, ttl).await.unwrap();
    let w = waiter.clone();
    let warm = tokio::spawn(async move { w.wait_for_release("warm", Duration::from_millis(50)).await });
    warm.await.unwrap();
    holder.release("warm", &t).await.unwrap();
    for round in 0..300u32 {
        let key = format!("race:{round}");
        let mine = token();
        let AcquireOutcome::Acquired(_) = holder.try_acquire(&key, &mine, ttl).await.unwrap() else {
            panic!("acquire")
        };
        let (w, k) = (waiter.clone(), key.clone());
        let wait = tokio::spawn(async move { w.wait_for_release(&k, Duration::from_secs(60)).await });
        // Vary which reaches the server first.
        for _ in 0..round % 5 {
            tokio::task::yield_now().await;
        }
        let (h, k) = (holder.clone(), key.clone());
        let release = tokio::spawn(async move { h.release(&k, &mine).await });
        assert_eq!(release.await.unwrap().unwrap(), ReleaseOutcome::Released);
        tokio::time::timeout(Duration::from_secs(20), wait)
            .await
            .unwrap_or_else(|_| panic!("round {round}: the waiter slept through the release (its timer is 60 s)"))
            .unwrap();
    }
}
