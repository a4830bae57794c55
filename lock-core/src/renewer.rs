//! The background renewer: keeps a lease alive and signals its loss.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backend::RenewOutcome;
use crate::batch::RenewBatcher;
use crate::error::LossReason;
use crate::guard::LeaseState;

/// Renewals are due on a grid of this many slots per renew interval (and at
/// most this coarse), rounded *down*: renewing a little early is safe, and
/// leases renewed in the same timer tick share one wake-up and get pipelined
/// on multiplexed connections instead of each paying a syscall.
const SLOTS_PER_INTERVAL: u32 = 8;
const MAX_SLOT: Duration = Duration::from_millis(100);

fn grid_origin() -> Instant {
    static ORIGIN: OnceLock<std::time::Instant> = OnceLock::new();
    // A process-wide origin shared by every runtime; tokio's Instant converts
    // from std's, and the paused test clock only shifts both alike.
    Instant::from_std(*ORIGIN.get_or_init(std::time::Instant::now))
}

/// `due` rounded down to the renewal grid, never before `not_before`.
fn on_grid(due: Instant, interval: Duration, not_before: Instant) -> Instant {
    let slot = (interval / SLOTS_PER_INTERVAL).min(MAX_SLOT);
    let origin = grid_origin();
    if slot.is_zero() || due <= origin {
        return due;
    }
    let since = due - origin;
    let slots = since.as_nanos() / slot.as_nanos();
    let rounded = u32::try_from(slots)
        .ok()
        .and_then(|n| slot.checked_mul(n))
        .map_or(due, |offset| crate::clock::later(origin, offset));
    rounded.max(not_before)
}

/// Renew every `interval` until `stop` is cancelled. Stops for good at the
/// first definite "not owner", or when the local deadline passes with every
/// attempt failing (each failed attempt is retried until then).
pub(crate) async fn run(
    state: Arc<LeaseState>,
    ttl: Duration,
    interval: Duration,
    op_timeout: Duration,
    stop: CancellationToken,
    batcher: RenewBatcher,
) {
    let stopped = stop.cancelled();
    tokio::pin!(stopped);
    let retry_delay = (interval / 8).clamp(Duration::from_millis(1), Duration::from_millis(250));
    let mut last = state.acquired_at;
    loop {
        let next = on_grid(
            crate::clock::later(last, interval),
            interval,
            crate::clock::later(last, interval / 2),
        );
        tokio::select! {
            biased;
            () = &mut stopped => return,
            () = tokio::time::sleep_until(next) => {}
        }
        // Retry until one renewal succeeds or the deadline passes.
        loop {
            if stop.is_cancelled() || state.is_lost() {
                return;
            }
            let remaining = state.deadline().saturating_duration_since(Instant::now());
            // One TTL change per lease in flight: after an `extend` in
            // flight, if any (see `LeaseState::change_ttl`).
            let sent = AtomicBool::new(false);
            let call = state.change_ttl(ttl, &sent, || batcher.renew(&state, ttl));
            let result = tokio::select! {
                biased;
                () = &mut stopped => return,
                r = tokio::time::timeout(op_timeout.min(remaining), call) => r,
            };
            match result {
                Ok(Ok((RenewOutcome::Renewed, sent_at))) => {
                    last = sent_at;
                    break;
                }
                Ok(Ok((RenewOutcome::HeldByOther | RenewOutcome::Missing, _))) => {
                    tracing::warn!(key = %state.key, "lease lost: renewal found another owner or no key");
                    state.mark_lost(LossReason::NotOwner);
                    return;
                }
                Ok(Err(e)) => {
                    tracing::debug!(key = %state.key, error = %e, "renewal failed; retrying until the deadline");
                }
                Err(_) => {
                    tracing::debug!(key = %state.key, "renewal timed out; retrying until the deadline");
                }
            }
            let wake = crate::clock::later(Instant::now(), retry_delay).min(state.deadline());
            tokio::select! {
                biased;
                () = &mut stopped => return,
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_rounds_down_within_one_slot() {
        let interval = Duration::from_secs(1);
        let base = grid_origin() + Duration::from_secs(5);
        for ms in [0u64, 1, 60, 124, 125, 999] {
            let due = base + Duration::from_millis(ms);
            let at = on_grid(due, interval, base);
            assert!(
                at <= due && due - at < Duration::from_millis(100),
                "{ms}: {:?}",
                due - at
            );
        }
        let early = on_grid(
            base + Duration::from_millis(30),
            interval,
            base + Duration::from_millis(20),
        );
        assert_eq!(early, base + Duration::from_millis(20), "never before not_before");
    }
}
