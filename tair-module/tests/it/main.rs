//! Integration tests of the TairString-compatible module.
//!
//! One test binary for the crate (each module was a binary of its own: one
//! link instead of many); `cargo test --test it <module>::` runs one module.

mod commands;
mod common;
mod model;
mod persistence;
mod replication;
mod transcripts;
