//! A span per backend call.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use super::{CANCELLED, Label, observing_lock_backend, result_label};
use crate::backend::{AcquireOutcome, LockBackend, ReleaseOutcome, RenewOutcome};
use crate::error::Result;
use crate::observe::micros;
use crate::token::LockToken;
use crate::versioned::{CasOutcome, CreateOutcome, DeleteOutcome, Expiry, Versioned, VersionedStore};

/// Wraps a backend and opens an `INFO` span per call: `verrou.acquire`,
/// `verrou.release`, `verrou.renew`, `verrou.renew_many`, `verrou.get`,
/// `verrou.create`, `verrou.compare_and_set`, `verrou.delete`.
///
/// | field | meaning |
/// |---|---|
/// | `backend` | the wrapped backend's name |
/// | `key` | the key (`keys`: how many, for `renew_many`) |
/// | `outcome` | `acquired`, `held`, `released`, `renewed`, `held_by_other`, `missing`, `found`, `created`, `written`, `deleted`, `conflict`, `error`, `unknown` (an error after which the write may have happened), `cancelled` (the caller stopped waiting) |
/// | `fencing_token` | of a granted acquire, when the backend issues them |
/// | `version` | written by a versioned op |
/// | `elapsed_us` | call duration in microseconds |
/// | `renewed`, `not_held`, `failed` | per-item counts of `renew_many` |
///
/// The spans are children of the current span, so calls the manager makes
/// sit under its `verrou.lock` span (an acquire under the `verrou.attempt`
/// span that numbers it, see [`crate::observe`]), and wrapping each node of
/// a quorum backend gives one child span per node.
#[derive(Debug, Clone)]
pub struct TracingLayer<B> {
    inner: B,
    name: OnceLock<String>,
}

impl<B> TracingLayer<B> {
    /// Trace `inner`'s calls.
    pub fn new(inner: B) -> Self {
        TracingLayer {
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

/// Records `cancelled` if the call is dropped before it finishes.
struct Call {
    span: Span,
    started: Instant,
    finished: bool,
}

impl Call {
    fn new(span: &Span) -> Self {
        Call {
            span: span.clone(),
            started: Instant::now(),
            finished: false,
        }
    }

    fn finish(&mut self, outcome: &'static str) {
        self.finished = true;
        self.span.record("outcome", outcome);
        self.span.record("elapsed_us", micros(self.started.elapsed()));
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if !self.finished {
            self.finish(CANCELLED);
        }
    }
}

async fn traced<T: Label>(span: Span, call: impl Future<Output = Result<T>>) -> Result<T> {
    let mut record = Call::new(&span);
    let result = call.instrument(span).await;
    record.finish(result_label(&result));
    result
}

macro_rules! key_span {
    ($name:literal, $backend:expr, $key:expr) => {
        tracing::info_span!(
            $name,
            backend = $backend,
            key = $key,
            outcome = Empty,
            elapsed_us = Empty,
            fencing_token = Empty,
            version = Empty,
        )
    };
}

impl<B: LockBackend> TracingLayer<B> {
    fn lock_name(&self) -> &str {
        self.name.get_or_init(|| self.inner.capabilities().name)
    }
}

observing_lock_backend!(TracingLayer {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        let span = key_span!("verrou.acquire", self.lock_name(), key);
        let result = traced(span.clone(), self.inner.try_acquire(key, token, ttl)).await;
        if let Ok(AcquireOutcome::Acquired(lease)) = &result {
            span.record("fencing_token", lease.fencing_token.map(|t| t.0));
        }
        result
    }

    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        let span = key_span!("verrou.release", self.lock_name(), key);
        traced(span, self.inner.release(key, token)).await
    }

    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        let span = key_span!("verrou.renew", self.lock_name(), key);
        traced(span, self.inner.renew(key, token, ttl)).await
    }

    async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        let span = tracing::info_span!(
            "verrou.renew_many",
            backend = self.lock_name(),
            keys = items.len(),
            outcome = Empty,
            elapsed_us = Empty,
            renewed = Empty,
            not_held = Empty,
            failed = Empty,
        );
        let mut record = Call::new(&span);
        let results = self.inner.renew_many(items, ttl).instrument(span.clone()).await;
        let (mut renewed, mut not_held, mut failed) = (0usize, 0usize, 0usize);
        for r in &results {
            match r {
                Ok(RenewOutcome::Renewed) => renewed += 1,
                Ok(_) => not_held += 1,
                Err(_) => failed += 1,
            }
        }
        span.record("renewed", renewed);
        span.record("not_held", not_held);
        span.record("failed", failed);
        record.finish(if renewed == results.len() { "renewed" } else { "partial" });
        results
    }
});

impl<S: VersionedStore> TracingLayer<S> {
    fn store(&self) -> &str {
        self.name.get_or_init(|| self.inner.name().to_owned())
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)] // a wrapper forwards every method
impl<S: VersionedStore> VersionedStore for TracingLayer<S> {
    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        let span = key_span!("verrou.get", self.store(), key);
        let result = traced(span.clone(), self.inner.get(key)).await;
        if let Ok(Some(v)) = &result {
            span.record("version", v.version);
        }
        result
    }

    async fn create(&self, key: &str, value: &[u8], expiry: Expiry) -> Result<CreateOutcome> {
        let span = key_span!("verrou.create", self.store(), key);
        let result = traced(span.clone(), self.inner.create(key, value, expiry)).await;
        if let Ok(CreateOutcome::Created { version }) = &result {
            span.record("version", *version);
        }
        result
    }

    async fn compare_and_set(&self, key: &str, expected: u64, value: &[u8], expiry: Expiry) -> Result<CasOutcome> {
        let span = key_span!("verrou.compare_and_set", self.store(), key);
        let result = traced(span.clone(), self.inner.compare_and_set(key, expected, value, expiry)).await;
        if let Ok(CasOutcome::Written { version }) = &result {
            span.record("version", *version);
        }
        result
    }

    async fn delete(&self, key: &str, expected: u64) -> Result<DeleteOutcome> {
        let span = key_span!("verrou.delete", self.store(), key);
        traced(span, self.inner.delete(key, expected)).await
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
}
