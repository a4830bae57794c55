//! Batched renewal whatever the table's statistics say. After a burst of
//! locks came and went, autovacuum can analyze `locks` while it holds a few
//! rows but keeps its pages: the planner then takes the table for nearly
//! empty until the next analyze. Renewal as one `UPDATE … FROM unnest(…)`
//! join was then planned as a nested loop comparing every row with every
//! renewed key (measured in a benchmark run: 423 ms for 70 keys among
//! 7,737 rows), so a batch of 1,000 among 10,000 got no reply within the
//! response timeout and every lease was lost. Renewal is primary-key
//! lookups, one per key, whatever the statistics.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::{AcquireOutcome, RenewOutcome};
use lock_core::{LockBackend, LockToken};
use lock_postgres::PostgresBackend;
use lock_testkit::server::PostgresServer;

/// Rows of other holders' live leases.
const HELD: usize = 100_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_renews_whatever_the_statistics_say() {
    let server = PostgresServer::start().await.expect("start postgres");
    let backend = PostgresBackend::connect(&server.url()).await.expect("connect");
    let ttl = Duration::from_secs(60);
    // The state autovacuum leaves: many pages, statistics of a few rows
    // (the live rows at the end keep VACUUM from truncating the pages).
    let token = LockToken::generate().expect("token");
    let got = backend.try_acquire("first", &token, ttl).await.expect("acquire");
    assert!(matches!(got, AcquireOutcome::Acquired(_)), "{got:?}");
    server
        .psql(
            "ALTER TABLE verrou.locks SET (autovacuum_enabled = false); \
             INSERT INTO verrou.locks SELECT 'churn' || g, '\\x00', 0, now() + interval '1 hour' \
               FROM generate_series(1, 30000) g; \
             DELETE FROM verrou.locks WHERE key LIKE 'churn%' AND key NOT IN ('churn29999', 'churn30000')",
        )
        .await
        .expect("churn");
    server.psql("VACUUM ANALYZE verrou.locks").await.expect("vacuum");
    let stats = server
        .psql("SELECT reltuples < 10 AND relpages > 100 FROM pg_class WHERE oid = 'verrou.locks'::regclass")
        .await
        .expect("statistics");
    assert_eq!(stats, "t", "the statistics of a nearly empty table with many pages");

    server
        .psql(&format!(
            "INSERT INTO verrou.locks SELECT 'held:' || g, '\\x{}', 0, now() + interval '1 hour' \
               FROM generate_series(1, {HELD}) g",
            "01".repeat(16)
        ))
        .await
        .expect("held rows");
    let owner = LockToken::from_bytes([1; 16]);
    // 100 keys: the batch size for which the join was planned as that
    // nested loop (362 ms here; 256 got a hash join, 17 ms).
    for batch in [100, 256] {
        let keys: Vec<String> = (1..=batch).map(|i| format!("held:{i}")).collect();
        let items: Vec<(&str, &LockToken)> = keys.iter().map(|key| (key.as_str(), &owner)).collect();
        let answers = backend.renew_many(&items, ttl).await;
        assert_eq!(answers.len(), batch);
        let failed: Vec<String> = answers
            .iter()
            .zip(&keys)
            .filter(|(a, _)| !matches!(a, Ok(RenewOutcome::Renewed)))
            .take(3)
            .map(|(a, k)| format!("{k}: {a:?}"))
            .collect();
        assert!(failed.is_empty(), "not renewed: {failed:?}");
    }
    // What the renewal reads: only the renewed keys' rows, by index.
    let keys: Vec<String> = (1..=100).map(|i| format!("'held:{i}'")).collect();
    let owners = vec![format!("'\\x{}'::bytea", "01".repeat(16)); 100];
    let read = server
        .psql(&format!(
            "SELECT count(*) FROM verrou.renew_many(ARRAY[{}], ARRAY[{}], 60000); \
             SELECT seq_scan || ' ' || seq_tup_read || ' ' || idx_scan FROM pg_stat_xact_user_tables \
              WHERE relid = 'verrou.locks'::regclass",
            keys.join(","),
            owners.join(",")
        ))
        .await
        .expect("renew_many with its statistics");
    // psql prints both answers: the count, then the figures.
    let figures: Vec<u64> = read
        .lines()
        .last()
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    assert_eq!(figures.len(), 3, "{read}");
    assert_eq!(
        (figures[0], figures[1]),
        (0, 0),
        "sequential scans, rows read by them: {read}"
    );
    assert!(figures[2] >= 100, "index scans: {read}");
}
