//! Deadline arithmetic that cannot panic: `Instant + Duration` overflows (and
//! panics) for durations near `Duration::MAX`.

use std::time::Duration;

use tokio::time::Instant;

/// `at + by`, saturating at the latest instant the clock can represent.
pub(crate) fn later(at: Instant, by: Duration) -> Instant {
    let mut by = by;
    loop {
        if let Some(t) = at.checked_add(by) {
            return t;
        }
        // At most 64 halvings; `at + 0` always exists.
        by /= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_saturates() {
        let now = Instant::now();
        assert!(later(now, Duration::MAX) > later(now, Duration::from_secs(365 * 24 * 3600)));
        assert_eq!(later(now, Duration::from_secs(1)), now + Duration::from_secs(1));
    }
}
