//! Core of verrou: the [`LockBackend`] and [`VersionedStore`] traits, the
//! owned [`LockGuard`], the background renewer, and the [`LockManager`].
//!
//! Backends implement the small primitive traits; everything else (waiting
//! with jittered backoff, renewal, loss detection on a local monotonic
//! deadline, scoped critical sections, optimistic-update retries) lives here
//! once, so every backend behaves the same.

pub mod backend;
mod batch;
mod clock;
mod engine;
pub mod error;
pub mod guard;
pub mod kinds;
mod lane;
pub mod layers;
mod lease;
pub mod manager;
pub mod observe;
pub mod options;
mod redact;
mod renewer;
pub mod token;
mod validate;
mod value;
pub mod versioned;

pub use backend::{
    AcquireOutcome, Capabilities, FairWaiter, InstantLockBackend, Lease, LockBackend, OnShortfall, ReleaseOutcome,
    RenewOutcome, ReplicaAck, Replication,
};
pub use batch::RenewBatch;
pub use error::{BoxError, Error, LossReason, NodeOutcome, NodeReports, NotHeldReason, Result};
pub use guard::{LeaseHandle, LockGuard};
pub use kinds::election::{ElectionBackend, ElectionManager, LeaderInfo, Leadership};
pub use kinds::multi::{MultiLockBackend, MultiLockGuard, MultiLockManager};
pub use kinds::rw::{RwLockBackend, RwLockGuard, RwLockManager, RwMode};
pub use kinds::semaphore::{Permit, PermitRequest, Semaphore, SemaphoreBackend, SemaphoreManager};
pub use manager::LockManager;
pub use options::{Backoff, DEFAULT_CLAIM, Fairness, LockOptions, MAX_TIMEOUT, MAX_TTL, MIN_TTL, Renewal};
pub use token::{FencingToken, LockToken};
pub use versioned::{
    CasOutcome, CreateOutcome, DeleteOutcome, Expiry, UpdateOptions, Versioned, VersionedStore, VersionedStoreExt,
};

/// For backend authors: the checks and conversions every backend applies
/// the same way, and the planner of batched renewals. Application code does
/// not need anything here.
pub mod raw {
    pub use crate::batch::RenewBatch;
    pub use crate::redact::redact_url;
    pub use crate::validate::{clock_drift, ttl_millis, validate_key, validate_ttl};
}

/// Re-exported so backends and users name the same trait macro version.
pub use async_trait::async_trait;
