//! Integration tests of the verrou command.
//!
//! One test binary for the crate (each module was a binary of its own: one
//! link instead of many); `cargo test --test it <module>::` runs one module.

mod cli;
mod cli_postgres;
mod common;
mod deadline;
mod kinds;
mod limits;
mod min_hold;
mod program_group;
mod readme;
mod secrets;
mod sentinel;
mod status;
