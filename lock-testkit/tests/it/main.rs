//! Integration tests of lock-testkit (`harness_env`, which changes process-wide environment variables, is a binary of its own).
//!
//! One test binary for the crate (each module was a binary of its own: one
//! link instead of many); `cargo test --test it <module>::` runs one module.

mod case_lists;
#[cfg(feature = "harness")]
mod harness_etcd;
#[cfg(feature = "harness")]
mod harness_nats;
#[cfg(feature = "harness")]
mod harness_netns;
#[cfg(feature = "harness")]
mod harness_netns_sentinel;
#[cfg(feature = "harness")]
mod harness_orphans;
#[cfg(feature = "postgres")]
mod harness_postgres;
#[cfg(feature = "harness")]
mod harness_proxy;
#[cfg(feature = "harness")]
mod harness_sentinel;
#[cfg(feature = "harness")]
mod harness_single;
#[cfg(feature = "harness")]
mod harness_topology;
mod resp_fuzz_corpus;
