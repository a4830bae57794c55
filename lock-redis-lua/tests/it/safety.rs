//! Safety regressions of the Lua backend (issue 11): helper keys that
//! collided with user keys, write scripts failing after their first write,
//! renewals of a key of another type.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::{Error, LockBackend, LockManager, LockOptions, LockToken, VersionedStore};

use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_redis_lua::{RedisLuaBackend, RedisLuaBuilder};
use lock_testkit::server::RedisServer;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(30);

async fn server() -> RedisServer {
    RedisServer::builder().start().await.expect("start redis-server")
}

async fn backend(url: String, fencing: bool) -> RedisLuaBackend {
    RedisLuaBuilder::url(url)
        .fencing(fencing)
        .build()
        .await
        .expect("connect")
}

fn token() -> LockToken {
    LockToken::generate().expect("token")
}

async fn acquire(backend: &RedisLuaBackend, key: &str, token: &LockToken) {
    match backend.try_acquire(key, token, TTL).await.expect("acquire") {
        AcquireOutcome::Acquired(_) => {}
        other => panic!("{key} should be free: {other:?}"),
    }
}

/// What the server holds at `key` (`GET`), `None` when missing.
async fn value_of(server: &RedisServer, key: &str) -> Option<String> {
    let reply = server.cmd(&["GET", key]).await.expect("GET");
    reply.as_str().map(str::to_owned)
}

/// Issue 11 item 10: the release of `p7` (release notifications on, a
/// waiter's marker present) deleted another client's lock named
/// `{p7}:waiting`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_never_deletes_a_user_lock_named_like_its_waiter_marker() {
    let server = server().await;
    let a = RedisLuaBuilder::url(server.url())
        .release_notifications(true)
        .build()
        .await
        .expect("connect");
    let b = backend(server.url(), false).await;
    let (mine, theirs) = (token(), token());
    acquire(&b, "{p7}:waiting", &theirs).await;
    acquire(&a, "p7", &mine).await;
    // A waiter on p7 (its wait times out: nobody releases meanwhile).
    a.wait_for_release("p7", Duration::from_millis(50)).await;
    assert_eq!(a.release("p7", &mine).await.expect("release"), ReleaseOutcome::Released);
    assert_eq!(value_of(&server, "{p7}:waiting").await, Some(theirs.to_hex()));
    assert_eq!(
        b.renew("{p7}:waiting", &theirs, TTL).await.expect("renew"),
        RenewOutcome::Renewed
    );
}

/// Issue 11 item 10: a fenced acquire of `p7f` overwrote another client's
/// lock named `{p7f}:fence` with a number and no TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_acquire_never_overwrites_a_user_lock_named_like_its_fence() {
    let server = server().await;
    let fenced = backend(server.url(), true).await;
    let other = backend(server.url(), false).await;
    let (mine, theirs) = (token(), token());
    acquire(&other, "{p7f}:fence", &theirs).await;
    acquire(&fenced, "p7f", &mine).await;
    assert_eq!(value_of(&server, "{p7f}:fence").await, Some(theirs.to_hex()));
    let pttl = server.cmd(&["PTTL", "{p7f}:fence"]).await.expect("PTTL").as_int();
    assert!(pttl.is_some_and(|ms| ms > 0), "the user lock kept its TTL: {pttl:?}");
    assert_eq!(
        other.release("{p7f}:fence", &theirs).await.expect("release"),
        ReleaseOutcome::Released
    );
    // `a` and `{a}` do not share a fence counter either: both get tokens,
    // and a lock named after the other's helper key is a plain lock.
    acquire(&fenced, "{p7f}", &token()).await;
}

/// Issue 11 item 10: user keys inside the reserved helper prefix are
/// refused with `InvalidArgument`, by every operation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_in_the_reserved_prefix_are_refused() {
    let server = server().await;
    let backend = backend(server.url(), true).await;
    let key = "verrou:lua:fence:{p7}";
    let t = token();
    assert!(matches!(
        backend.try_acquire(key, &t, TTL).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(backend.release(key, &t).await, Err(Error::InvalidArgument(_))));
    assert!(matches!(
        backend.renew(key, &t, TTL).await,
        Err(Error::InvalidArgument(_))
    ));
    let many = backend.renew_many(&[(key, &t), ("free", &t)], TTL).await;
    assert!(matches!(many[0], Err(Error::InvalidArgument(_))), "{many:?}");
    assert!(matches!(many[1], Ok(RenewOutcome::Missing)), "{many:?}");
    assert!(matches!(backend.get(key).await, Err(Error::InvalidArgument(_))));
}

