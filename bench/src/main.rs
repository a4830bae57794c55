//! Placeholder: the benchmark harness is being built.
fn main() {}
