//! Options for the lock manager and the optimistic-update loop, with their
//! documented defaults and validation.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::validate::{MAX_TIMEOUT, MAX_TTL, MIN_TTL, clock_drift, validate_ttl};

/// How a held lock's lease is kept alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Renewal {
    /// A background task renews every `interval` (must be below the TTL).
    Auto {
        /// Time between renewals.
        interval: Duration,
    },
    /// No background renewal: call [`crate::LockGuard::extend`] yourself.
    Manual,
}

/// Jittered exponential backoff (full jitter: each delay is uniform in
/// `[0, min(max, initial × factor^n)]`, never below `min`).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Backoff {
    /// First ceiling.
    pub initial: Duration,
    /// Largest ceiling.
    pub max: Duration,
    /// Growth per attempt.
    pub factor: f64,
    /// Floor of each delay (keeps a hot loop from spinning).
    pub min: Duration,
}

impl Default for Backoff {
    /// 5 ms doubling to 200 ms, floor 1 ms. The ceiling matches node-redlock's
    /// 200 ms retry delay; the low start keeps hand-off fast on a hot key.
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(5),
            max: Duration::from_millis(200),
            factor: 2.0,
            min: Duration::from_millis(1),
        }
    }
}

impl Backoff {
    /// Ceilings from `initial` doubling up to `max`, floor 1 ms (capped at `initial`).
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            factor: 2.0,
            min: Duration::from_millis(1).min(initial),
        }
    }

    /// Set the growth per attempt (at least 1).
    #[must_use]
    pub fn factor(mut self, factor: f64) -> Self {
        self.factor = factor;
        self
    }

    /// Set the floor of each delay.
    #[must_use]
    pub fn min(mut self, min: Duration) -> Self {
        self.min = min;
        self
    }

    /// The ceiling for attempt `n` (0-based).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let exp = self.factor.max(1.0).powi(attempt.min(64) as i32);
        let secs = self.initial.as_secs_f64() * exp;
        if !secs.is_finite() || secs >= self.max.as_secs_f64() {
            self.max
        } else {
            Duration::from_secs_f64(secs)
        }
    }

    /// A jittered delay for attempt `n`.
    pub fn delay(&self, attempt: u32) -> Duration {
        let ceiling = self.ceiling(attempt);
        let jittered = ceiling.mul_f64(fastrand::f64());
        jittered.max(self.min.min(ceiling))
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.initial.is_zero() || self.max < self.initial || !(self.factor >= 1.0 && self.factor.is_finite()) {
            return Err(Error::invalid(
                "backoff needs initial > 0, max >= initial and a finite factor >= 1",
            ));
        }
        Ok(())
    }
}

/// How waiters of different managers (processes) share a contended key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fairness {
    /// Whoever asks first after a release wins (the cheapest: an
    /// uncontended acquire is one plain command). Waiters of one manager
    /// still take turns in its local line.
    #[default]
    Barging,
    /// First come, first served across managers: the backend keeps a queue
    /// of waiters per key, and a free key goes to the queue's head only
    /// ([`crate::Capabilities::fair_queue`]; [`crate::Error::Unsupported`]
    /// elsewhere). A waiter's queue entry expires `claim` after its last
    /// attempt, so a waiter that died holds the line up for at most about
    /// `claim`; live waiters poll every `claim / 3` to keep their entry.
    Fifo {
        /// Lifetime of a queue entry after each attempt (at least 30 ms).
        claim: Duration,
    },
}

impl Fairness {
    /// The default [`Fairness::Fifo`] claim: a dead waiter delays the queue
    /// by at most about this long.
    pub const DEFAULT_CLAIM: Duration = Duration::from_millis(1000);

    /// The shortest [`Fairness::Fifo`] claim: waiters refresh their entry
    /// every third of it, and a shorter claim would expire live waiters on a
    /// loaded machine.
    pub const MIN_CLAIM: Duration = Duration::from_millis(30);
}