/// Issue 11 item 11: `ACQUIRE_FENCED` set the lock before it read a fence
/// key of another type, then failed as "nothing applied": the manager did
/// not clean up and the key stayed held by a token nobody owned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_acquire_failing_on_its_fence_key_leaves_no_lock_behind() {
    let server = server().await;
    let backend = backend(server.url(), true).await;
    let fence = RedisLuaBackend::fence_key("p11");
    server.cmd(&["HSET", &fence, "x", "1"]).await.expect("HSET");
    let locks = LockManager::with_options(backend.clone(), LockOptions::with_ttl(TTL)).expect("options");
    locks.try_lock("p11").await.expect_err("the fence key is a hash");
    // The manager's clean-up (if any) runs in the background: poll, bounded.
    let give_up = Instant::now() + Duration::from_secs(5);
    while value_of(&server, "p11").await.is_some() && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(value_of(&server, "p11").await, None, "a lock nobody owns");
}

/// Issue 11 item 12: a renewal of a key that now holds another type was
/// an error (retried until the deadline); it is a loss, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewing_a_key_of_another_type_is_a_loss_at_once() {
    let server = server().await;
    let backend = backend(server.url(), false).await;
    let t = token();
    acquire(&backend, "p12", &t).await;
    server.cmd(&["DEL", "p12"]).await.expect("DEL");
    server.cmd(&["HSET", "p12", "x", "1"]).await.expect("HSET");
    assert_eq!(
        backend.renew("p12", &t, TTL).await.expect("renew"),
        RenewOutcome::HeldByOther
    );
    let many = backend.renew_many(&[("p12", &t)], TTL).await;
    assert!(matches!(many[..], [Ok(RenewOutcome::HeldByOther)]), "{many:?}");
}

/// `calls` of `cmdstat_<command>` in `INFO commandstats` (0 if absent).
async fn calls(server: &RedisServer, command: &str) -> u64 {
    server.command_calls(command).await.expect("INFO commandstats")
}

/// Issue 11 item 8: an acquire that timed out on a paused server, with the
/// shared connection replaced meanwhile (two timeouts in a row), was
/// cleaned up on another connection; on resume the clean-up could run
/// before (or never, its connect timing out) the acquire it cleaned up
/// after, leaving the key held by a token nobody owned for its whole TTL.
/// The clean-up now goes out on the acquire's own connection, after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_up_release_runs_after_the_acquire_it_cleans_up() {
    let server = server().await;
    let backend = RedisLuaBuilder::url(server.url())
        .response_timeout(Duration::from_millis(100))
        .connect_timeout(Duration::from_millis(200))
        .build()
        .await
        .expect("connect");
    let locks = LockManager::with_options(backend.clone(), LockOptions::with_ttl(TTL)).expect("options");
    // Warm: the release script is cached, the connection open.
    let warm = locks.try_lock("warm").await.expect("lock").expect("free");
    warm.release().await.expect("release");
    let sets_before = calls(&server, "set").await;

    server.pause().expect("SIGSTOP");
    // One timeout on the shared connection already...
    backend.get("p8-read").await.expect_err("the server is paused");
    // ... so the acquire's timeout replaces it; the manager cleans up.
    locks.try_lock("p8").await.expect_err("the server is paused");
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.resume().expect("SIGCONT");

    // The acquire does run after the resume; the clean-up must run after it.
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let set_ran = calls(&server, "set").await > sets_before;
        let held = value_of(&server, "p8").await;
        if (set_ran && held.is_none()) || Instant::now() >= give_up {
            assert!(set_ran, "the acquire never reached the server");
            assert_eq!(held, None, "p8 is held by a token nobody owns");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
