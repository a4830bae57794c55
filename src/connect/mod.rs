//! One URL to a connected backend: [`connect`].
//!
//! | URL | backend | feature |
//! |---|---|---|
//! | `memory://` | [`crate::memory`] (this process only) | `memory` |
//! | `redis://[user:pass@]host[:port][/db]`, `rediss://…` (TLS) | [`crate::redis_lua`] | `redis-lua`, `redis-lua-tls` |
//! | `redis+cluster://h1[:p1],h2[:p2]…`, `rediss+cluster://…` | [`crate::redis_lua`] on a Redis Cluster | `redis-lua`, `redis-lua-tls` |
//! | `tair://…`, `tairs://…`, `tair+cluster://…`, `tairs+cluster://…` | [`crate::tair`] | `tair`, `tair-tls` |
//! | `redlock://?quorum=M&node=URL&node=URL…` | [`crate::redlock`] over any of the above | `redlock` |
//! | `postgres://user[:pass]@host[:port]/db`, `postgresql://…` | [`crate::postgres`] | `postgres`, `postgres-tls` |
//! | `etcd://[user:pass@]h1[:2379],h2[:2379]…`, `etcds://…` (TLS) | [`crate::etcd`] | `etcd`, `etcd-tls` |
//!
//! The Redis-family schemes take the same query parameters, each named after
//! the builder method it sets on both [`crate::redis_lua::RedisLuaBuilder`]
//! and [`crate::tair::TairBuilder`]: `connect_timeout` and
//! `response_timeout` (durations like `500ms`, `2s`), `fencing`,
//! `release_notifications` (booleans), `replica_ack=N` with
//! `replica_ack_timeout=D`, `ack_connections=N`, `db=N` (or `/N`), and
//! `tls_ca=PATH` (a PEM file of trusted CA certificates, TLS schemes only;
//! the platform's roots otherwise). `redlock://` takes `node` (repeated; a
//! node's own parameters percent-encoded, `%3F` for `?` and `%26` for `&`),
//! `quorum` (a majority: `2M > N`), `node_timeout` and `drift_factor`.
//!
//! `postgres://` URLs are libpq's (TLS by `sslmode`), read by
//! tokio-postgres, plus `schema`, `create_schema`, `response_timeout`,
//! `pool_size`, `release_notifications` and `listen_url` (a direct
//! connection for `LISTEN` when the URL goes through PgBouncer,
//! percent-encoded) ([`POSTGRES_PARAMS`]).
//!
//! Every unknown parameter, malformed host, or scheme whose feature is off is
//! an error saying what to write instead; passwords appear in no message and
//! no `Debug` output. Numbers are bounded, as on the builders: durations
//! above zero and at most [`crate::MAX_TIMEOUT`] (`replica_ack_timeout`
//! 1 ms to 1 h), `ack_connections` and `pool_size` from 1 to 1024,
//! `replica_ack` at least 1, `drift_factor` from 0 up to 0.5; a parameter
//! given twice with different values is refused (only `node` repeats).
//! [`check_url`] runs the same checks as [`connect`], short of connecting.

mod etcd;
mod kinds;
#[cfg(feature = "postgres")]
mod postgres;
mod url;

#[cfg(feature = "serde")]
mod config;

use std::sync::Arc;

use lock_core::{Error, LockBackend, LockManager, LockOptions, Result, VersionedStore};

#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use config::ConnectConfig;
pub use etcd::{ETCD_DEFAULT_PORT, ETCD_PARAMS};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::POSTGRES_PARAMS;
#[cfg(feature = "redlock")]
use url::RedlockTarget;
pub use url::{DEFAULT_PORT, FAMILY_PARAMS, REDLOCK_PARAMS, SCHEMES};
#[cfg(any(feature = "redis-lua", feature = "tair"))]
use url::{Family, Server};
use url::{Features, Target};

use kinds::Kinds;

/// A backend chosen and connected by [`connect`]: its lock operations, its
/// versioned store when it has one, and managers of the other lock kinds
/// ([`Backend::semaphores`], [`Backend::elections`], [`Backend::rw_locks`],
/// [`Backend::multi_locks`]).
#[derive(Clone)]
pub struct Backend {
    locks: Arc<dyn LockBackend>,
    store: Option<Arc<dyn VersionedStore>>,
    kinds: Kinds,
    description: String,
    in_process: bool,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("url", &self.description)
            .field("backend", &self.locks.capabilities().name)
            .field("store", &self.store.is_some())
            .finish()
    }
}

impl Backend {
    /// The lock operations (give them to a [`LockManager`], or use
    /// [`Backend::manager`]).
    pub fn locks(&self) -> &Arc<dyn LockBackend> {
        &self.locks
    }

