//! The waiter's mark (`lock_redis_family::wake::WAITER_MARK`): a waiter
//! that registers on a held key appends it to the key's value (its TTL
//! kept), so the holder's native `CAD` misses and only then does the holder
//! run the release script. Its holder still renews, renews in batches,
//! inspects and releases the marked key; a stale holder still cannot; a
//! multi-key lock whose key a mutex waiter marked still renews and
//! releases; a key that changed hands after the waiter registered is marked
//! by the waiter's one look at the key; and a backend without
//! notifications holds keys other backends' waiters mark.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use crate::common;

use std::time::Duration;

use lock_core::raw::MultiLockBackend;
use lock_core::{AcquireOutcome, LockBackend, LockToken, ReleaseOutcome, RenewOutcome};
use lock_redis_family::wake::{STARVING_MS, WAITER_MARK};
use lock_tair::TairBackend;
use lock_testkit::server::RedisServer;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use common::{builder, connect, tair_server};

const LONG: Duration = Duration::from_secs(60);

fn token() -> LockToken {
    LockToken::generate().expect("token")
}

async fn value(server: &RedisServer, key: &str) -> Option<String> {
    let reply = server.cmd(&["GET", key]).await.unwrap();
    reply.as_bytes().map(|b| String::from_utf8_lossy(b).into_owned())
}

async fn pttl(server: &RedisServer, key: &str) -> i64 {
    server.cmd(&["PTTL", key]).await.unwrap().as_int().expect("PTTL")
}

