//! Fencing tokens grow in the order the lock is granted, under contention:
//! many clients retry one key while its holders release it at once, so
//! acquires often wait on a concurrent release or acquire of the key.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{LockBackend, LockToken};

use lock_core::{AcquireOutcome, ReleaseOutcome};
use lock_postgres::PostgresBackend;
use lock_testkit::server::PostgresServer;

const CONTENDERS: usize = 16;
const RUN: Duration = Duration::from_secs(3);
const TTL: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_grow_in_grant_order_on_a_contended_key() {
    let server = PostgresServer::start().await.expect("start postgres");
    let mut tasks = Vec::with_capacity(CONTENDERS);
    let start = Instant::now();
    for _ in 0..CONTENDERS {
        let backend = Arc::new(PostgresBackend::connect(&server.url()).await.expect("connect"));
        tasks.push(tokio::spawn(async move {
            // (acquire returned, fence): holds never overlap, so the order
            // of the returns is the order of the grants.
            let mut grants = Vec::new();
            while start.elapsed() < RUN {
                let token = LockToken::generate().expect("token");
                match backend.try_acquire("hot", &token, TTL).await.expect("acquire") {
                    AcquireOutcome::Acquired(lease) => {
                        let fence = lease.fencing_token.expect("postgres always fences").0;
                        grants.push((Instant::now(), fence));
                        tokio::task::yield_now().await;
                        let released = backend.release("hot", &token).await.expect("release");
                        assert_eq!(released, ReleaseOutcome::Released);
                    }
                    _ => tokio::task::yield_now().await,
                }
            }
            grants
        }));
    }
    let mut grants = Vec::new();
    for t in tasks {
        grants.extend(t.await.expect("task"));
    }
    grants.sort_by_key(|g| g.0);
    assert!(grants.len() > 10, "too few grants: {}", grants.len());
    for pair in grants.windows(2) {
        assert!(
            pair[1].1 > pair[0].1,
            "fencing token {} granted after {} ({} grants)",
            pair[1].1,
            pair[0].1,
            grants.len()
        );
    }
}
