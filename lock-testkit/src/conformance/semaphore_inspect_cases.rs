//! Semaphore cases: the permits in use, read without taking any
//! ([`lock_core::SemaphoreManager::inspect`]). A backend that cannot read
//! them must say so with `Unsupported`.

use std::time::Duration;

use lock_core::Error;
use lock_core::ReleaseOutcome;
use tokio::time::Instant;

use super::SemaphoreSuite;

/// Live permits are counted (holders, permits, size); a released holder's
/// and an expired one's are not; inspecting draws no fencing token (the
/// next permit's token is above the last one).
pub async fn inspect_counts_live_permits(s: &SemaphoreSuite) {
    let name = s.key("sem-inspect");
    // Renewed permits, released by the case; `two` alone is left to expire.
    let m = s.manager(s.options()).await;
    let unrenewed = s.manager(s.manual()).await;
    let empty = match m.inspect(&name).await {
        Ok(seen) => seen,
        Err(Error::Unsupported { what, .. }) => {
            assert!(!what.is_empty(), "an Unsupported inspect must give its reason");
            return;
        }
        Err(e) => panic!("inspect failed: {e:?}"),
    };
    assert_eq!((empty.in_use, empty.holders, empty.size), (0, 0, None));
    let sem = m.semaphore(&name, 3).expect("semaphore");
    let two = unrenewed
        .semaphore(&name, 3)
        .expect("semaphore")
        .acquire(2)
        .await
        .expect("two permits");
    let one = sem.acquire(1).await.expect("one permit");
    let seen = m.inspect(&name).await.expect("inspect");
    assert_eq!((seen.in_use, seen.holders, seen.size), (3, 2, Some(3)), "{seen:?}");
    let last = one.fencing_token();
    assert_eq!(one.release().await.expect("release"), ReleaseOutcome::Released);
    for _ in 0..3 {
        let seen = m.inspect(&name).await.expect("inspect");
        assert_eq!((seen.in_use, seen.holders), (2, 1), "{seen:?}");
    }
    let next = sem.acquire(1).await.expect("a permit after the inspections");
    assert!(next.fencing_token() > last, "{:?} after {last:?}", next.fencing_token());
    assert_eq!(next.release().await.expect("release"), ReleaseOutcome::Released);
    // `two` is not renewed: its permits come back at its lease's end.
    let deadline = Instant::now() + s.ttl * 20 + Duration::from_secs(2);
    loop {
        let seen = m.inspect(&name).await.expect("inspect");
        if seen.in_use == 0 {
            assert_eq!((seen.holders, seen.size), (0, None), "{seen:?}");
            break;
        }
        assert!(Instant::now() < deadline, "an expired holder still counts: {seen:?}");
        tokio::time::sleep(s.ttl / 4).await;
    }
    drop(two);
}
