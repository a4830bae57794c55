//! What verrou's Redis-family backends share, and nothing else uses: the Lua
//! text of the release-notification and fair-queue protocol ([`wake`]) and
//! of every lock kind ([`kinds`]), with the kinds' client-agnostic driver
//! ([`kinds::scripted::ScriptedKinds`]). `lock-redis-lua` (Redis, Valkey) and
//! `lock-tair` (Tair, or Redis with a TairString-compatible module) run the
//! same scripts, so their kinds and their waiters behave alike; [`board`]
//! is the client side of their release notifications.
//!
//! For backend authors; applications never import this crate. `lock-core`
//! knows no Redis: its traits and managers are the same for PostgreSQL and
//! etcd.

pub mod board;
pub mod kinds;
pub mod wake;
