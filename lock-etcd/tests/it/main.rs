//! Integration tests of lock-etcd on real servers.
//!
//! One test binary for the crate (each module was a binary of its own: one
//! link instead of many); `cargo test --test it <module>::` runs one module.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

mod common;

mod auth;

mod conformance_cluster;
mod conformance_single;
mod faults;
mod held_keys;
mod kinds_cluster;
mod kinds_single;
mod lease_per_holder;
mod limits;
mod shared_lease;
