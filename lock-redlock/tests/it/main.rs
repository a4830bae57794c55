//! Integration tests of lock-redlock.
//!
//! One test binary for the crate (each module was a binary of its own: one
//! link instead of many); `cargo test --test it <module>::` runs one module.

mod argument_errors;
mod conformance_memory;
mod conformance_real;
mod faults_memory;
mod faults_real;
mod kinds_unsupported;
mod one_waiter;
mod release_count;
mod safety;
mod start_during_outage;
