//! Integration tests of lock-memory (`bounded_memory`, which installs a counting global allocator, is a binary of its own).
//!
//! One test binary for the crate (each module was a binary of its own: one
//! link instead of many); `cargo test --test it <module>::` runs one module.

mod conformance;
mod election_conformance;
mod inspect;
mod instant_at;
mod multi_conformance;
mod rw_conformance;
mod semaphore_conformance;
