//! What the conformance suites do not see: create-if-absent after a delete
//! (two creators, one winner), TTLs on the server (rounded up, present on a
//! lock re-created after a release), markers that end, wake-ups from the
//! watch, escaping, buckets, own clients.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{Error, LockBackend, LockToken};
use lock_nats::NatsBackend;
use lock_testkit::server::NatsCluster;

use crate::common;

fn token() -> LockToken {
    LockToken::generate().unwrap()
}

fn key(name: &str) -> String {
    format!("behaviour:{name}:{}", token().to_hex())
}

/// The stored message of lock `key` in `bucket` (a raw read by subject).
async fn stored(cluster: &NatsCluster, bucket: &str, key: &str) -> Option<jetstream::message::StreamMessage> {
    let client = async_nats::connect(cluster.addr(0)).await.unwrap();
    let js = jetstream::new(client);
    let stream = js.get_stream(format!("KV_{bucket}")).await.unwrap();
    stream
        .get_last_raw_message_by_subject(&format!("$KV.{bucket}.l.{}", escape(key)))
        .await
        .ok()
}

/// The crate's escaping, for the raw reads (letters, digits, '-', '_').
fn escape(key: &str) -> String {
    key.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
                char::from(b).to_string()
            } else {
                format!("={b:02X}")
            }
        })
        .collect()
}

