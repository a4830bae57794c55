//! Integration tests of the verrou facade.
//!
//! One test binary for the crate (each module was a binary of its own: one
//! link instead of many); `cargo test --test it <module>::` runs one module.

mod api_docs;
mod architecture_defaults;
mod connect;
mod connect_etcd;
mod connect_fuzz_corpus;
mod connect_kinds;
mod connect_limits;
mod connect_nats;
mod connect_outage;
mod connect_postgres;
mod connect_secrets;
mod connect_tls;
mod connect_urls;
mod crate_docs;
mod examples;
mod facade;
mod facade_backends;
mod readme_claims;
mod shape;
mod support;
