#![doc = include_str!("../README.md")]

pub use lock_core::*;

/// The in-process backend (feature `memory`).
#[cfg(feature = "memory")]
pub use lock_memory as memory;
