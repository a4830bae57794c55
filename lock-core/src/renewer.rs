//! The background renewer: keeps a lease alive and signals its loss.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backend::RenewOutcome;
use crate::error::LossReason;
use crate::guard::LeaseState;

/// Renew every `interval` until `stop` is cancelled. Stops for good at the
/// first definite "not owner", or when the local deadline passes with every
/// attempt failing (each failed attempt is retried until then).
pub(crate) async fn run(
    state: Arc<LeaseState>,
    ttl: Duration,
    interval: Duration,
    op_timeout: Duration,
    stop: CancellationToken,
) {
    let retry_delay = (interval / 8).clamp(Duration::from_millis(1), Duration::from_millis(250));
    let mut next = state.acquired_at + interval;
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = tokio::time::sleep_until(next) => {}
        }
        // Retry until one renewal succeeds or the deadline passes.
        loop {
            if stop.is_cancelled() || state.is_lost() {
                return;
            }
            let remaining = state.deadline().saturating_duration_since(Instant::now());
            let sent_at = Instant::now();
            let call = state.backend.renew(&state.key, &state.token, ttl);
            let result = tokio::select! {
                biased;
                () = stop.cancelled() => return,
                r = tokio::time::timeout(op_timeout.min(remaining), call) => r,
            };
            match result {
                Ok(Ok(RenewOutcome::Renewed)) => {
                    state.renewed(sent_at, ttl);
                    next = sent_at + interval;
                    break;
                }
                Ok(Ok(RenewOutcome::HeldByOther | RenewOutcome::Missing)) => {
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
            let wake = (Instant::now() + retry_delay).min(state.deadline());
            tokio::select! {
                biased;
                () = stop.cancelled() => return,
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    }
}
