//! Batched renewal (`renew_many`): one script running `CAS` per key, per
//! chunk of keys (per hash slot on a cluster), with the outcomes and TTLs of
//! single renews (the shared cases of `lock_testkit::renew_many_conformance!`).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use crate::common;

use lock_testkit::{RenewManySuite, RenewManyTarget};

use common::{builder, cluster_url, connect, shared_cluster, tair_server};

fn suite() -> RenewManySuite {
    RenewManySuite::new("cas", tair_server, shared_cluster, |target| async move {
        match target {
            RenewManyTarget::Server { url, response_timeout } => {
                let builder = builder(&url);
                connect(match response_timeout {
                    Some(timeout) => builder.response_timeout(timeout),
                    None => builder,
                })
                .await
            }
            RenewManyTarget::Cluster(cluster) => connect(builder(&cluster_url(&cluster))).await,
        }
    })
}

lock_testkit::renew_many_conformance!(real, async { suite() });
