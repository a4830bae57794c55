//! Settings of a [`crate::Redlock`], with their documented defaults.

use std::time::Duration;

use lock_core::raw::MAX_TIMEOUT;
use lock_core::{Error, LockOptions, Result};

/// Default per-node timeout as a fraction of the TTL (redsync's 0.05).
pub const DEFAULT_NODE_TIMEOUT_FACTOR: f64 = 0.05;
/// Default floor of the per-node timeout: below this a loaded but healthy
/// node on a LAN would time out.
pub const DEFAULT_MIN_NODE_TIMEOUT: Duration = Duration::from_millis(10);
/// Default ceiling of the per-node timeout: with long TTLs a dead node must
/// not hold a renewal or a release for seconds.
pub const DEFAULT_MAX_NODE_TIMEOUT: Duration = Duration::from_secs(1);

/// Settings of a [`crate::Redlock`].
///
/// | setting | default | peers |
/// |---|---|---|
/// | `quorum` | `N / 2 + 1` | redsync, node-redlock, rslock |
/// | per-node timeout | `ttl × 0.05`, clamped to 10 ms ..= 1 s | redsync `0.05 × ttl`; antirez: "5–50 ms for a 10 s TTL" |
/// | release timeout (no TTL at hand) | the ceiling, 1 s | — |
/// | `drift_factor` | 0.01 (+ 2 ms) | Redlock, node-redlock, rslock, pottery |
/// | `reseed_on_renew` | on | redsync `WithSetNXOnExtend` (off there) |
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RedlockOptions {
    /// Nodes that must agree: a majority (`2 × quorum > N`, `1 < quorum ≤
    /// N`); `None` means `N / 2 + 1`.
    pub quorum: Option<usize>,
    /// Per-node timeout as a fraction of the TTL of the call.
    pub node_timeout_factor: f64,
    /// Lower bound of the per-node timeout.
    pub min_node_timeout: Duration,
    /// Upper bound of the per-node timeout; also the timeout of each node's
    /// release, which has no TTL to scale from.
    pub max_node_timeout: Duration,
    /// Clock-drift allowance as a fraction of the TTL; 2 ms are added: the
    /// same allowance as [`lock_core::LockOptions::drift_factor`], with the
    /// same default ([`LockOptions::DEFAULT_DRIFT_FACTOR`]) and formula
    /// ([`lock_core::raw::clock_drift`]), applied by Redlock to its quorum:
    /// a grant or renewal reached after `ttl − drift` is refused, and a
    /// grant reports `ttl − drift` as its validity. Under a
    /// [`lock_core::LockManager`] the guard keeps the earlier of that and
    /// its own deadline, so the larger of the two allowances applies.
    pub drift_factor: f64,
    /// After a renewal that reached the quorum, set the key again (same
    /// token, `SET NX` through the node's `try_acquire`) on nodes that
    /// answered "missing", e.g. a node restarted without persistence. This
    /// restores the redundancy that lets the lock survive the next failure.
    pub reseed_on_renew: bool,
}

impl Default for RedlockOptions {
    fn default() -> Self {
        RedlockOptions {
            quorum: None,
            node_timeout_factor: DEFAULT_NODE_TIMEOUT_FACTOR,
            min_node_timeout: DEFAULT_MIN_NODE_TIMEOUT,
            max_node_timeout: DEFAULT_MAX_NODE_TIMEOUT,
            drift_factor: LockOptions::DEFAULT_DRIFT_FACTOR,
            reseed_on_renew: true,
        }
    }
}

impl RedlockOptions {
    /// Set the quorum `M` (validated against the node count when the
    /// [`crate::Redlock`] is built).
    #[must_use]
    pub fn quorum(mut self, quorum: usize) -> Self {
        self.quorum = Some(quorum);
        self
    }

