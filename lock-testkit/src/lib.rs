//! Test kit for verrou backends: the conformance suite, a fault-injecting
//! backend wrapper, and a harness that runs real `redis-server` processes.
//!
//! A backend crate runs the whole suite with one line per trait:
//!
//! ```text
//! lock_testkit::lock_conformance!(paused, async { LockSuite::new(|| async { backend() }) });
//! lock_testkit::versioned_conformance!(paused, async { VersionedSuite::new(|| async { store() }) });
//! ```
//!
//! `paused` runs each case under tokio's paused clock (in-process backends
//! only); `real` runs in real time (servers), on a multi-threaded runtime
//! unless the caller picks `real, flavor = current_thread`.
//!
//! The default feature `harness` adds [`server`], which starts real
//! `redis-server` processes; the suite and [`FaultyBackend`] compile without
//! it (`default-features = false`).
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod conformance;
pub mod faulty;
pub mod redaction;
#[cfg(feature = "harness")]
#[cfg_attr(docsrs, doc(cfg(feature = "harness")))]
pub mod server;

pub use conformance::{ElectionSuite, LockSuite, MultiSuite, RwSuite, SemaphoreSuite, VersionedSuite};
#[cfg(feature = "harness")]
#[cfg_attr(docsrs, doc(cfg(feature = "harness")))]
pub use conformance::{RenewManySuite, RenewManyTarget};
pub use faulty::{CallCounts, Fault, FaultControl, FaultyBackend};

#[doc(hidden)]
pub mod __private {
    pub use tokio;
}
