//! The `resp_reader` fuzz target's corpus (`fuzz/corpus/resp_reader`,
//! minimized, with every input its runs found), replayed on the stable
//! toolchain: `frame_len` and `parse_reply` answer or fail, never panic.
#![cfg(feature = "harness")]
#![allow(clippy::panic, missing_docs)]

use std::path::Path;

use lock_testkit::server::{frame_len, parse_reply};

#[test]
fn the_resp_fuzz_corpus_replays_without_a_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/resp_reader");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.map(|e| e.path()).unwrap_or_else(|e| panic!("{e}"));
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if let Ok(Some(len)) = frame_len(&data)
            && let Some(frame) = data.get(..len)
        {
            let _ = parse_reply(frame);
        }
        let _ = parse_reply(&data);
        n += 1;
    }
    assert!(n > 0, "empty corpus in {}", dir.display());
}
