//! The checks and conversions every backend applies the same way (limits
//! of keys and TTLs, the drift allowance, TTLs in milliseconds): a leaf
//! module, imported by the options, the versioned store and the backends
//! (through [`crate::raw`]).

use std::time::Duration;

use crate::error::{Error, Result};

/// The longest TTL verrou accepts: one year. Every backend can represent it in
/// milliseconds, and a longer lease is almost certainly a unit mistake.
pub(crate) const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// The longest `acquire_timeout` and `op_timeout` verrou accepts: one year
/// ([`crate::LockOptions::MAX_TIMEOUT`]); a backend bounds its own
/// timeouts by it too, as the manager cuts its calls at `op_timeout`.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// The shortest TTL verrou accepts. Below this the drift allowance eats the
/// whole lease.
pub(crate) const MIN_TTL: Duration = Duration::from_millis(10);

/// The clock-drift allowance of a lease: `ttl × factor + 2 ms` (the Redlock
/// rule; `factor` clamped to [0, 1]).
pub fn clock_drift(ttl: Duration, factor: f64) -> Duration {
    ttl.mul_f64(factor.clamp(0.0, 1.0))
        .saturating_add(Duration::from_millis(2))
}

/// Check a TTL against [`crate::LockOptions::MIN_TTL`] and [`crate::LockOptions::MAX_TTL`].
pub fn validate_ttl(ttl: Duration) -> Result<()> {
    if ttl < MIN_TTL {
        return Err(Error::invalid(format!("ttl {ttl:?} is below the minimum {MIN_TTL:?}")));
    }
    if ttl > MAX_TTL {
        return Err(Error::invalid(format!("ttl {ttl:?} is above the maximum {MAX_TTL:?}")));
    }
    Ok(())
}

/// The longest key verrou accepts, in bytes (64 KiB). A multi-key lock
/// applies it to each of its keys, not to the set.
pub const MAX_KEY_LEN: usize = 65_536;

/// Check a key: non-empty, at most [`MAX_KEY_LEN`] bytes.
pub fn validate_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::invalid("key must not be empty"));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::invalid(format!(
            "a key is {} bytes, above the limit of {MAX_KEY_LEN} bytes (64 KiB) per key",
            key.len()
        )));
    }
    Ok(())
}

/// A TTL in whole milliseconds, rounded up (a lease is never shorter than asked).
pub fn ttl_millis(ttl: Duration) -> u64 {
    let ms = ttl.as_millis();
    let ms = if Duration::from_millis(ms as u64) < ttl {
        ms + 1
    } else {
        ms
    };
    u64::try_from(ms).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_millis_rounds_up() {
        assert_eq!(ttl_millis(Duration::from_micros(1500)), 2);
        assert_eq!(ttl_millis(Duration::from_millis(7)), 7);
    }
}