/// Settings of a [`crate::LockManager`].
///
/// | setting | default | peers |
/// |---|---|---|
/// | `ttl` | 30 s | Redisson watchdog 30 s, redsync 8 s, etcd 60 s |
/// | `renewal` | every `ttl / 3` = 10 s | Redisson, etcd: TTL/3 |
/// | `acquire_timeout` | 10 s | redsync ≈ 32 × 150 ms ≈ 5 s, node-redlock ≈ 2 s |
/// | `backoff` | 5 ms → 200 ms, full jitter | node-redlock 200 ± 100 ms, rslock rand 0–200 ms |
/// | `drift_factor` | 0.01 (+ 2 ms) | Redlock, node-redlock, rslock, pottery |
/// | `op_timeout` | 2 s (capped by the remaining validity) | redsync 0.05 × TTL per node |
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LockOptions {
    /// Lease length on the server.
    pub ttl: Duration,
    /// How the lease is kept alive.
    pub renewal: Renewal,
    /// How long `lock()` waits for a held key.
    pub acquire_timeout: Duration,
    /// Delay between acquire attempts on a held key.
    pub backoff: Backoff,
    /// Clock-drift allowance as a fraction of the TTL; 2 ms are added
    /// ([`crate::raw::clock_drift`]; default [`LockOptions::DEFAULT_DRIFT_FACTOR`]). The
    /// guard's deadline is `sent_at + ttl − drift`. A backend that applies
    /// the same allowance itself (Redlock, to its quorum's validity) reports
    /// its bound with the grant, and the guard keeps the earlier deadline.
    pub drift_factor: f64,
    /// Upper bound on a single backend call made by the renewer.
    pub op_timeout: Duration,
    /// Barging (default) or first come, first served across managers.
    pub fairness: Fairness,
    /// The shortest time the key stays held, counted from when the
    /// acquire was sent (default zero: none). A release before then
    /// shortens the lease to what is left of it instead of deleting the
    /// key (see [`LockOptions::min_hold`]).
    pub min_hold: Duration,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions::with_ttl(Duration::from_secs(30))
    }
}

impl LockOptions {
    /// The longest TTL verrou accepts: one year. Every backend can represent
    /// it in milliseconds, and a longer lease is almost certainly a unit
    /// mistake.
    pub const MAX_TTL: Duration = MAX_TTL;

    /// The shortest TTL verrou accepts. Below this the drift allowance eats
    /// the whole lease.
    pub const MIN_TTL: Duration = MIN_TTL;

    /// The longest `acquire_timeout` and `op_timeout` (and fair-queue claim)
    /// verrou accepts: one year. Longer waits are almost certainly a unit
    /// mistake (and `Duration::MAX` cannot be added to an instant).
    pub const MAX_TIMEOUT: Duration = MAX_TIMEOUT;

    /// Default clock-drift factor (Redlock, node-redlock, rslock): the
    /// allowance is `ttl × 0.01 + 2 ms` ([`crate::raw::clock_drift`]). The
    /// one default of the one drift allowance: [`LockOptions::drift_factor`]
    /// and Redlock's own `RedlockOptions::drift_factor` start from it.
    pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;

    /// Defaults for a given TTL: renew every `ttl / 3`.
    pub fn with_ttl(ttl: Duration) -> Self {
        LockOptions {
            ttl,
            renewal: Renewal::Auto { interval: ttl / 3 },
            acquire_timeout: Duration::from_secs(10),
            backoff: Backoff::default(),
            drift_factor: Self::DEFAULT_DRIFT_FACTOR,
            op_timeout: Duration::from_secs(2),
            fairness: Fairness::Barging,
            min_hold: Duration::ZERO,
        }
    }

