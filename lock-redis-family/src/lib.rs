//! What verrou's Redis-family backends share, and nothing else uses: the Lua
//! text of the release-notification and fair-queue protocol ([`wake`]) and
//! of every lock kind ([`kinds`]), with the kinds' client-agnostic driver
//! ([`kinds::scripted::ScriptedKinds`]). `lock-redis-lua` (Redis, Valkey) and
//! `lock-tair` (Tair, or Redis with a TairString-compatible module) run the
//! same scripts, so their kinds and their waiters behave alike; [`board`]
//! is the client side of their release notifications, and
//! [`kind_backends!`] writes a backend's kind traits over the driver.
//!
//! For backend authors; applications never import this crate. `lock-core`
//! knows no Redis: its traits and managers are the same for PostgreSQL and
//! etcd.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod board;
pub mod fence;
pub mod inspect;
pub mod keys;
pub mod kinds;
mod macros;
pub mod settings;
pub mod shortfall;
pub mod url;
pub mod wake;

/// What [`kind_backends!`]'s expansion names, so that a backend needs no
/// dependency of its own for it.
#[doc(hidden)]
pub mod __private {
    pub use lock_core;
}
