//! The `connect_url` fuzz target's corpus (`fuzz/corpus/connect_url`,
//! minimized, with every input its runs found), replayed through
//! [`verrou::connect::check_url`] on the stable toolchain: a target or a typed error
//! for each, never a panic.
#![cfg(all(
    feature = "memory",
    feature = "redis-lua-tls",
    feature = "tair-tls",
    feature = "redlock"
))]
#![allow(clippy::panic, missing_docs)]

use std::path::Path;

#[test]
fn the_url_fuzz_corpus_replays_without_a_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/connect_url");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.map(|e| e.path()).unwrap_or_else(|e| panic!("{e}"));
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if let Ok(url) = std::str::from_utf8(&data) {
            let _ = verrou::connect::check_url(url);
        }
        n += 1;
    }
    assert!(n > 0, "empty corpus in {}", dir.display());
}
