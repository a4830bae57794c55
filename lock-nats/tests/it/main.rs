//! Integration tests of lock-nats on real servers (`nats-server` 2.11+ with
//! JetStream, started by lock-testkit's harness).
//!
//! One test binary for the crate; `cargo test --test it <module>::` runs one
//! module.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

mod common;

mod batch;
mod behaviour;
mod conformance_cluster;
mod conformance_single;