    /// Set the TTL and move the renew interval to `ttl / 3` if renewal is automatic.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        if let Renewal::Auto { .. } = self.renewal {
            self.renewal = Renewal::Auto { interval: ttl / 3 };
        }
        self
    }

    /// Set the renewal mode.
    #[must_use]
    pub fn renewal(mut self, renewal: Renewal) -> Self {
        self.renewal = renewal;
        self
    }

    /// Set the acquire timeout.
    #[must_use]
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// Set the backoff.
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Set the drift factor.
    #[must_use]
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor;
        self
    }

    /// Set the per-call timeout of the renewer.
    #[must_use]
    pub fn op_timeout(mut self, timeout: Duration) -> Self {
        self.op_timeout = timeout;
        self
    }

    /// First come, first served across managers, with the
    /// [`Fairness::DEFAULT_CLAIM`] (see [`Fairness::Fifo`]).
    #[must_use]
    pub fn fair(self) -> Self {
        self.fairness(Fairness::Fifo {
            claim: Fairness::DEFAULT_CLAIM,
        })
    }

    /// Set how waiters of different managers share a contended key.
    #[must_use]
    pub fn fairness(mut self, fairness: Fairness) -> Self {
        self.fairness = fairness;
        self
    }

    /// Hold the key at least `min_hold` from when its acquire was sent
    /// (ShedLock's `lockAtLeastFor`): a job that every machine's cron
    /// starts runs once per tick even when it ends in milliseconds and the
    /// machines' clocks differ. A release before `acquired_at + min_hold`
    /// (explicit, the guard's drop, the end of `with_lock`) does not delete
    /// the key: it sets the key's TTL to what is left of the minimum hold
    /// (an owner-checked renewal; at least the backend's
    /// [`crate::Capabilities::min_ttl`]), so nobody else gets the key
    /// before then, and it answers `Released`. The renewer stops at the
    /// release as always; the lease's handles see
    /// [`crate::LossReason::Released`] at once. A release after the minimum
    /// hold deletes the key as usual. On a backend whose lock lives with its
    /// session ([`crate::Capabilities::lease_expires`] false: no TTL ends
    /// it), the early release checks the lock is still held, answers
    /// `Released`, and releases it in the background once the hold is over.
    /// At most [`Self::MAX_TTL`].
    #[must_use]
    pub fn min_hold(mut self, min_hold: Duration) -> Self {
        self.min_hold = min_hold;
        self
    }

    /// The drift allowance for a TTL: `ttl × drift_factor + 2 ms`.
    pub fn drift(&self, ttl: Duration) -> Duration {
        clock_drift(ttl, self.drift_factor)
    }

    /// Check every setting; called when the manager is built.
    pub fn validate(&self) -> Result<()> {
        validate_ttl(self.ttl)?;
        if !(0.0..0.5).contains(&self.drift_factor) {
            return Err(Error::invalid("drift_factor must be in [0, 0.5)"));
        }
        if self.drift(self.ttl) >= self.ttl {
            return Err(Error::invalid("ttl is too short for the drift allowance"));
        }
        let validity = self.ttl.saturating_sub(self.drift(self.ttl));
        if let Renewal::Auto { interval } = self.renewal
            && (interval.is_zero() || interval >= validity)
        {
            return Err(Error::invalid(format!(
                "renew interval {interval:?} must be above zero and below the ttl minus drift ({validity:?})"
            )));
        }
        if self.min_hold > MAX_TTL {
            return Err(Error::invalid(format!(
                "min_hold {:?} is above the maximum {MAX_TTL:?}",
                self.min_hold
            )));
        }
        if self.op_timeout.is_zero() {
            return Err(Error::invalid("op_timeout must be above zero"));
        }
        if self.op_timeout > MAX_TIMEOUT {
            return Err(Error::invalid(format!(
                "op_timeout {:?} is above the maximum {MAX_TIMEOUT:?}",
                self.op_timeout
            )));
        }
        if self.acquire_timeout > MAX_TIMEOUT {
            return Err(Error::invalid(format!(
                "acquire_timeout {:?} is above the maximum {MAX_TIMEOUT:?}",
                self.acquire_timeout
            )));
        }
        if let Fairness::Fifo { claim } = self.fairness
            && !(Fairness::MIN_CLAIM..=MAX_TIMEOUT).contains(&claim)
        {
            return Err(Error::invalid(format!(
                "fair queue claim {claim:?} must be between {:?} and {MAX_TIMEOUT:?}",
                Fairness::MIN_CLAIM
            )));
        }
        self.backoff.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert!(LockOptions::default().validate().is_ok());
        assert!(LockOptions::with_ttl(Duration::from_millis(100)).validate().is_ok());
    }

    #[test]
    fn bad_options_are_rejected() {
        let zero = LockOptions::default().ttl(Duration::ZERO);
        assert!(matches!(zero.validate(), Err(Error::InvalidArgument(_))));
        let huge = LockOptions::default().ttl(Duration::from_secs(u64::MAX));
        assert!(matches!(huge.validate(), Err(Error::InvalidArgument(_))));
        let slow = LockOptions::default().renewal(Renewal::Auto {
            interval: Duration::from_secs(30),
        });
        assert!(matches!(slow.validate(), Err(Error::InvalidArgument(_))));
        let short_claim = LockOptions::default().fairness(Fairness::Fifo {
            claim: Duration::from_millis(1),
        });
        assert!(matches!(short_claim.validate(), Err(Error::InvalidArgument(_))));
        assert!(LockOptions::default().fair().validate().is_ok());
        let nan = LockOptions::default().drift_factor(f64::NAN);
        assert!(matches!(nan.validate(), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn backoff_saturates() {
        let b = Backoff::default();
        assert_eq!(b.ceiling(1000), b.max);
        assert!(b.delay(3) <= b.ceiling(3));
    }
}
