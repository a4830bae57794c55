//! tair-module's argument parsing for every command, through the same
//! source files the server loads (`args.rs`, `parse.rs`, `ldouble.rs` and
//! its C helper): any input must give a reply, never a panic (which the
//! server turns into an error reply, but which would still be a bug) or a
//! memory error in the C helper. Input: the key's current value, then the
//! arguments, NUL-separated.
#![no_main]
#![allow(dead_code, unexpected_cfgs)]

#[path = "../../tair-module/src/args.rs"]
mod args;
#[path = "../../tair-module/src/ldouble.rs"]
mod ldouble;
#[path = "../../tair-module/src/parse.rs"]
mod parse;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (value, all) = args::split_input(data);
    args::every_command(&all, value, 1_700_000_000_000, false);
    args::every_command(&all, value, i64::MAX, true);
});
