//! Issue 39 (guarantee 2): a kind's clean-up release that reached the
//! server before its own grant (under `ReplicaAck` the grant goes out on
//! the WAIT connection, and across a reconnect the clean-up can overtake
//! it) makes that late grant fail, for the read-write lock, the election
//! and the multi-key lock as for the semaphore; sent in that order on
//! purpose here ([`lock_testkit::conformance::late_grant_cases`]).

#![allow(clippy::expect_used)]

use crate::common;

use std::time::Duration;

use lock_core::ReplicaAck;
use lock_testkit::conformance::late_grant_cases as cases;
use lock_testkit::server::ReplicatedPair;
use lock_testkit::{ElectionSuite, MultiSuite, RwSuite};
use tokio::sync::OnceCell;

const RESERVED: [&str; 2] = ["verrou:tair:", lock_tair::DEFAULT_FENCE_PREFIX];

/// One primary + replica pair (both with the module) for these cases.
async fn primary_url() -> String {
    static PAIR: OnceCell<ReplicatedPair> = OnceCell::const_new();
    PAIR.get_or_init(|| async { ReplicatedPair::start(common::tair()).await.expect("start a pair") })
        .await
        .primary()
        .url()
}

/// The server's (or cluster's, or acknowledging primary's) URL and builder
/// options of each setup.
async fn builder(
    setup: &str,
) -> (
    String,
    fn(&str) -> lock_tair::TairBuilder,
    Box<dyn std::any::Any + Send + Sync>,
) {
    match setup {
        "single" => {
            let server = common::tair_server().await;
            (server.url(), |url| common::builder(url), Box::new(server))
        }
        "cluster" => {
            let cluster = common::shared_cluster().await;
            (
                common::cluster_url(&cluster),
                |url| common::builder(url).fencing(true),
                Box::new(cluster),
            )
        }
        _ => (
            primary_url().await,
            |url| common::builder(url).replica_ack(ReplicaAck::new(1, Duration::from_secs(2))),
            Box::new(()),
        ),
    }
}

macro_rules! late_grant_cases {
    ($($setup:ident),* $(,)?) => {$(
        mod $setup {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn rw_grant_after_its_clean_up_is_refused() {
                let (url, options, keep) = builder(stringify!($setup)).await;
                let suite = RwSuite::new(move || common::connect(options(&url)))
                    .reserved_prefixes(RESERVED)
                    .keep_alive(keep);
                cases::rw_grant_after_its_clean_up_is_refused(&suite).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn campaign_after_its_clean_up_is_refused() {
                let (url, options, keep) = builder(stringify!($setup)).await;
                let suite = ElectionSuite::new(move || common::connect(options(&url)))
                    .reserved_prefixes(RESERVED)
                    .keep_alive(keep);
                cases::campaign_after_its_clean_up_is_refused(&suite).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn multi_grant_after_its_clean_up_is_refused() {
                let (url, options, keep) = builder(stringify!($setup)).await;
                let suite = MultiSuite::new(move || common::connect(options(&url)))
                    .reserved_prefixes(RESERVED)
                    .keep_alive(keep);
                cases::multi_grant_after_its_clean_up_is_refused(&suite).await;
            }
        }
    )*};
}

late_grant_cases!(single, cluster, replica_ack);
