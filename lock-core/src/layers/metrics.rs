//! Counters and latency histograms per backend call, on the `metrics` facade.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{CANCELLED, Label, observing_lock_backend, result_label};
use crate::backend::{AcquireOutcome, LockBackend, ReleaseOutcome, RenewOutcome};
use crate::error::Result;
use crate::token::LockToken;
use crate::versioned::{CasOutcome, CreateOutcome, DeleteOutcome, Expiry, Versioned, VersionedStore};

/// Name of the per-call latency histogram.
pub const BACKEND_CALL_SECONDS: &str = "verrou_backend_call_seconds";
/// Name of the granted-acquire counter.
pub const ACQUISITIONS_TOTAL: &str = "verrou_acquisitions_total";
/// Name of the found-it-held counter.
pub const CONTENTIONS_TOTAL: &str = "verrou_contentions_total";
/// Name of the outcome-unknown counter.
pub const UNKNOWN_OUTCOMES_TOTAL: &str = "verrou_unknown_outcomes_total";
/// Name of the versioned-conflict counter.
pub const CONFLICTS_TOTAL: &str = "verrou_conflicts_total";
/// Name of the not-held counter (renew or release refused).
pub const NOT_HELD_TOTAL: &str = "verrou_not_held_total";
/// Name of the known-failure counter.
pub const ERRORS_TOTAL: &str = "verrou_backend_errors_total";

/// Wraps a backend and records, for every call, on the [`metrics`] facade
/// (install any recorder or exporter; without one this costs a few atomic
/// loads):
///
/// | metric | kind | labels | counts |
/// |---|---|---|---|
/// | `verrou_backend_call_seconds` | histogram | `backend`, `op`, `outcome` | every call (`op` = `renew` / `renew_many` is the renew latency) |
/// | `verrou_acquisitions_total` | counter | `backend` | acquires that took the key |
/// | `verrou_contentions_total` | counter | `backend` | acquires that found it held |
/// | `verrou_not_held_total` | counter | `backend`, `op`, `outcome` | renews / releases refused (`held_by_other`, `missing`) |
/// | `verrou_unknown_outcomes_total` | counter | `backend`, `op` | errors after which the write may have happened, and calls dropped before they answered (e.g. the manager's per-call timeout) |
/// | `verrou_conflicts_total` | counter | `backend`, `op` | versioned writes refused for a version mismatch (`create` on an existing key included) |
/// | `verrou_backend_errors_total` | counter | `backend`, `op` | other errors |
///
/// `op` is `acquire`, `release`, `renew`, `renew_many`, `get`, `create`,
/// `compare_and_set` or `delete`; `outcome` as in
/// [`crate::layers::TracingLayer`]. Per-item outcomes of `renew_many` count
/// like single renews. Lease-level metrics (wait, hold time, renewal margin,
/// losses) come from the manager: see [`crate::observe`].
///
/// [`metrics`]: https://docs.rs/metrics
#[derive(Debug, Clone)]
pub struct MetricsLayer<B> {
    inner: B,
    name: OnceLock<String>,
}

impl<B> MetricsLayer<B> {
    /// Measure `inner`'s calls.
    pub fn new(inner: B) -> Self {
        MetricsLayer {
            inner,
            name: OnceLock::new(),
        }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// Unwrap.
    pub fn into_inner(self) -> B {
        self.inner
    }
}

/// Counts a call dropped before it answered as an unknown outcome.
struct Call<'a> {
    backend: &'a str,
    op: &'static str,
    started: Instant,
    finished: bool,
}

impl<'a> Call<'a> {
    fn new(backend: &'a str, op: &'static str) -> Self {
        Call {
            backend,
            op,
            started: Instant::now(),
            finished: false,
        }
    }

    fn finish(&mut self, outcome: &'static str) {
        self.finished = true;
        let (backend, op) = (self.backend.to_owned(), self.op);
        metrics::histogram!(BACKEND_CALL_SECONDS, "backend" => backend.clone(), "op" => op, "outcome" => outcome)
            .record(self.started.elapsed().as_secs_f64());
        count_outcome(backend, op, outcome);
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.finish(CANCELLED);
        }
    }
}

fn count_outcome(backend: String, op: &'static str, outcome: &'static str) {
    match outcome {
        "acquired" => metrics::counter!(ACQUISITIONS_TOTAL, "backend" => backend).increment(1),
        "held" => metrics::counter!(CONTENTIONS_TOTAL, "backend" => backend).increment(1),
        "held_by_other" | "missing" if matches!(op, "renew" | "renew_many" | "release") => {
            metrics::counter!(NOT_HELD_TOTAL, "backend" => backend, "op" => op, "outcome" => outcome).increment(1);
        }
        "conflict" => metrics::counter!(CONFLICTS_TOTAL, "backend" => backend, "op" => op).increment(1),
        "unknown" | CANCELLED => {
            metrics::counter!(UNKNOWN_OUTCOMES_TOTAL, "backend" => backend, "op" => op).increment(1)
        }
        "error" => metrics::counter!(ERRORS_TOTAL, "backend" => backend, "op" => op).increment(1),
        _ => {}
    }
}

async fn measured<T: Label>(backend: &str, op: &'static str, call: impl Future<Output = Result<T>>) -> Result<T> {
    let mut record = Call::new(backend, op);
    let result = call.await;
    record.finish(result_label(&result));
    result
}

impl<B: LockBackend> MetricsLayer<B> {
    fn lock_name(&self) -> &str {
        self.name.get_or_init(|| self.inner.capabilities().name)
    }
}

observing_lock_backend!(MetricsLayer {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        measured(self.lock_name(), "acquire", self.inner.try_acquire(key, token, ttl)).await
    }

    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        measured(self.lock_name(), "release", self.inner.release(key, token)).await
    }

    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        measured(self.lock_name(), "renew", self.inner.renew(key, token, ttl)).await
    }

    async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        let backend = self.lock_name();
        let mut record = Call::new(backend, "renew_many");
        let results = self.inner.renew_many(items, ttl).await;
        let all_renewed = results.iter().all(|r| matches!(r, Ok(RenewOutcome::Renewed)));
        // The histogram gets one sample per batch; the counters one per item.
        record.finished = true;
        metrics::histogram!(
            BACKEND_CALL_SECONDS,
            "backend" => backend.to_owned(),
            "op" => "renew_many",
            "outcome" => if all_renewed { "renewed" } else { "partial" }
        )
        .record(record.started.elapsed().as_secs_f64());
        for r in &results {
            count_outcome(backend.to_owned(), "renew_many", result_label(r));
        }
        results
    }
});

impl<S: VersionedStore> MetricsLayer<S> {
    fn store(&self) -> &str {
        self.name.get_or_init(|| self.inner.name().to_owned())
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)] // a wrapper forwards every method
impl<S: VersionedStore> VersionedStore for MetricsLayer<S> {
    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        measured(self.store(), "get", self.inner.get(key)).await
    }

    async fn create(&self, key: &str, value: &[u8], expiry: Expiry) -> Result<CreateOutcome> {
        measured(self.store(), "create", self.inner.create(key, value, expiry)).await
    }

    async fn compare_and_set(&self, key: &str, expected: u64, value: &[u8], expiry: Expiry) -> Result<CasOutcome> {
        measured(
            self.store(),
            "compare_and_set",
            self.inner.compare_and_set(key, expected, value, expiry),
        )
        .await
    }

    async fn delete(&self, key: &str, expected: u64) -> Result<DeleteOutcome> {
        measured(self.store(), "delete", self.inner.delete(key, expected)).await
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
}
