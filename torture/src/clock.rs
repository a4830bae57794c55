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

/// The OS monotonic clock (`CLOCK_MONOTONIC`, which `Instant` reads on
/// Linux), ns.
fn monotonic_ns() -> Option<i128> {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).ok()?;
    Some(i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec()))
}

/// The start of this clock on the OS monotonic clock, ns: a client process
/// given it ([`init_at`]) records on the same clock as this process.
pub fn base_monotonic_ns() -> Option<i128> {
    let since_base = i128::try_from(Instant::now().duration_since(base()).as_nanos()).ok()?;
    Some(monotonic_ns()? - since_base)
}

/// Start the clock at `base_ns` on the OS monotonic clock (from
/// [`base_monotonic_ns`] in another process). False when the clock was
/// already started or the time cannot be placed.
pub fn init_at(base_ns: i128) -> bool {
    let Some(now_ns) = monotonic_ns() else { return false };
    let Ok(ago) = u64::try_from(now_ns - base_ns) else {
        return false;
    };
    let Some(b) = Instant::now().checked_sub(std::time::Duration::from_nanos(ago)) else {
        return false;
    };
    BASE.set(b).is_ok()
}
