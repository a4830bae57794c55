//! Integration tests of lock-redis-lua on real servers.
//!
//! One test binary for the crate (each module was a binary of its own: one
//! link instead of many); `cargo test --test it <module>::` runs one module.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

mod acl;
mod cluster_ack;
mod cluster_resend;
mod cluster_wait;
mod conformance_cluster;
mod conformance_sentinel;
mod conformance_single;
mod credentials;
mod election_observe;
mod faults;
mod hot_path;
mod inspect;
mod issue39;
mod kinds_conformance;
mod kinds_replica_ack;
mod measurements;
mod netns_partition;
mod readme_claims;
mod renew_many;
mod replica_ack;
mod replica_renewal;
mod round_trips;
mod safety;
mod semaphore_faults;
mod sentinel_failover;
