//! Fair mode without release notifications: nothing wakes the head of a
//! key's queue when the holder releases, so the backend tells it that it is
//! next (a zero `retry_after`) and the manager polls it on its backoff. The
//! waiter right behind it is told the same: when the head takes the key,
//! nothing tells the next one that it now heads the queue (told the
//! holder's remaining TTL, it slept up to a third of its claim after each
//! hand-off: 5 acquisitions/s on a hot key). The waiters further back keep
//! their entries at the claim's pace.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::raw::FairWaiter;

use lock_core::AcquireOutcome;
use lock_core::{LockBackend, LockToken};
use lock_postgres::PostgresBackend;
use lock_testkit::server::PostgresServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_head_of_the_queue_is_told_it_is_next() {
    let server = PostgresServer::start().await.expect("start postgres");
    let backend = PostgresBackend::builder(&server.url())
        .expect("url")
        .release_notifications(false)
        .build()
        .await
        .expect("connect");
    assert!(!backend.capabilities().release_notifications);
    let ttl = Duration::from_secs(10);
    let claim = Duration::from_secs(3);
    let holder = LockToken::generate().expect("token");
    let got = backend.try_acquire("fair-head", &holder, ttl).await.expect("acquire");
    assert!(matches!(got, AcquireOutcome::Acquired(_)), "{got:?}");

    let first = FairWaiter::new(LockToken::generate().expect("token"), claim);
    let second = FairWaiter::new(LockToken::generate().expect("token"), claim);
    let third = FairWaiter::new(LockToken::generate().expect("token"), claim);
    let try_fair = |waiter: FairWaiter| {
        let backend = backend.clone();
        async move {
            let token = LockToken::generate().expect("token");
            backend
                .try_acquire_fair("fair-head", &token, ttl, &waiter)
                .await
                .expect("an answer")
        }
    };
    let next = AcquireOutcome::Held {
        retry_after: Some(Duration::ZERO),
    };
    assert_eq!(try_fair(first).await, next, "the head");
    assert_eq!(try_fair(second).await, next, "right behind the head");
    match try_fair(third).await {
        AcquireOutcome::Held {
            retry_after: Some(left),
        } => {
            assert!(
                left > Duration::ZERO && left <= ttl,
                "further back: the holder's remaining TTL, {left:?}"
            );
        }
        other => panic!("further back: {other:?}"),
    }
    // Once the holder is gone, the head gets the key, the second waits on.
    backend.release("fair-head", &holder).await.expect("release");
    assert!(matches!(try_fair(second).await, AcquireOutcome::Held { .. }));
    assert!(matches!(try_fair(first).await, AcquireOutcome::Acquired(_)));
}
