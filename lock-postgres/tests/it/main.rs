//! Integration tests of lock-postgres on real servers.
//!
//! One test binary for the crate (each module was a binary of its own: one
//! link instead of many); `cargo test --test it <module>::` runs one module.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

mod advisory;
mod advisory_conformance;
mod advisory_xact;
mod conformance;
mod fair_head;
mod faults;
mod fencing_order;
mod isolation_conformance;
mod kinds_conformance;
mod notifications;
mod pending_replies;
mod pgbouncer;
mod renewal_plan;
mod replication;
mod schema_lifecycle;
mod server_settings;
mod setup_errors;
