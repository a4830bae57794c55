//! A small, fast, non-cryptographic source of jitter (splitmix64 seeded from
//! the OS once per thread). Tokens never come from here.

use std::cell::Cell;

thread_local! {
    static STATE: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    let mut b = [0u8; 8];
    // A failed read only makes jitter less random, never unsafe.
    let _ = getrandom::fill(&mut b);
    u64::from_le_bytes(b) | 1
}

/// Next pseudo-random u64.
pub(crate) fn next_u64() -> u64 {
    STATE.with(|s| {
        let mut z = s.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        s.set(z);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    })
}

/// Uniform in [0, 1).
pub(crate) fn unit() -> f64 {
    (next_u64() >> 11) as f64 / (1u64 << 53) as f64
}
