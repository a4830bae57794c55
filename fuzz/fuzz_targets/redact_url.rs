//! `lock_core::raw::redact_url` over arbitrary input: the redaction of
//! `redis://USERINFO@REST` never depends on a byte of USERINFO (the input is
//! USERINFO and REST separated by the first newline), however malformed.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(e) = lock_testkit::redaction::user_info_is_hidden(data) {
        panic!("{e}");
    }
});