    /// Use one fixed per-node timeout for every call, whatever the TTL.
    #[must_use]
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.min_node_timeout = timeout;
        self.max_node_timeout = timeout;
        self
    }

    /// Scale the per-node timeout with the TTL: `ttl × factor`, clamped to
    /// `min ..= max`.
    #[must_use]
    pub fn node_timeout_scaled(mut self, factor: f64, min: Duration, max: Duration) -> Self {
        self.node_timeout_factor = factor;
        self.min_node_timeout = min;
        self.max_node_timeout = max;
        self
    }

    /// Set the drift factor.
    #[must_use]
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor;
        self
    }

    /// Turn re-seeding of nodes that lost the key on or off.
    #[must_use]
    pub fn reseed_on_renew(mut self, on: bool) -> Self {
        self.reseed_on_renew = on;
        self
    }

    /// The per-node timeout of an acquire or renew with `ttl`.
    pub fn node_timeout_for(&self, ttl: Duration) -> Duration {
        let scaled = if self.node_timeout_factor.is_finite() && self.node_timeout_factor > 0.0 {
            Duration::try_from_secs_f64(ttl.as_secs_f64() * self.node_timeout_factor).unwrap_or(self.max_node_timeout)
        } else {
            self.min_node_timeout
        };
        scaled.clamp(self.min_node_timeout, self.max_node_timeout.max(self.min_node_timeout))
    }

    /// The drift allowance for a TTL: `ttl × drift_factor + 2 ms`.
    pub fn drift(&self, ttl: Duration) -> Duration {
        lock_core::raw::clock_drift(ttl, self.drift_factor)
    }

    /// Check every setting for `nodes` nodes; returns the quorum in force.
    pub fn validate(&self, nodes: usize) -> Result<usize> {
        if nodes < 2 {
            return Err(Error::invalid(format!(
                "redlock needs at least 2 nodes (quorum 2M > N, 1 < M <= N), got {nodes}"
            )));
        }
        let quorum = self.quorum.unwrap_or(nodes / 2 + 1);
        // Two quorums must share a node, or two clients can each win a
        // disjoint set of nodes and both hold the lock with no fault at all.
        if quorum < 2 || quorum > nodes || 2 * quorum <= nodes {
            return Err(Error::invalid(format!(
                "redlock quorum {quorum} of {nodes} nodes breaks the rule 2M > N, 1 < M <= N (a majority): two \
                 clients could each win {quorum} different nodes"
            )));
        }
        if !(self.node_timeout_factor.is_finite() && self.node_timeout_factor > 0.0) {
            return Err(Error::invalid("node_timeout_factor must be finite and above zero"));
        }
        if self.min_node_timeout.is_zero()
            || self.max_node_timeout < self.min_node_timeout
            || self.max_node_timeout > MAX_TIMEOUT
        {
            return Err(Error::invalid(format!(
                "node_timeout (min {:?}, max {:?}) must be above zero and at most {} days, with max >= min",
                self.min_node_timeout,
                self.max_node_timeout,
                MAX_TIMEOUT.as_secs() / 86_400
            )));
        }
        if !(0.0..0.5).contains(&self.drift_factor) {
            return Err(Error::invalid("drift_factor must be in [0, 0.5)"));
        }
        Ok(quorum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_quorum_is_a_majority() {
        let o = RedlockOptions::default();
        assert!(matches!(o.validate(2), Ok(2)));
        assert!(matches!(o.validate(3), Ok(2)));
        assert!(matches!(o.validate(4), Ok(3)));
        assert!(matches!(o.validate(5), Ok(3)));
    }

    #[test]
    fn bad_quorums_and_settings_are_rejected() {
        let invalid = |r: Result<usize>| matches!(r, Err(Error::InvalidArgument(_)));
        assert!(invalid(RedlockOptions::default().validate(0)));
        assert!(invalid(RedlockOptions::default().validate(1)));
        assert!(invalid(RedlockOptions::default().quorum(1).validate(1)));
        assert!(invalid(RedlockOptions::default().quorum(1).validate(3)));
        assert!(invalid(RedlockOptions::default().quorum(0).validate(3)));
        assert!(invalid(RedlockOptions::default().quorum(4).validate(3)));
        assert!(matches!(RedlockOptions::default().quorum(3).validate(3), Ok(3)));
        assert!(invalid(RedlockOptions::default().quorum(2).validate(4)));
        assert!(invalid(RedlockOptions::default().drift_factor(f64::NAN).validate(3)));
        assert!(invalid(RedlockOptions::default().drift_factor(0.5).validate(3)));
        assert!(invalid(
            RedlockOptions::default().node_timeout(Duration::ZERO).validate(3)
        ));
        assert!(invalid(
            RedlockOptions::default().node_timeout(Duration::MAX).validate(3)
        ));
        let inverted =
            RedlockOptions::default().node_timeout_scaled(0.05, Duration::from_secs(1), Duration::from_millis(1));
        assert!(invalid(inverted.validate(3)));
        let nan =
            RedlockOptions::default().node_timeout_scaled(f64::NAN, Duration::from_millis(1), Duration::from_secs(1));
        assert!(invalid(nan.validate(3)));
    }

    #[test]
    fn node_timeout_scales_with_the_ttl_within_bounds() {
        let o = RedlockOptions::default();
        assert_eq!(o.node_timeout_for(Duration::from_secs(10)), Duration::from_millis(500));
        assert_eq!(o.node_timeout_for(Duration::from_secs(30)), Duration::from_secs(1));
        assert_eq!(
            o.node_timeout_for(Duration::from_millis(100)),
            Duration::from_millis(10)
        );
        assert_eq!(o.node_timeout_for(LockOptions::MAX_TTL), Duration::from_secs(1));
        let fixed = RedlockOptions::default().node_timeout(Duration::from_millis(70));
        assert_eq!(
            fixed.node_timeout_for(Duration::from_secs(30)),
            Duration::from_millis(70)
        );
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        let o = RedlockOptions::default();
        assert_eq!(o.drift(Duration::from_secs(10)), Duration::from_millis(102));
    }
}
