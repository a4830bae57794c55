//! Read-write lock cases: readers and writer, read without taking the lock
//! ([`lock_core::RwLockManager::inspect`]). A backend that cannot read them
//! must say so with `Unsupported`.

use lock_core::Error;
use lock_core::ReleaseOutcome;

use super::RwSuite;

/// Live readers are counted, a writer is reported (with its fencing token
/// where the backend keeps it with the writer), released holders are not;
/// inspecting draws no fencing token (the next writer's is above).
pub async fn inspect_reports_readers_and_writer(s: &RwSuite) {
    let name = s.key("rw-inspect");
    let m = s.manager(s.options()).await;
    let free = match m.inspect(&name).await {
        Ok(seen) => seen,
        Err(Error::Unsupported { what, .. }) => {
            assert!(!what.is_empty(), "an Unsupported inspect must give its reason");
            return;
        }
        Err(e) => panic!("inspect failed: {e:?}"),
    };
    assert_eq!((free.readers, free.writer), (0, false), "{free:?}");
    let (r1, r2) = (
        m.read(&name).await.expect("reader"),
        m.read(&name).await.expect("reader"),
    );
    let seen = m.inspect(&name).await.expect("inspect");
    assert_eq!((seen.readers, seen.writer), (2, false), "{seen:?}");
    assert_eq!(r1.release().await.expect("release"), ReleaseOutcome::Released);
    assert_eq!(r2.release().await.expect("release"), ReleaseOutcome::Released);
    let w = m.write(&name).await.expect("writer");
    let seen = m.inspect(&name).await.expect("inspect");
    assert!(seen.writer && seen.readers == 0, "{seen:?}");
    if let Some(token) = seen.writer_fencing_token {
        assert_eq!(Some(token), w.fencing_token(), "the writer's own token");
    }
    let last = w.fencing_token();
    assert_eq!(w.release().await.expect("release"), ReleaseOutcome::Released);
    for _ in 0..3 {
        let seen = m.inspect(&name).await.expect("inspect");
        assert_eq!((seen.readers, seen.writer), (0, false), "{seen:?}");
    }
    let next = m.write(&name).await.expect("writer again");
    assert!(next.fencing_token() > last, "{:?} after {last:?}", next.fencing_token());
    assert_eq!(next.release().await.expect("release"), ReleaseOutcome::Released);
}
