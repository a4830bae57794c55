//! One monotonic clock for every record: microseconds since the run began,
//! read from tokio's `Instant` (the clock the guards' deadlines live on;
//! unpaused, it is the OS monotonic clock, shared by every client thread).

use std::sync::OnceLock;

use tokio::time::Instant;

static BASE: OnceLock<Instant> = OnceLock::new();

fn base() -> Instant {
    *BASE.get_or_init(Instant::now)
}

/// Start the clock (idempotent).
pub fn init() {
    let _ = base();
}

/// Now, in µs since the start.
pub fn now() -> i64 {
    at(Instant::now())
}

/// `t` in µs since the start (negative before it).
pub fn at(t: Instant) -> i64 {
    let b = base();
    if t >= b {
        i64::try_from(t.duration_since(b).as_micros()).unwrap_or(i64::MAX)
    } else {
        -i64::try_from(b.duration_since(t).as_micros()).unwrap_or(i64::MAX)
    }
}