    /// The versioned store: `None` for `redlock://`, which has none.
    pub fn store(&self) -> Option<&Arc<dyn VersionedStore>> {
        self.store.as_ref()
    }

    /// A [`LockManager`] over this backend.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for invalid options (see
    /// [`LockManager::from_arc`]).
    pub fn manager(&self, options: LockOptions) -> Result<LockManager> {
        LockManager::from_arc(self.locks.clone(), options)
    }

    /// The URL it was connected with, without passwords.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// True for `memory://` (and a `redlock://` with a `memory://` node): its
    /// locks exist only inside this process.
    pub fn is_in_process(&self) -> bool {
        self.in_process
    }
}

/// Parse `url`, connect the backend it names (eagerly: a wrong address or
/// password fails here) and return it.
///
/// Starting during an outage: a single server or cluster that is down
/// fails here with [`Error::Backend`] — at once when the connection is
/// refused, after `connect_timeout` when the server accepts but does not
/// answer (paused, overloaded); nothing is retried in the background, so
/// retry `connect` (or restart the process). A `redlock://` URL starts
/// once a quorum of its nodes has connected (or failed its first attempt):
/// the nodes that failed keep connecting in the background, count as
/// failed votes until they answer, and are used from then on
/// (`verrou::redlock::LazyNode`); fewer than a quorum is an
/// [`Error::Backend`] naming each node's failure.
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
/// [`Error::InvalidArgument`] for a malformed URL or parameter (the message
/// says what to fix); [`Error::Unsupported`] for a scheme whose Cargo feature
/// is off (the message names the feature); [`Error::Backend`] when a server
/// cannot be reached or refuses the credentials.
///
/// # Cancel safety
/// Cancelling drops the connections made so far; nothing is written.
pub async fn connect(url: &str) -> Result<Backend> {
    let target = url::parse(url, &Features::ENABLED)?;
    build(target).await.map_err(|e| url::hide_quoted_url_text(e, url))
}

/// Check `url` without connecting: the same errors as [`connect`] for
/// malformed URLs, out-of-range or conflicting parameters and disabled
/// features.
///
/// # Errors
/// As [`connect`], except [`Error::Backend`].
pub fn check_url(url: &str) -> Result<()> {
    url::parse(url, &Features::ENABLED).map(drop)
}

async fn build(target: Target) -> Result<Backend> {
    match target {
        Target::Memory => build_memory(),
        #[cfg(any(feature = "redis-lua", feature = "tair"))]
        Target::Server(server) => build_server(server).await,
        #[cfg(feature = "redlock")]
        Target::Redlock(redlock) => build_redlock(redlock).await,
        #[cfg(feature = "postgres")]
        Target::Postgres(target) => postgres::build_postgres(target).await,
        #[cfg(feature = "etcd")]
        Target::Etcd(etcd) => etcd::build_etcd(etcd).await,
        // The parser refuses schemes whose feature is off.
        #[allow(unreachable_patterns)]
        _ => Err(Error::invalid("this URL's backend is not compiled in")),
    }
}

#[cfg(feature = "memory")]
fn build_memory() -> Result<Backend> {
    let backend = Arc::new(lock_memory::MemoryBackend::new());
    Ok(Backend {
        locks: backend.clone(),
        kinds: Kinds::of(&backend),
        store: Some(backend),
        description: "memory://".to_owned(),
        in_process: true,
    })
}

#[cfg(not(feature = "memory"))]
fn build_memory() -> Result<Backend> {
    Err(Error::invalid("memory:// needs the `memory` feature"))
}

#[cfg(any(feature = "redis-lua", feature = "tair"))]
async fn build_server(server: Server) -> Result<Backend> {
    let description = server.describe();
    let built = match server.family {
        #[cfg(feature = "redis-lua")]
        Family::RedisLua => build_redis_lua(&server).await,
        #[cfg(feature = "tair")]
        Family::Tair => build_tair(&server).await,
        #[allow(unreachable_patterns)]
        _ => Err(Error::invalid("this URL's backend is not compiled in")),
    };
    let (locks, store, kinds) = built.map_err(|e| in_context(e, &description))?;
    Ok(Backend {
        locks,
        store: Some(store),
        kinds,
        description,
        in_process: false,
    })
}

