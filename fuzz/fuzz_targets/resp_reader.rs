//! lock-testkit's RESP reader: `frame_len` (how much of a buffer is one
//! reply) and `parse_reply`, on any bytes: an answer or an error, never a
//! panic, a hang or a huge allocation.
#![no_main]

use lock_testkit::server::{frame_len, parse_reply};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(Some(n)) = frame_len(data)
        && let Some(frame) = data.get(..n)
    {
        let _ = parse_reply(frame);
    }
    let _ = parse_reply(data);
});
