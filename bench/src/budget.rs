//! The per-operation budget: every heap allocation of this process is
//! counted (the bench's global allocator is `stats_alloc`'s instrumented
//! system allocator), so a window's allocations divided by its operations
//! say what one pair costs in allocations and bytes, for verrou's rows and
//! for the raw clients' beside them.
//!
//! The count is process-wide: a window also sees what runs beside the
//! measured row (its probe's `INFO` reads, idle connections of other rows),
//! a handful of allocations per window against tens of thousands of pairs.

use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use std::alloc::System;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Allocations so far (a `realloc` counts as one: it may move) and the
/// bytes they asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Allocations {
    /// Calls to `alloc`, `alloc_zeroed` and `realloc`.
    pub count: u64,
    /// Bytes those calls asked for.
    pub bytes: u64,
}

impl Allocations {
    /// The process's counters now.
    pub fn now() -> Self {
        let s = GLOBAL.stats();
        Allocations {
            count: (s.allocations + s.reallocations) as u64,
            bytes: s.bytes_allocated as u64,
        }
    }

    /// What happened between `before` and this reading.
    #[must_use]
    pub fn since(self, before: Allocations) -> Allocations {
        Allocations {
            count: self.count.saturating_sub(before.count),
            bytes: self.bytes.saturating_sub(before.bytes),
        }
    }

    /// Add another window's.
    pub fn add(&mut self, other: Allocations) {
        self.count += other.count;
        self.bytes += other.bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allocation_is_counted() {
        let before = Allocations::now();
        let v: Vec<u64> = std::hint::black_box(Vec::with_capacity(1000));
        let after = Allocations::now().since(before);
        drop(v);
        assert!(after.count >= 1, "{after:?}");
        assert!(after.bytes >= 8000, "{after:?}");
    }
}
