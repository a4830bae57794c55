//! Semaphore cases: a permit's fencing token names one grant, also when its
//! holder's acquire is re-sent (the engine's retry with the same token).

use lock_core::LockToken;
use lock_core::raw::PermitRequest;
use lock_core::{AcquireOutcome, ReleaseOutcome};

use super::SemaphoreSuite;

fn fence_of(outcome: &AcquireOutcome) -> u64 {
    match outcome {
        AcquireOutcome::Acquired(lease) => lease.fencing_token.expect("every permit carries a fencing token").0,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// Holder A is granted (its first reply may have been lost), then B is
/// granted a later token, then A's acquire is sent again with its token
/// (a waiting call keeps one token across retries): A gets back its own
/// grant's token, never B's.
pub async fn refreshed_holder_gets_its_own_fencing_token(s: &SemaphoreSuite) {
    let name = s.key("refresh-fence");
    let backend = s.client().await;
    let (a, b) = (
        LockToken::generate().expect("token"),
        LockToken::generate().expect("token"),
    );
    let request = PermitRequest::new(2, 1).waiting(true);
    let first = fence_of(
        &backend
            .acquire_permits(&name, &a, request, s.ttl * 10)
            .await
            .expect("acquire a"),
    );
    let other = fence_of(
        &backend
            .acquire_permits(&name, &b, request, s.ttl * 10)
            .await
            .expect("acquire b"),
    );
    assert!(other > first, "b's token {other} after a's {first}");
    let again = fence_of(
        &backend
            .acquire_permits(&name, &a, request, s.ttl * 10)
            .await
            .expect("re-sent acquire a"),
    );
    assert_eq!(
        again, first,
        "a's re-sent acquire must answer with a's own grant's token, not b's ({other})"
    );
    for holder in [&a, &b] {
        assert_eq!(
            backend.release_permits(&name, holder).await.expect("release"),
            ReleaseOutcome::Released
        );
    }
}
