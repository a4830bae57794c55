//! Integration tests of lock-core (the observability tests, which install thread-local recorders and need the `metrics` feature, are a binary of their own).
//!
//! One test binary for the crate (each module was a binary of its own: one
//! link instead of many); `cargo test --test it <module>::` runs one module.

mod api;
mod background_releases;
mod extend_renewal;
mod fair_pace;
mod instant;
mod kinds_engine;
mod layers;
mod lease_signals;
mod lifecycle;
mod lost_token_tasks;
mod module_graph;
mod multi_key_limits;
mod option_bounds;
mod release_not_loss;
mod runtimes;
mod semaphore_fifo;
mod token_fork;
mod ttl_order;
mod with_lock;
