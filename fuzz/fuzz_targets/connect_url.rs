//! `verrou::connect`'s URL parser (`src/connect/url.rs`, included as is)
//! with every backend enabled: any string must give a target or a typed
//! error, never a panic.
#![no_main]
#![allow(dead_code, unexpected_cfgs)]

#[path = "../../src/connect/url.rs"]
mod url;

const ALL: url::Features = url::Features {
    memory: true,
    redis_lua: true,
    redis_lua_tls: true,
    tair: true,
    tair_tls: true,
    redlock: true,
};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = url::parse(text, &ALL);
    }
});
