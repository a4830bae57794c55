//! Middleware for backends: wrappers that are themselves a [`LockBackend`]
//! (and a [`VersionedStore`] when the wrapped backend is one), like tower's
//! layers. Stack them in any order and hand the result to a
//! [`crate::LockManager`]:
//!
//! ```
//! # fn demo(backend: impl lock_core::LockBackend) -> lock_core::Result<()> {
//! use lock_core::LockManager;
//! use lock_core::layers::{PrefixLayer, TracingLayer};
//! let locks = LockManager::new(TracingLayer::new(PrefixLayer::new(backend, "billing:")))?;
//! # Ok(()) }
//! ```
//!
//! - [`TracingLayer`]: a span per backend call.
//! - `MetricsLayer` (feature `metrics`): counters and latency histograms
//!   per backend call on the `metrics` facade.
//! - [`PrefixLayer`]: namespaces every key.
//!
//! What the manager reports about whole leases (wait, hold time, renewal
//! margin, losses) is described in [`crate::observe`].
//!
//! [`LockBackend`]: crate::LockBackend
//! [`VersionedStore`]: crate::VersionedStore

#[cfg(feature = "metrics")]
mod metrics;
mod prefix;
mod tracing;

#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use self::metrics::MetricsLayer;
pub use self::prefix::PrefixLayer;
pub use self::tracing::TracingLayer;

use crate::backend::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use crate::error::Result;
use crate::versioned::{CasOutcome, CreateOutcome, DeleteOutcome, Versioned};

/// A short, stable label for an operation's outcome (span field, metric label).
pub(crate) trait Label {
    fn label(&self) -> &'static str;
}

impl Label for AcquireOutcome {
    fn label(&self) -> &'static str {
        match self {
            AcquireOutcome::Acquired(_) => "acquired",
            AcquireOutcome::Held { .. } => "held",
        }
    }
}

impl Label for ReleaseOutcome {
    fn label(&self) -> &'static str {
        match self {
            ReleaseOutcome::Released => "released",
            ReleaseOutcome::HeldByOther => "held_by_other",
            ReleaseOutcome::Missing => "missing",
        }
    }
}

impl Label for RenewOutcome {
    fn label(&self) -> &'static str {
        match self {
            RenewOutcome::Renewed => "renewed",
            RenewOutcome::HeldByOther => "held_by_other",
            RenewOutcome::Missing => "missing",
        }
    }
}

impl Label for Option<Versioned> {
    fn label(&self) -> &'static str {
        match self {
            Some(_) => "found",
            None => "missing",
        }
    }
}

impl Label for CreateOutcome {
    fn label(&self) -> &'static str {
        match self {
            CreateOutcome::Created { .. } => "created",
            CreateOutcome::Exists => "conflict",
        }
    }
}

impl Label for CasOutcome {
    fn label(&self) -> &'static str {
        match self {
            CasOutcome::Written { .. } => "written",
            CasOutcome::Conflict(_) => "conflict",
            CasOutcome::Missing => "missing",
        }
    }
}

impl Label for DeleteOutcome {
    fn label(&self) -> &'static str {
        match self {
            DeleteOutcome::Deleted => "deleted",
            DeleteOutcome::Conflict { .. } => "conflict",
            DeleteOutcome::Missing => "missing",
        }
    }
}

/// `unknown` for an error whose write may have happened, `error` otherwise.
pub(crate) fn result_label<T: Label>(result: &Result<T>) -> &'static str {
    match result {
        Ok(v) => v.label(),
        Err(e) if e.is_outcome_unknown() => "unknown",
        Err(_) => "error",
    }
}

/// Outcome label of a call whose future was dropped before it answered:
/// the write may or may not have happened.
pub(crate) const CANCELLED: &str = "cancelled";

/// The [`crate::LockBackend`] impl of an observing layer (`TracingLayer`,
/// `MetricsLayer`): the observed calls given, plus the ones it passes through
/// untouched (waits, the fair queue) and its capabilities (the wrapped
/// backend's, without the lock kinds it does not wrap); never the
/// wrapped backend's `instant` (every call goes through the layer). The whole impl is
/// generated so that `async_trait` sees every method.
macro_rules! observing_lock_backend {
    ($layer:ident { $($observed:tt)* }) => {
        #[async_trait::async_trait]
        #[deny(clippy::missing_trait_methods)] // a wrapper forwards every method
        impl<B: $crate::backend::LockBackend> $crate::backend::LockBackend for $layer<B> {
            $($observed)*

            async fn wait_for_release(&self, key: &str, max_wait: std::time::Duration) {
                self.inner.wait_for_release(key, max_wait).await;
            }

            async fn wait_for_release_opts(&self, key: &str, options: &$crate::backend::WaitOptions) {
                self.inner.wait_for_release_opts(key, options).await;
            }

            async fn try_acquire_fair(
                &self,
                key: &str,
                token: &$crate::token::LockToken,
                ttl: std::time::Duration,
                waiter: &$crate::backend::FairWaiter,
            ) -> $crate::error::Result<$crate::backend::AcquireOutcome> {
                self.inner.try_acquire_fair(key, token, ttl, waiter).await
            }

            async fn wait_fair(&self, key: &str, waiter: &$crate::backend::FairWaiter, max_wait: std::time::Duration) {
                self.inner.wait_fair(key, waiter, max_wait).await;
            }

            async fn leave_queue(&self, key: &str, waiter: &$crate::backend::FairWaiter) -> $crate::error::Result<()> {
                self.inner.leave_queue(key, waiter).await
            }

            async fn inspect(&self, key: &str) -> $crate::error::Result<$crate::inspect::LockInfo> {
                self.inner.inspect(key).await
            }

            fn capabilities(&self) -> $crate::backend::Capabilities {
                self.inner.capabilities().without_kinds()
            }

            /// Never forwarded: every call goes through the layer.
            fn instant(&self) -> Option<&dyn $crate::backend::InstantLockBackend> {
                None
            }
        }
    };
}
pub(crate) use observing_lock_backend;