/// Two clients race for `key` after each of `rounds` releases (or
/// expiries): exactly one wins every time, the other is told `Held`.
async fn two_creators_after_a_delete(cluster: &NatsCluster, bucket: &str, expire: bool) {
    let url = common::url(cluster, bucket);
    let (a, b) = (common::connect(url.clone()).await, common::connect(url).await);
    let k = key("create-after-delete");
    let ttl = Duration::from_secs(1);
    for round in 0..if expire { 3 } else { 20 } {
        let first = token();
        let AcquireOutcome::Acquired(_) = a.try_acquire(&k, &first, ttl).await.unwrap() else {
            panic!("round {round}: the free key was not granted");
        };
        if expire {
            // The server ends it after its TTL and leaves its own marker.
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while stored(cluster, bucket, &k)
                .await
                .is_some_and(|m| m.headers.get("Nats-Marker-Reason").is_none())
            {
                assert!(std::time::Instant::now() < deadline, "the TTL never ran out");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        } else {
            assert_eq!(a.release(&k, &first).await.unwrap(), ReleaseOutcome::Released);
        }
        let (ta, tb) = (token(), token());
        let (ra, rb) = tokio::join!(a.try_acquire(&k, &ta, ttl), b.try_acquire(&k, &tb, ttl));
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        let won = [&ra, &rb]
            .iter()
            .filter(|r| matches!(r, AcquireOutcome::Acquired(_)))
            .count();
        assert_eq!(won, 1, "round {round}: {ra:?} / {rb:?}");
        for (backend, t) in [(&a, ta), (&b, tb)] {
            let _ = backend.release(&k, &t).await.unwrap();
        }
    }
}

#[tokio::test]
async fn two_creators_after_a_release_have_one_winner() {
    two_creators_after_a_delete(common::single().await, "single", false).await;
}

#[tokio::test]
async fn two_creators_after_a_release_have_one_winner_on_r3() {
    two_creators_after_a_delete(common::three().await, "r3", false).await;
}

#[tokio::test]
async fn two_creators_after_an_expiry_have_one_winner() {
    two_creators_after_a_delete(common::single().await, "single", true).await;
}

/// A lock re-created over a delete marker carries its TTL (async-nats'
/// `create_with_ttl` re-creates through `update`, without one), and every
/// TTL is rounded up to whole seconds (the client's `as_secs()` rounds
/// down).
#[tokio::test]
async fn a_lock_taken_after_a_release_carries_its_ttl_rounded_up() {
    let cluster = common::single().await;
    let backend = common::connect(common::url(cluster, "single")).await;
    let k = key("ttl-after-release");
    let first = token();
    assert!(matches!(
        backend.try_acquire(&k, &first, Duration::from_secs(5)).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    assert_eq!(backend.release(&k, &first).await.unwrap(), ReleaseOutcome::Released);
    let marker = stored(cluster, "single", &k).await.expect("the release's marker");
    assert_eq!(marker.headers.get("KV-Operation").map(|v| v.as_str()), Some("DEL"));
    assert_eq!(
        marker.headers.get("Nats-TTL").map(|v| v.as_str()),
        Some("1s"),
        "the marker ends"
    );

    let second = token();
    let AcquireOutcome::Acquired(lease) = backend
        .try_acquire(&k, &second, Duration::from_millis(1500))
        .await
        .unwrap()
    else {
        panic!("a released key is free");
    };
    let m = stored(cluster, "single", &k).await.expect("the lock");
    assert_eq!(
        m.headers.get("Nats-TTL").map(|v| v.as_str()),
        Some("2s"),
        "1.5 s rounds up"
    );
    assert_eq!(
        backend.renew(&k, &second, Duration::from_millis(2100)).await.unwrap(),
        RenewOutcome::Renewed
    );
    let m = stored(cluster, "single", &k).await.expect("the renewed lock");
    assert_eq!(
        m.headers.get("Nats-TTL").map(|v| v.as_str()),
        Some("3s"),
        "a renewal sends its TTL"
    );
    // The renewal keeps the holder's token and carries its fencing token
    // (the acquire's revision), which a read reports.
    let mut expected = second.hex_bytes().to_vec();
    expected.extend_from_slice(format!(":{}", lease.fencing_token.expect("a fencing token").0).as_bytes());
    assert_eq!(m.payload.as_ref(), expected.as_slice());
    let seen = backend.inspect(&k).await.unwrap();
    assert_eq!((seen.held, seen.fencing_token), (true, lease.fencing_token));
    assert_eq!(seen.remaining, Some(Duration::from_secs(3)), "the whole Nats-TTL");
    // Nobody renews it: it ends on the server, and another takes it.
    let other = common::connect(common::url(cluster, "single")).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let AcquireOutcome::Acquired(_) = other.try_acquire(&k, &token(), Duration::from_secs(1)).await.unwrap() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the re-created lock never expired"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What async-nats itself does, which this crate writes around (the claims
/// in the crate docs): `create_with_ttl` over a deleted key stores a value
/// without a TTL, and sends its TTL rounded down to whole seconds.
#[tokio::test]
async fn the_clients_create_with_ttl_after_a_delete_stores_no_ttl() {
    let cluster = common::single().await;
    // The backend made the bucket (per-key TTL on).
    let _ = common::connect(common::url(cluster, "single")).await;
    let js = jetstream::new(async_nats::connect(cluster.addr(0)).await.unwrap());
    let kv = js.get_key_value("single").await.unwrap();
    let k = format!("raw-{}", token().to_hex());
    kv.create_with_ttl(&k, "a".into(), Duration::from_secs(30))
        .await
        .unwrap();
    let fresh = kv
        .stream
        .get_last_raw_message_by_subject(&format!("$KV.single.{k}"))
        .await
        .unwrap();
    assert!(
        fresh.headers.get("Nats-TTL").is_some(),
        "a first create carries the TTL"
    );
    kv.delete(&k).await.unwrap();
    kv.create_with_ttl(&k, "b".into(), Duration::from_secs(30))
        .await
        .unwrap();
    let again = kv
        .stream
        .get_last_raw_message_by_subject(&format!("$KV.single.{k}"))
        .await
        .unwrap();
    assert!(again.headers.get("Nats-TTL").is_none(), "{:?}", again.headers);
    // And its TTL is `as_secs()`: 1.5 s is sent as 1 (rounded down).
    let short = format!("raw-short-{}", token().to_hex());
    kv.create_with_ttl(&short, "a".into(), Duration::from_millis(1500))
        .await
        .unwrap();
    let m = kv
        .stream
        .get_last_raw_message_by_subject(&format!("$KV.single.{short}"))
        .await
        .unwrap();
    assert_eq!(m.headers.get("Nats-TTL").map(|v| v.as_str()), Some("1"));
}

#[tokio::test]
async fn ttls_below_a_second_are_refused() {
    let backend = common::connect(common::url(common::single().await, "single")).await;
    let err = backend
        .try_acquire(&key("short"), &token(), Duration::from_millis(900))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(err.to_string().contains("minimum of 1 s"), "{err}");
}

/// A release's marker, and the server's when a TTL runs out, end after the
/// bucket's marker TTL: nothing of a lock stays on the server.
#[tokio::test]
async fn markers_end_after_the_marker_ttl() {
    let cluster = common::single().await;
    let backend = common::connect(common::url(cluster, "single")).await;
    let (released, expired) = (key("marker-released"), key("marker-expired"));
    let t = token();
    assert!(matches!(
        backend
            .try_acquire(&released, &t, Duration::from_secs(1))
            .await
            .unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    assert_eq!(backend.release(&released, &t).await.unwrap(), ReleaseOutcome::Released);
    assert!(matches!(
        backend
            .try_acquire(&expired, &token(), Duration::from_secs(1))
            .await
            .unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for k in [&released, &expired] {
        while stored(cluster, "single", k).await.is_some() {
            assert!(std::time::Instant::now() < deadline, "{k}: a message stays");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    assert_eq!(backend.remembered_leases(), 1, "the expired lease, never released");
    assert_eq!(
        backend.release(&expired, &token()).await.unwrap(),
        ReleaseOutcome::Missing
    );
}

/// A waiter wakes on the release (the watch), not on renewals, and not by
/// its timer.
#[tokio::test]
async fn a_release_wakes_a_waiter_and_a_renewal_does_not() {
    let url = common::url(common::single().await, "single");
    let holder = common::connect(url.clone()).await;
    let waiter = Arc::new(common::connect(url).await);
    let k = key("wake");
    let t = token();
    let ttl = Duration::from_secs(60);
    assert!(matches!(
        holder.try_acquire(&k, &t, ttl).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    let waiting = {
        let (waiter, k) = (Arc::clone(&waiter), k.clone());
        tokio::spawn(async move { waiter.wait_for_release(&k, Duration::from_secs(600)).await })
    };
    // Give the watch time to start: a renewal before it would not be seen
    // anyway, one after it must not wake it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..3 {
        assert_eq!(holder.renew(&k, &t, ttl).await.unwrap(), RenewOutcome::Renewed);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "a renewal woke the waiter");
    assert_eq!(holder.release(&k, &t).await.unwrap(), ReleaseOutcome::Released);
    tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("the release did not wake the waiter")
        .unwrap();
    assert_eq!(holder.remembered_leases(), 0);
}

/// Keys become subjects one-to-one: `a.b` and `a=2Eb` are two locks, and
/// any key (spaces, `*`, `>`, non-ASCII) works.
#[tokio::test]
async fn keys_are_escaped_one_to_one() {
    let backend = common::connect(common::url(common::single().await, "single")).await;
    let base = key("esc");
    for k in [format!("{base}a.b"), format!("{base}a=2Eb"), format!("{base} * > é")] {
        assert!(
            matches!(
                backend.try_acquire(&k, &token(), Duration::from_secs(5)).await.unwrap(),
                AcquireOutcome::Acquired(_)
            ),
            "{k}"
        );
    }
    let long = "é".repeat(600);
    let err = backend
        .try_acquire(&long, &token(), Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("NATS subject"), "{err}");
}

#[tokio::test]
async fn capabilities_say_what_this_backend_does() {
    let backend = common::connect(common::url(common::single().await, "single")).await;
    let caps = backend.capabilities();
    assert_eq!(caps.name, "nats");
    assert!(caps.fencing_tokens && caps.release_notifications && caps.native_compare_and_delete);
    assert!(
        !caps.replica_ack,
        "JetStream acknowledges after its quorum: nothing to wait for"
    );
    assert!(!caps.fair_queue && !caps.semaphores && !caps.rw_locks && !caps.multi_key_locks && !caps.leader_election);
    assert_eq!(caps.min_ttl, Duration::from_secs(1));
    assert_eq!(backend.replicas(), 1);
}

/// Fair mode is refused with its reason (the fair suite checks the typed
/// refusal through the manager).
#[tokio::test]
async fn fair_mode_is_refused_with_its_reason() {
    let backend = common::connect(common::url(common::single().await, "single")).await;
    let waiter = lock_core::raw::FairWaiter::new(token(), Duration::from_secs(5));
    let err = backend
        .try_acquire_fair(&key("fair"), &token(), Duration::from_secs(5), &waiter)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    assert!(err.to_string().contains("conditional publish"), "{err}");
}

#[tokio::test]
async fn the_r3_bucket_has_three_replicas() {
    let backend = common::connect(common::url(common::three().await, "r3")).await;
    assert_eq!(backend.replicas(), 3);
}

/// A bucket made by another tool without per-key TTL is refused: a lock
/// there would never expire.
#[tokio::test]
async fn a_bucket_without_per_key_ttl_is_refused() {
    let cluster = common::single().await;
    let js = jetstream::new(async_nats::connect(cluster.addr(0)).await.unwrap());
    js.create_key_value(jetstream::kv::Config {
        bucket: "no-ttl".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let err = NatsBackend::connect(&common::url(cluster, "no-ttl")).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(err.to_string().contains("without per-key TTL"), "{err}");
}

/// The caller's own client or JetStream context, with the bucket settings
/// of the builder.
#[tokio::test]
async fn own_clients_are_used_as_they_are() {
    let cluster = common::single().await;
    let client = async_nats::connect(cluster.addr(0)).await.unwrap();
    let from_client = NatsBackend::builder_with_client(client.clone())
        .bucket("own")
        .build()
        .await
        .unwrap();
    let js = jetstream::new(client);
    let from_context = NatsBackend::builder_with_client(js)
        .bucket("own")
        .build()
        .await
        .unwrap();
    let k = key("own");
    let t = token();
    assert!(matches!(
        from_client.try_acquire(&k, &t, Duration::from_secs(5)).await.unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    assert!(matches!(
        from_context
            .try_acquire(&k, &token(), Duration::from_secs(5))
            .await
            .unwrap(),
        AcquireOutcome::Held { .. }
    ));
    // The other client does not remember the lease: it reads the holder.
    assert_eq!(from_context.release(&k, &t).await.unwrap(), ReleaseOutcome::Released);
}

/// No server answering: a typed backend error, the password hidden.
#[tokio::test]
async fn a_dead_server_is_a_backend_error_without_the_password() {
    let err = NatsBackend::connect("nats://alice:hunter2@127.0.0.1:1?connect_timeout=300ms")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err}");
    let text = format!("{err} {err:?}");
    assert!(!text.contains("hunter2"), "{text}");
}

/// The server never ends a lock before its TTL (counted from before the
/// acquire was sent): the holder's local deadline is always the earlier.
/// Load can only make the expiry later, so the bound is safe to assert.
#[tokio::test]
async fn the_server_never_expires_a_lock_before_its_ttl() {
    let cluster = common::single().await;
    let backend = common::connect(common::url(cluster, "single")).await;
    for ttl_ms in [1000u64, 1400, 2000] {
        let k = key("early");
        let ttl = Duration::from_millis(ttl_ms);
        let sent = std::time::Instant::now();
        assert!(matches!(
            backend.try_acquire(&k, &token(), ttl).await.unwrap(),
            AcquireOutcome::Acquired(_)
        ));
        let deadline = sent + Duration::from_secs(20);
        loop {
            let live = stored(cluster, "single", &k)
                .await
                .is_some_and(|m| m.headers.get("Nats-Marker-Reason").is_none());
            let now = std::time::Instant::now();
            if !live {
                assert!(now - sent >= ttl, "{ttl:?} lock gone after {:?}", now - sent);
                break;
            }
            assert!(now < deadline, "{ttl:?}: never expired");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
