//! What the manager itself reports about each lease, whichever backend and
//! layers sit below it: a `verrou.lock` span around every `lock` / `try_lock`
//! (attempts, wait time, outcome) with a `verrou.attempt` span (`attempt`:
//! 0-based) around each attempt's backend call, a `verrou.with_lock` span around scoped
//! sections, a `verrou.renewer` span per batch of renewals (`leases`: how
//! many were due together), and an `error!` event when a lease is lost (key,
//! reason, how late it was noticed).
//!
//! With the `metrics` feature the same points feed the [`metrics`] facade
//! (any exporter: Prometheus, StatsD, OpenTelemetry):
//!
//! | metric | kind | labels | recorded |
//! |---|---|---|---|
//! | `verrou_lock_wait_seconds` | histogram | `outcome`: `acquired`, `busy`, `timeout`, `error` | when `lock` / `try_lock` returns |
//! | `verrou_hold_seconds` | histogram | – | when a guard is released or dropped |
//! | `verrou_renewal_margin_seconds` | histogram | – | at each successful renewal: time that was left before the local deadline when the reply came (small = a near miss) |
//! | `verrou_renew_latency_seconds` | histogram | – | at each successful renewal: request sent → reply |
//! | `verrou_losses_total` | counter | `reason`: `not_owner`, `deadline_passed` | once per lost lease |
//!
//! Backend-call metrics (acquisitions, contentions, unknown outcomes,
//! conflicts, call latency) come from `layers::MetricsLayer` (feature `metrics`).
//!
//! [`metrics`]: https://docs.rs/metrics

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::error::{Error, LossReason, Result};
use crate::token::FencingToken;

/// Name of the lock-wait histogram.
pub const LOCK_WAIT_SECONDS: &str = "verrou_lock_wait_seconds";
/// Name of the hold-time histogram.
pub const HOLD_SECONDS: &str = "verrou_hold_seconds";
/// Name of the renewal-margin histogram.
pub const RENEWAL_MARGIN_SECONDS: &str = "verrou_renewal_margin_seconds";
/// Name of the renew-latency histogram.
pub const RENEW_LATENCY_SECONDS: &str = "verrou_renew_latency_seconds";
/// Name of the lost-lease counter.
pub const LOSSES_TOTAL: &str = "verrou_losses_total";

/// What a `lock` call's span records of a grant (the guard, which this
/// module does not need to know).
pub(crate) trait Fenced {
    fn fencing_token(&self) -> Option<FencingToken>;
}

pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The span of one `lock` (`wait`) or `try_lock` call.
pub(crate) fn lock_span(key: &str, wait: bool) -> Span {
    tracing::debug_span!(
        "verrou.lock",
        key,
        wait,
        attempts = Empty,
        wait_us = Empty,
        outcome = Empty,
        fencing_token = Empty,
    )
}

/// When a `lock` / `try_lock` call started, if anyone records its wait:
/// timing costs two clock reads per call.
pub(crate) fn lock_started(span: &Span) -> Option<Instant> {
    (cfg!(feature = "metrics") || !span.is_disabled()).then(Instant::now)
}

/// Run the manager's acquire loop inside its span, then record how it went
/// (`attempted`: attempts made before the loop; the loop answers with the
/// attempts it made).
pub(crate) async fn acquiring<F, G>(
    wait: bool,
    span: Span,
    started: Option<Instant>,
    attempted: u32,
    acquire: F,
) -> Result<Option<G>>
where
    F: Future<Output = (Result<Option<G>>, u32)>,
    G: Fenced,
{
    // No `Instrumented` wrapper (an enter and exit per poll) when nobody
    // listens: the uncontended pair's budget.
    let (result, attempts) = if span.is_disabled() {
        acquire.await
    } else {
        acquire.instrument(span.clone()).await
    };
    record_lock(&span, wait, started, attempted.saturating_add(attempts), &result);
    result
}

/// Record how a `lock` / `try_lock` call went in its span (and metrics).
pub(crate) fn record_lock<G: Fenced>(
    span: &Span,
    wait: bool,
    started: Option<Instant>,
    attempts: u32,
    result: &Result<Option<G>>,
) {
    let waited = started.map_or(Duration::ZERO, |t| t.elapsed());
    let outcome = match result {
        Ok(Some(_)) => "acquired",
        Ok(None) if wait => "timeout",
        Ok(None) => "busy",
        Err(Error::Timeout { .. }) => "timeout",
        Err(_) => "error",
    };
    // Recording looks each field up by name: skipped when nobody listens.
    if !span.is_disabled() {
        span.record("attempts", attempts);
        span.record("wait_us", micros(waited));
        span.record("outcome", outcome);
        if let Ok(Some(guard)) = result
            && let Some(token) = guard.fencing_token()
        {
            span.record("fencing_token", token.0);
        }
    }
    #[cfg(feature = "metrics")]
    metrics::histogram!(LOCK_WAIT_SECONDS, "outcome" => outcome).record(waited.as_secs_f64());
}

/// The span of acquire attempt `attempt` (0-based) of a `lock` /
/// `try_lock` call: the backend calls of the attempt (a layer's spans) sit
/// under it.
pub(crate) fn attempt_span(attempt: u32) -> Span {
    tracing::debug_span!("verrou.attempt", attempt)
}

/// The span of one `with_lock` call (the body runs inside it).
pub(crate) fn with_lock_span(key: &str) -> Span {
    tracing::debug_span!("verrou.with_lock", key, held_us = Empty, outcome = Empty)
}

/// The span of one batch of renewals (the manager's renewer renews the
/// leases due in the same tick together): a root, since it outlives the
/// `lock` calls that acquired them.
pub(crate) fn renewer_span(leases: usize) -> Span {
    tracing::debug_span!(parent: None, "verrou.renewer", leases)
}

/// The metric label of a loss reason.
pub(crate) fn reason_label(reason: LossReason) -> &'static str {
    match reason {
        LossReason::NotOwner => "not_owner",
        LossReason::DeadlinePassed => "deadline_passed",
        LossReason::Released => "released",
    }
}
