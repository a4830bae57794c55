//! `verrou::connect`'s URL parser with every backend enabled, through
//! `verrou::connect::check_url` (what `connect` runs before it connects):
//! any string must give a target or a typed error, never a panic.
//!
//! It used to include `src/connect/url.rs` by path; once the parser called
//! into its sibling modules (etcd, postgres) that stopped building, unseen
//! by the test command, which does not build this workspace.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = verrou::connect::check_url(text);
    }
});
