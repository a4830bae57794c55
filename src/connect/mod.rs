//! One URL to a connected backend: [`connect`]. Each backend crate reads
//! its own URLs (its config type documents the grammar and parameters);
//! this module only maps a scheme to the crate compiled in.
//!
//! | URL | backend | config | feature |
//! |---|---|---|---|
//! | `memory://` | [`crate::memory`] (this process only) | `MemoryConfig` | `memory` |
//! | `redis://[user:pass@]host[:port][/db]`, `rediss://…`, `redis+cluster://h1,h2…`, `rediss+cluster://…` | [`crate::redis_lua`] | `RedisLuaConfig` | `redis-lua`, `redis-lua-tls` |
//! | `tair://…`, `tairs://…`, `tair+cluster://…`, `tairs+cluster://…` | [`crate::tair`] | `TairConfig` | `tair`, `tair-tls` |
//! | `redlock://?…` (nodes as other backends' URLs) | [`crate::redlock`] over any of the above | `RedlockConfig` | `redlock` |
//! | `postgres://user[:pass]@host[:port]/db`, `postgresql://…` | [`crate::postgres`] | `PostgresConfig` | `postgres`, `postgres-tls` |
//! | `etcd://[user:pass@]h1[:2379],h2…`, `etcds://…` | [`crate::etcd`] | `EtcdConfig` | `etcd`, `etcd-tls` |
//!
//! Every unknown parameter, malformed host, or scheme whose feature is off is
//! an error saying what to write instead; passwords appear in no message and
//! no `Debug` output. [`check_url`] runs the same checks as [`connect`],
//! short of connecting.

mod kinds;
mod table;

#[cfg(feature = "serde")]
mod config;

use lock_core::raw::Connected;
use lock_core::{LockBackend, LockManager, LockOptions, Result, VersionedStore};
use std::sync::Arc;

#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use config::ConnectConfig;
pub use table::schemes;

/// A backend chosen and connected by [`connect`]: its lock operations, its
/// versioned store when it has one, and managers of the other lock kinds
/// ([`Backend::semaphores`], [`Backend::elections`], [`Backend::rw_locks`],
/// [`Backend::multi_locks`]).
#[derive(Clone)]
pub struct Backend {
    connected: Connected,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("url", &self.connected.description)
            .field("backend", &self.connected.locks.capabilities().name)
            .field("store", &self.connected.store.is_some())
            .finish_non_exhaustive()
    }
}

impl Backend {
    /// The lock operations (give them to a [`LockManager`], or use
    /// [`Backend::manager`]).
    pub fn locks(&self) -> &Arc<dyn LockBackend> {
        &self.connected.locks
    }

    /// The versioned store: `None` for `redlock://`, which has none.
    pub fn store(&self) -> Option<&Arc<dyn VersionedStore>> {
        self.connected.store.as_ref()
    }

    /// A [`LockManager`] over this backend.
    ///
    /// # Errors
    /// [`lock_core::Error::InvalidArgument`] for invalid options (see
    /// [`LockManager::from_arc`]).
    pub fn manager(&self, options: LockOptions) -> Result<LockManager> {
        LockManager::from_arc(self.connected.locks.clone(), options)
    }

    /// The URL it was connected with, without passwords.
    pub fn description(&self) -> &str {
        &self.connected.description
    }

    /// True for `memory://` (and a `redlock://` with a `memory://` node): its
    /// locks exist only inside this process.
    pub fn is_in_process(&self) -> bool {
        self.connected.in_process
    }
}

/// Parse `url`, connect the backend it names (eagerly: a wrong address or
/// password fails here) and return it.
///
/// Starting during an outage: a single server or cluster that is down
/// fails here with [`lock_core::Error::Backend`] — at once when the
/// connection is refused, after the backend's connect timeout when the server accepts
/// but does not answer (paused, overloaded); nothing is retried in the
/// background, so retry `connect` (or restart the process). A `redlock://`
/// URL starts once a quorum of its nodes has connected (or failed its first
/// attempt): the nodes that failed keep connecting in the background, count
/// as failed votes until they answer, and are used from then on
/// (`verrou::redlock::LazyNode`); fewer than a quorum is an
/// [`lock_core::Error::Backend`] naming each node's failure.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> verrou::Result<()> {
/// let backend = verrou::connect("memory://").await?;
/// let locks = backend.manager(verrou::LockOptions::default())?;
/// locks.lock("job").await?.release().await?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`lock_core::Error::InvalidArgument`] for a malformed URL or parameter
/// (the message says what to fix); [`lock_core::Error::Unsupported`] for a
/// scheme whose Cargo feature is off (the message names the feature);
/// [`lock_core::Error::Backend`] when a server cannot be reached or refuses
/// the credentials.
///
/// # Cancel safety
/// Cancelling drops the connections made so far; nothing is written.
pub async fn connect(url: &str) -> Result<Backend> {
    let connected = table::TABLE.connect(url).await?;
    Ok(Backend { connected })
}

/// Check `url` without connecting: the same errors as [`connect`] for
/// malformed URLs, out-of-range or conflicting parameters and disabled
/// features.
///
/// # Errors
/// As [`connect`], except [`lock_core::Error::Backend`].
pub fn check_url(url: &str) -> Result<()> {
    table::TABLE.check(url)
}
