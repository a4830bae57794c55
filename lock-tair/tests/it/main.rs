//! Integration tests of lock-tair on real servers.
//!
//! One test binary for the crate (each module was a binary of its own: one
//! link instead of many); `cargo test --test it <module>::` runs one module.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

mod common;

mod behaviour;
mod conformance;
mod election;
mod faults;
mod hot_path;
mod issue39;
mod kinds_replica_ack;
mod late_grant;
mod multi;
mod renew_many;
mod rw;
mod safety;
mod semaphore;
mod sentinel;
mod wait_reconnect;
mod waiter_mark;