/// Applies the options both Redis-family builders (`RedisLuaBuilder`,
/// `TairBuilder`) take under the same names; a macro, as the builders share
/// no trait.
#[cfg(any(feature = "redis-lua", feature = "tair"))]
macro_rules! redis_family_options {
    ($builder:expr, $options:expr) => {{
        let (mut b, o) = ($builder, $options);
        if let Some(t) = o.connect_timeout {
            b = b.connect_timeout(t);
        }
        if let Some(t) = o.response_timeout {
            b = b.response_timeout(t);
        }
        if let Some(on) = o.fencing {
            b = b.fencing(on);
        }
        if let Some(on) = o.release_notifications {
            b = b.release_notifications(on);
        }
        if let Some(ack) = o.replica_ack()? {
            b = b.replica_ack(ack);
        }
        if let Some(n) = o.ack_connections {
            b = b.ack_connections(n);
        }
        b
    }};
}

#[cfg(any(feature = "redis-lua", feature = "tair"))]
type Pair = (Arc<dyn LockBackend>, Arc<dyn VersionedStore>, Kinds);

#[cfg(feature = "redis-lua")]
async fn build_redis_lua(server: &Server) -> Result<Pair> {
    use lock_redis_lua::RedisLuaBuilder;

    let urls = server.node_urls();
    let mut b = if server.cluster {
        RedisLuaBuilder::cluster(urls)
    } else {
        RedisLuaBuilder::url(urls.into_iter().next().unwrap_or_default())
    };
    let o = &server.options;
    b = redis_family_options!(b, o);
    #[cfg(feature = "redis-lua-tls")]
    if let Some(path) = &o.tls_ca {
        b = b.tls_root_certs(read_ca(path)?);
    }
    let backend = Arc::new(b.build().await?);
    Ok((backend.clone(), backend.clone(), Kinds::of(&backend)))
}

#[cfg(feature = "tair")]
async fn build_tair(server: &Server) -> Result<Pair> {
    use lock_tair::TairBuilder;

    let mut b = TairBuilder::url(server.fred_url());
    let o = &server.options;
    b = redis_family_options!(b, o);
    #[cfg(feature = "tair-tls")]
    if let Some(path) = &o.tls_ca {
        b = b.tls_root_certs(read_ca(path)?);
    }
    let backend = Arc::new(b.build().await?);
    Ok((backend.clone(), backend.clone(), Kinds::of(&backend)))
}

#[cfg(any(feature = "redis-lua-tls", feature = "tair-tls"))]
fn read_ca(path: &std::path::Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        Error::invalid(format!(
            "cannot read tls_ca file {}: {e}: point tls_ca at a PEM file of CA certificates",
            path.display()
        ))
    })
}

#[cfg(feature = "redlock")]
async fn build_redlock(target: RedlockTarget) -> Result<Backend> {
    use lock_redlock::{LazyNode, Redlock, RedlockOptions};

    let mut options = RedlockOptions::default();
    if let Some(m) = target.quorum {
        options = options.quorum(m);
    }
    if let Some(t) = target.node_timeout {
        options = options.node_timeout(t);
    }
    if let Some(f) = target.drift_factor {
        options = options.drift_factor(f);
    }
    // Every node connects in the background; the backend starts once a
    // quorum has (see `Redlock::connect`): a minority down at start only
    // costs failed votes until it answers.
    let mut nodes = Vec::with_capacity(target.nodes.len());
    let mut in_process = false;
    for node in target.nodes {
        in_process |= matches!(node, Target::Memory);
        let name = match &node {
            Target::Server(server) => server.describe(),
            _ => "memory://".to_owned(),
        };
        nodes.push(LazyNode::spawn(name, move || build_node(node.clone()))?);
    }
    let redlock = Redlock::connect(nodes, options).await?;
    let names = redlock.node_names().join(", ");
    Ok(Backend {
        locks: Arc::new(redlock),
        store: None,
        kinds: Kinds::none(),
        description: format!("redlock://[{names}]"),
        in_process,
    })
}

/// One node of a `redlock://` URL (never redlock:// itself: the parser
/// refuses it).
#[cfg(feature = "redlock")]
async fn build_node(node: Target) -> Result<Arc<dyn LockBackend>> {
    match node {
        Target::Memory => build_memory().map(|built| built.locks),
        #[cfg(any(feature = "redis-lua", feature = "tair"))]
        Target::Server(server) => build_server(server).await.map(|built| built.locks),
        _ => Err(Error::invalid("a redlock:// node cannot be redlock:// itself")),
    }
}

/// Name the (password-free) URL in a backend error, so a failure among
/// several nodes says which.
#[cfg(any(feature = "redis-lua", feature = "tair", feature = "postgres", feature = "etcd"))]
fn in_context(e: Error, description: &str) -> Error {
    match e {
        Error::Backend {
            backend,
            outcome_unknown,
            message,
            source,
        } => Error::Backend {
            backend,
            outcome_unknown,
            message: format!("{description}: {message}"),
            source,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests;