/// Waits (bounded) until `key`'s value is `holder`'s token with the mark.
async fn until_marked(server: &RedisServer, key: &str, holder: &LockToken) {
    let marked = format!("{}{WAITER_MARK}", holder.to_hex());
    let give_up = Instant::now() + Duration::from_secs(10);
    while value(server, key).await.as_deref() != Some(marked.as_str()) {
        assert!(
            Instant::now() < give_up,
            "the waiter never marked {key:?}: {:?}",
            value(server, key).await
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A waiter of its own backend on `key`, with a 60 s timer: how long it
/// waited.
fn waiter(backend: TairBackend, key: &'static str) -> JoinHandle<Duration> {
    tokio::spawn(async move {
        let started = Instant::now();
        backend.wait_for_release(key, LONG).await;
        started.elapsed()
    })
}

/// Its wait ended well before its 60 s timer: a release woke it.
async fn woken(waiter: JoinHandle<Duration>) {
    let waited = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("woken by the release, not by its 60 s timer")
        .unwrap();
    assert!(waited < Duration::from_secs(20));
}

async fn acquired(backend: &TairBackend, key: &str, token: &LockToken, ttl: Duration) {
    assert!(
        matches!(
            backend.try_acquire(key, token, ttl).await.unwrap(),
            AcquireOutcome::Acquired(_)
        ),
        "{key} should be free"
    );
}

/// A waiter marks the holder's value with its TTL kept; the holder renews
/// it (single and batched, the mark kept) and inspects it as held; a stale
/// holder's release and renewals miss it; the holder's release wakes the
/// waiter and frees the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marked_key_is_renewed_inspected_and_released_by_its_holder_only() {
    let server = tair_server().await;
    let holder = connect(builder(&server.url())).await;
    let (stale, mine) = (token(), token());
    acquired(&holder, "m", &stale, Duration::from_millis(50)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    acquired(&holder, "m", &mine, Duration::from_secs(30)).await;
    let w = waiter(connect(builder(&server.url())).await, "m");
    until_marked(&server, "m", &mine).await;
    let marked = format!("{}{WAITER_MARK}", mine.to_hex());
    assert!(pttl(&server, "m").await > 20_000, "the mark keeps the TTL");

    assert_eq!(holder.renew("m", &mine, LONG).await.unwrap(), RenewOutcome::Renewed);
    assert!(pttl(&server, "m").await > 30_000, "renewed");
    assert_eq!(value(&server, "m").await.as_deref(), Some(marked.as_str()));
    let batch = holder.renew_many(&[("m", &mine)], Duration::from_secs(90)).await;
    assert!(matches!(batch.as_slice(), [Ok(RenewOutcome::Renewed)]), "{batch:?}");
    assert!(pttl(&server, "m").await > 60_000, "renewed in a batch");
    assert_eq!(value(&server, "m").await.as_deref(), Some(marked.as_str()));
    let info = holder.inspect("m").await.unwrap();
    assert!(info.held, "{info:?}");

    assert_eq!(
        holder.renew("m", &stale, LONG).await.unwrap(),
        RenewOutcome::HeldByOther
    );
    let batch = holder.renew_many(&[("m", &stale)], LONG).await;
    assert!(matches!(batch.as_slice(), [Ok(RenewOutcome::HeldByOther)]), "{batch:?}");
    assert_eq!(holder.release("m", &stale).await.unwrap(), ReleaseOutcome::HeldByOther);
    assert_eq!(value(&server, "m").await.as_deref(), Some(marked.as_str()), "untouched");

    // The waiter has waited the starvation bound (a precondition, not a
    // timing assertion): the release reserves the key for it and wakes it.
    tokio::time::sleep(Duration::from_millis(3 * STARVING_MS)).await;
    assert_eq!(holder.release("m", &mine).await.unwrap(), ReleaseOutcome::Released);
    woken(w).await;
    let left = value(&server, "m").await;
    assert!(
        left.as_deref().is_none_or(|v| v.starts_with("verrou:reserved:")),
        "released: {left:?}"
    );
    assert_ne!(
        holder.release("m", &mine).await.unwrap(),
        ReleaseOutcome::Released,
        "released once"
    );
}

/// A multi-key lock's key marked by a mutex waiter: the set still renews
/// and releases (its scripts take the marked token as the token), and a
/// stale token's calls miss it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_key_lock_whose_key_a_waiter_marked_still_renews_and_releases() {
    let server = tair_server().await;
    let holder = connect(builder(&server.url())).await;
    let (mine, stale) = (token(), token());
    assert!(matches!(
        holder
            .try_acquire_all(&["ma", "mb"], &mine, Duration::from_secs(30))
            .await
            .unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    let w = waiter(connect(builder(&server.url())).await, "ma");
    until_marked(&server, "ma", &mine).await;
    assert_eq!(
        holder.renew_all(&["ma", "mb"], &stale, LONG).await.unwrap(),
        RenewOutcome::HeldByOther
    );
    assert_eq!(
        holder.release_all(&["ma", "mb"], &stale).await.unwrap(),
        ReleaseOutcome::HeldByOther
    );
    assert_eq!(
        holder.renew_all(&["ma", "mb"], &mine, LONG).await.unwrap(),
        RenewOutcome::Renewed
    );
    assert!(pttl(&server, "ma").await > 30_000, "renewed");
    assert!(matches!(
        holder.try_acquire_all(&["ma", "mb"], &token(), LONG).await.unwrap(),
        AcquireOutcome::Held { .. }
    ));
    assert_eq!(
        holder.release_all(&["ma", "mb"], &mine).await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(value(&server, "ma").await, None);
    assert_eq!(value(&server, "mb").await, None);
    // The multi-key release wakes nobody; the waiter's look after
    // RECHECK_MS finds the key free.
    tokio::time::timeout(Duration::from_secs(20), w)
        .await
        .expect("the waiter's recheck saw the key free")
        .unwrap();
}

/// A backend without release notifications holds a key that another
/// backend's waiter marks: its renewal and release still take it, and the
/// release wakes the waiter (the release script runs for a marked key
/// whatever the releaser's settings).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_without_notifications_renews_and_releases_a_marked_key() {
    let server = tair_server().await;
    let quiet = connect(builder(&server.url()).release_notifications(false)).await;
    assert!(!quiet.capabilities().release_notifications);
    let mine = token();
    acquired(&quiet, "q", &mine, Duration::from_secs(30)).await;
    let w = waiter(connect(builder(&server.url())).await, "q");
    until_marked(&server, "q", &mine).await;
    assert_eq!(quiet.renew("q", &mine, LONG).await.unwrap(), RenewOutcome::Renewed);
    tokio::time::sleep(Duration::from_millis(3 * STARVING_MS)).await;
    assert_eq!(quiet.release("q", &mine).await.unwrap(), ReleaseOutcome::Released);
    woken(w).await;
}

/// A key that changed hands after the waiter registered holds the new
/// holder's bare token (a release that found nobody starving wakes nobody,
/// and a newcomer's `SET NX` writes no mark): the waiter's one look at the
/// key after `RECHECK_MS` marks the new value, so the new holder's release
/// wakes it. The new value must land between the registration and the
/// look (`RECHECK_MS` apart): a round where it came too late is tried again
/// on another key, at most ten rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_changed_hands_after_the_registration_is_marked_by_the_waiters_recheck() {
    let server = tair_server().await;
    let holder = connect(builder(&server.url())).await;
    let waiting = connect(builder(&server.url())).await;
    // Warm-up, on another key: subscribed, scripts cached.
    let warm = token();
    acquired(&holder, "warm", &warm, LONG).await;
    waiting.wait_for_release("warm", Duration::from_millis(200)).await;
    for round in 0..10 {
        let key: &'static str = Box::leak(format!("n:{round}").into_boxed_str());
        let first = token();
        acquired(&holder, key, &first, LONG).await;
        let w = waiter(waiting.clone(), key);
        until_marked(&server, key, &first).await;
        // The key changes hands (as a release and a newcomer's `SET NX`
        // would, without waking the waiter).
        let newcomer = token();
        let set = server
            .cmd(&["SET", key, &newcomer.to_hex(), "PX", "60000"])
            .await
            .unwrap();
        assert!(set.is_ok());
        let marked = format!("{}{WAITER_MARK}", newcomer.to_hex());
        let look = Instant::now() + Duration::from_secs(1);
        while Instant::now() < look && value(&server, key).await.as_deref() != Some(marked.as_str()) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if value(&server, key).await.as_deref() != Some(marked.as_str()) {
            // The look came before the new value: another round.
            w.abort();
            continue;
        }
        assert!(pttl(&server, key).await > 30_000, "the mark keeps the TTL");
        tokio::time::sleep(Duration::from_millis(3 * STARVING_MS)).await;
        assert_eq!(holder.release(key, &newcomer).await.unwrap(), ReleaseOutcome::Released);
        woken(w).await;
        return;
    }
    panic!("in ten rounds the waiter's look never marked the new holder's value");
}

/// Fencing on: a hand-off chain of three waiters (backoff 20 s, so only
/// releases move them) through the fenced acquire script, which takes a
/// key reserved for its process: each holder waited for the key, so its
/// release runs the release script (its registration leaves the wake set)
/// and wakes the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_waiters_hand_the_key_on_by_releases() {
    use lock_core::{Backoff, LockManager, LockOptions};
    let server = tair_server().await;
    let url = server.url();
    let holder = connect(builder(&url).fencing(true)).await;
    let mine = token();
    acquired(&holder, "f", &mine, LONG).await;
    let timer = Duration::from_secs(20);
    let options = LockOptions::with_ttl(Duration::from_millis(500))
        .backoff(Backoff::new(timer, timer).min(timer))
        .acquire_timeout(LONG);
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let m = LockManager::with_options(connect(builder(&url).fencing(true)).await, options.clone()).unwrap();
        waiters.push(tokio::spawn(async move {
            let g = m.lock("f").await.expect("woken waiter");
            assert!(g.fencing_token().is_some());
            g.release().await.expect("release");
        }));
    }
    let registered = Instant::now() + Duration::from_secs(10);
    while server.cmd(&["ZCARD", "verrou:tair:wake:f"]).await.unwrap().as_int() != Some(3) {
        assert!(Instant::now() < registered, "three waiters never registered");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(3 * STARVING_MS)).await;
    let released = Instant::now();
    assert_eq!(holder.release("f", &mine).await.unwrap(), ReleaseOutcome::Released);
    for w in waiters {
        tokio::time::timeout(Duration::from_secs(15), w)
            .await
            .expect("the hand-offs came from releases, not the 20 s timers")
            .expect("waiter");
    }
    assert!(released.elapsed() < timer);
}

/// A release that leaves waiters registered (none starving yet: nobody
/// woken) tells its backend, whose next acquire of the key writes the
/// token already marked, so the holder that took the key right back wakes
/// them on release; a release that leaves none makes the next acquire bare
/// again. A round where the waiter took the key first (its look after
/// `RECHECK_MS`, or it was starving already) is tried again on another
/// key, at most ten rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_takes_the_key_back_from_its_waiters_marks_it() {
    let server = tair_server().await;
    let holder = connect(builder(&server.url())).await;
    let waiting = connect(builder(&server.url())).await;
    let warm = token();
    acquired(&holder, "warm", &warm, LONG).await;
    waiting.wait_for_release("warm", Duration::from_millis(200)).await;
    for round in 0..10 {
        let key: &'static str = Box::leak(format!("back:{round}").into_boxed_str());
        let first = token();
        acquired(&holder, key, &first, LONG).await;
        let w = waiter(waiting.clone(), key);
        until_marked(&server, key, &first).await;
        assert_eq!(holder.release(key, &first).await.unwrap(), ReleaseOutcome::Released);
        let again = token();
        if !matches!(
            holder.try_acquire(key, &again, LONG).await.unwrap(),
            AcquireOutcome::Acquired(_)
        ) {
            w.abort();
            continue;
        }
        let marked = format!("{}{WAITER_MARK}", again.to_hex());
        assert_eq!(
            value(&server, key).await.as_deref(),
            Some(marked.as_str()),
            "round {round}: taken back marked"
        );
        tokio::time::sleep(Duration::from_millis(3 * STARVING_MS)).await;
        assert_eq!(holder.release(key, &again).await.unwrap(), ReleaseOutcome::Released);
        woken(w).await;
        // That release left no waiter (the woken one left the wake set):
        // once the reservation is gone, the next acquire is bare again.
        let gone = server.cmd(&["DEL", key]).await.unwrap();
        assert!(gone.as_int().is_some());
        let last = token();
        acquired(&holder, key, &last, LONG).await;
        assert_eq!(value(&server, key).await, Some(last.to_hex()), "bare again");
        return;
    }
    panic!("in ten rounds the holder never took the key back before its waiter");
}
