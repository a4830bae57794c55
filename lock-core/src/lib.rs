//! Core of verrou: the [`LockBackend`] and [`VersionedStore`] traits, the
//! owned [`LockGuard`], the background renewer, and the [`LockManager`].
//!
//! Backends implement the small primitive traits; everything else (waiting
//! with jittered backoff, renewal, loss detection on a local monotonic
//! deadline, scoped critical sections, optimistic-update retries) lives here
//! once, so every backend behaves the same.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod background;
mod batch;
mod clock;
mod config;
mod engine;
mod error;
mod guard;
mod inspect;
mod inspecting;
mod kinds;
mod lane;
pub mod layers;
mod lease;
mod manager;
mod min_hold;
pub mod observe;
mod options;
mod redact;
mod renewer;
mod runtime;
mod scoped;
mod token;
mod validate;
mod value;
mod versioned;
mod wait_hint;

pub use backend::{
    AcquireOutcome, Capabilities, Lease, LockBackend, OnShortfall, ReleaseOutcome, RenewOutcome, ReplicaAck,
    Replication,
};
pub use background::wait_for_background_releases;
pub use error::{BoxError, Error, LossReason, NodeOutcome, NodeReports, NotHeldReason, RefusalReason, Result};
pub use guard::{LeaseHandle, LockGuard};
pub use inspect::{Inspection, LockInfo};
pub use kinds::election::{ElectionManager, Lead, LeaderInfo, Leadership};
pub use kinds::guard::KindGuard;
pub use kinds::multi::{KeySet, MultiLockGuard, MultiLockManager};
pub use kinds::rw::{RwHold, RwInfo, RwLockGuard, RwLockManager, RwMode};
pub use kinds::semaphore::{Permit, Permits, PermitsInfo, Semaphore, SemaphoreManager};
pub use manager::LockManager;
pub use options::{Backoff, Fairness, LockOptions, Renewal};
pub use token::{FencingToken, LockToken};
pub use versioned::{
    CasOutcome, CreateOutcome, DeleteOutcome, Expiry, UpdateOptions, Versioned, VersionedStore, VersionedStoreExt,
};

/// For backend authors, and only for them: the outcomes a backend answers
/// with, the lock kinds' backend traits, fair-queue waiters, the synchronous
/// fast path, and the checks and conversions every backend applies the same
/// way (with the planner of batched renewals). Application code needs
/// nothing here: it uses managers, guards, options and errors from the
/// crate root.
pub mod raw {
    pub use crate::backend::{FairWaiter, InstantLockBackend, WaitOptions, Waiter};
    pub use crate::batch::RenewBatch;
    pub use crate::config::{
        BackendConfig, Connected, Connector, SchemeEntry, SchemeTable, UrlParts, hide_quoted_url_text, in_context,
        parse_bool, parse_duration, parse_host_port, parse_number, percent_decode, refuse_conflicting_repeats,
        unknown_parameter,
    };
    pub use crate::kinds::election::{ElectionBackend, validate_identity};
    pub use crate::kinds::multi::MultiLockBackend;
    pub use crate::kinds::rw::{RwLockBackend, conversion_not_held};
    pub use crate::kinds::semaphore::{GONE_WINDOW_MS, PermitRequest, SemaphoreBackend, size_mismatch};
    pub use crate::redact::redact_url;
    pub use crate::validate::{MAX_KEY_LEN, MAX_TIMEOUT, clock_drift, ttl_millis, validate_key, validate_ttl};
    pub use crate::wait_hint::wait_hint;
    /// Re-exported so that backends implement the traits with the macro
    /// version lock-core uses.
    pub use async_trait::async_trait;
}
