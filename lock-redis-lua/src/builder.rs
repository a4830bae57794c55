//! Building a [`RedisLuaBackend`]: where the connections come from, the
//! timeouts, and the options.

use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::redis::aio::MultiplexedConnection;
use deadpool_redis::redis::cluster::ClusterClientBuilder;
use deadpool_redis::redis::cluster_async::ClusterConnection;
use deadpool_redis::redis::{self, AsyncConnectionConfig};
use deadpool_redis::{Runtime, cluster};
use lock_core::{Error, Result};

use crate::connection::{Dedicated, Shared, SharedStandalone, StandaloneSource, pool_error};
use crate::error::{connect_error, redact_url};
use crate::notify::{Notifier, PubSubSource};
use crate::sentinel::{AckPool, Discovery};
use crate::{Inner, RedisLuaBackend};

use lock_redis_family::settings::Settings;
pub use lock_redis_family::settings::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT, MAX_ACK_CONNECTIONS};
/// Default maximum number of connections dedicated to write + WAIT pairs
/// (opened on demand; see [`RedisLuaBuilder::ack_connections`]).
pub const DEFAULT_ACK_CONNECTIONS: usize = 16;

pub use lock_core::{OnShortfall, ReplicaAck};

enum Source {
    Url(String),
    ClusterUrls(Vec<String>),
    Pool(deadpool_redis::Pool),
    ClusterPool(cluster::Pool),
    Connection(MultiplexedConnection),
    ClusterConnection(ClusterConnection),
    Sentinel {
        sentinels: Vec<String>,
        master_name: String,
        node_url: String,
    },
}

impl Source {
    fn describe(&self) -> String {
        match self {
            Source::Url(u) => redact_url(u),
            Source::ClusterUrls(urls) => format!("cluster [{}]", redact_all(urls)),
            Source::Pool(_) => "application pool".to_owned(),
            Source::ClusterPool(_) => "application cluster pool".to_owned(),
            Source::Connection(_) => "application connection".to_owned(),
            Source::ClusterConnection(_) => "application cluster connection".to_owned(),
            Source::Sentinel {
                sentinels, master_name, ..
            } => format!("{master_name} through the sentinels [{}]", redact_all(sentinels)),
        }
    }

    fn is_cluster(&self) -> bool {
        matches!(
            self,
            Source::ClusterUrls(_) | Source::ClusterPool(_) | Source::ClusterConnection(_)
        )
    }
}

/// Configures a [`RedisLuaBackend`]; start from one of the sources.
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// use std::time::Duration;
/// use lock_redis_lua::{RedisLuaBackend, ReplicaAck};
///
/// let backend = RedisLuaBackend::builder("redis://app:secret@127.0.0.1:6379/0")?
///     .response_timeout(Duration::from_millis(500))
///     .fencing(true)
///     .replica_ack(ReplicaAck::new(1, Duration::from_millis(100)))
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[must_use = "call build() to get the backend"]
pub struct RedisLuaBuilder {
    source: Source,
    /// Timeouts, replica acknowledgement, release notifications (`None`:
    /// on for standalone URL sources, off for the others).
    settings: Settings,
    fencing: bool,
    /// PEM CA certificates for TLS; `None`: the platform's roots.
    #[cfg(feature = "tls")]
    tls_root_certs: Option<Vec<u8>>,
}

impl std::fmt::Debug for RedisLuaBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLuaBuilder")
            .field("source", &self.source.describe())
            .field("settings", &self.settings)
            .field("fencing", &self.fencing)
            .finish_non_exhaustive()
    }
}

impl RedisLuaBuilder {
    fn new(source: Source) -> Self {
        RedisLuaBuilder {
            source,
            settings: Settings::new(DEFAULT_ACK_CONNECTIONS),
            fencing: false,
            #[cfg(feature = "tls")]
            tls_root_certs: None,
        }
    }

    /// A standalone server (or a primary) at `url`:
    /// `redis://[user:password@]host[:port][/db]`, or `rediss://` for TLS
    /// (feature `tls`).
    pub fn url(url: impl Into<String>) -> Self {
        Self::new(Source::Url(url.into()))
    }

    /// A Redis Cluster, seeded with one or more node URLs; commands are
    /// routed by key.
    pub fn cluster<I, S>(urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::new(Source::ClusterUrls(urls.into_iter().map(Into::into).collect()))
    }

    /// A primary found through Redis Sentinel: `sentinel_urls` (one
    /// `redis[s]://[user:password@]host:port` per sentinel, with the
    /// sentinels' own credentials) monitor it as `master_name`; `node_url`
    /// gives the data nodes' scheme, credentials and database
    /// (`redis[s]://[user:password@]any-host[/db]`: its host is replaced by
    /// the primary's each time the primary is found). The primary is found
    /// at `build`, confirmed with `ROLE`, and found again whenever the
    /// shared connection is replaced (a dropped connection, a `READONLY`
    /// reply) or the sentinels announce a new primary (`+switch-master`,
    /// on one subscription to a sentinel), never per operation.
    pub fn sentinel<I, S>(sentinel_urls: I, master_name: impl Into<String>, node_url: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::new(Source::Sentinel {
            sentinels: sentinel_urls.into_iter().map(Into::into).collect(),
            master_name: master_name.into(),
            node_url: node_url.into(),
        })
    }

    /// The application's deadpool-redis pool: one connection stays checked
    /// out for the shared hot path (replaced after unrecoverable errors);
    /// write + WAIT pairs check out their own. Its connections' response
    /// timeout applies (and must exceed the WAIT timeout).
    pub fn pool(pool: deadpool_redis::Pool) -> Self {
        Self::new(Source::Pool(pool))
    }

    /// The application's deadpool-redis cluster pool: one connection is
    /// taken out of it for the shared hot path; write + WAIT pairs check out
    /// their own.
    pub fn cluster_pool(pool: cluster::Pool) -> Self {
        Self::new(Source::ClusterPool(pool))
    }

    /// The application's multiplexed connection, used as is: it cannot be
    /// replaced after an unrecoverable error (use a URL or a pool for that),
    /// and replica acknowledgement is refused (WAIT would stall it).
    /// The same name as on the Tair builder.
    pub fn connection(conn: MultiplexedConnection) -> Self {
        Self::new(Source::Connection(conn))
    }

    /// The application's cluster connection (it reconnects to nodes by
    /// itself); replica acknowledgement is refused.
    pub fn cluster_connection(conn: ClusterConnection) -> Self {
        Self::new(Source::ClusterConnection(conn))
    }

    /// Every shared setting at once (from a config; see
    /// [`crate::RedisLuaConfig`]).
    pub(crate) fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Time to open a connection: TCP connect, TLS, AUTH/HELLO (default
    /// [`DEFAULT_CONNECT_TIMEOUT`]). Applies to sources built from URLs.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.connect_timeout = timeout;
        self
    }

    /// Time to wait for each reply (default [`DEFAULT_RESPONSE_TIMEOUT`]).
    /// A write that times out has an unknown outcome. Applies to
    /// connections built from URLs; every operation is also bounded by
    /// `connect + 2 × response` (+ the WAIT timeout) whatever the source.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.settings.response_timeout = timeout;
        self
    }

    /// Issue fencing tokens: the acquire script also bumps a per-lock fence
    /// key (`verrou:lua:fence:{key}`, or `verrou:lua:fence:t:key` when the
    /// key has a hash tag; see [`crate::RESERVED_KEY_PREFIX`]) that has no
    /// TTL and must outlive the lock. Default off.
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// Require replica acknowledgement after acquires, renewals and
    /// versioned writes. A renewal counts (`Renewed`, the guard's deadline
    /// moves) only when confirmed; a shortfall fails it as outcome-unknown
    /// whatever [`OnShortfall`] says, so the lease is lost at its last
    /// confirmed deadline unless a later renewal is confirmed. One `WAIT`
    /// per renew-many script call (up to 128 keys).
    pub fn replica_ack(mut self, ack: ReplicaAck) -> Self {
        self.settings.replica_ack = Some(ack);
        self
    }

    /// Wake waiters on release with pub/sub (standalone URL sources only):
    /// the backend subscribes to a channel of its own (`verrou:wake:<id>`) on
    /// its own connection, opened at the first wait; a waiter then joins the
    /// key's wake set (or fair queue) and leaves a short-lived marker key
    /// (`verrou:lua:waiting:{<key>}`); the release script, when it finds the
    /// marker, PUBLISHes one waiter's id on that waiter's channel, so one
    /// waiter wakes and an uncontended release publishes nothing. Default: on for
    /// standalone URL sources (a waiter in another process wakes about
    /// 0.1 ms after a release instead of up to one backoff step, 200 ms),
    /// off for the others. Every client of a key should use the
    /// same setting: a client without it does not announce its releases, and
    /// waiters then fall back to their timers.
    pub fn release_notifications(mut self, on: bool) -> Self {
        self.settings.release_notifications = Some(on);
        self
    }

    /// Maximum number of connections dedicated to write + WAIT pairs, built
    /// from a URL when [`RedisLuaBuilder::replica_ack`] is set (default
    /// [`DEFAULT_ACK_CONNECTIONS`], at most [`MAX_ACK_CONNECTIONS`]; else
    /// `build` fails with `InvalidArgument`), opened on demand. The same name
    /// as on the Tair builder.
    pub fn ack_connections(mut self, n: usize) -> Self {
        self.settings.ack_connections = n;
        self
    }

    /// Trust these CA certificates (PEM) instead of the platform's roots for
    /// `rediss://` URLs (feature `tls`; URL sources only).
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_root_certs(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root_certs = Some(pem.into());
        self
    }

    fn validate(&self) -> Result<()> {
        self.settings.check()?;
        if self.settings.replica_ack.is_some()
            && matches!(self.source, Source::Connection(_) | Source::ClusterConnection(_))
        {
            return Err(Error::invalid(
                "replica_ack needs a URL or a pool: WAIT blocks the connection it is sent on, so each \
                     write + WAIT pair needs a dedicated connection",
            ));
        }
        #[cfg(feature = "tls")]
        if self.tls_root_certs.is_some()
            && self.settings.replica_ack.is_some()
            && matches!(self.source, Source::ClusterUrls(_))
        {
            return Err(Error::invalid(
                "tls_root_certs with replica_ack is not supported on a cluster (its write + WAIT pool would not \
                 trust the certificates)",
            ));
        }
        if self.settings.release_notifications == Some(true)
            && !matches!(self.source, Source::Url(_) | Source::Sentinel { .. })
        {
            return Err(Error::invalid(
                "release_notifications needs a standalone URL or Sentinel source (it opens its own pub/sub \
                 connection)",
            ));
        }
        if let Source::Sentinel { sentinels, .. } = &self.source
            && sentinels.is_empty()
        {
            return Err(Error::invalid("Sentinel needs at least one sentinel URL"));
        }
        Ok(())
    }

    /// Connects (eagerly, so a wrong URL, password or address fails here)
    /// and returns the backend.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad URL or inconsistent options; `Backend`
    /// when the server cannot be reached or refuses the credentials.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the connections made so far; nothing is
    /// written to the server.
    pub async fn build(self) -> Result<RedisLuaBackend> {
        self.validate()?;
        #[cfg(feature = "tls")]
        {
            // rustls needs a process-wide crypto provider; one installed by
            // the application wins.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let description = self.source.describe();
        let cluster = self.source.is_cluster();
        let ct = self.settings.connect_timeout;
        let rt = self.settings.response_timeout;
        let ack = self.settings.replica_ack;
        let mut notifier = None;
        #[cfg(feature = "tls")]
        let tls_root_certs = self.tls_root_certs;
        #[cfg(not(feature = "tls"))]
        let tls_root_certs: Option<Vec<u8>> = None;
        let ack_pool = ack.map(|ack| AckPool {
            max_size: self.settings.ack_connections,
            connect_timeout: ct,
            response_timeout: rt,
            wait_timeout: ack.timeout,
        });
        let (shared, dedicated) = match self.source {
            Source::Sentinel {
                sentinels,
                master_name,
                node_url,
            } => {
                let sentinels = sentinels
                    .iter()
                    .map(|u| open_client(u, tls_root_certs.clone()))
                    .collect::<Result<Vec<_>>>()?;
                let node = open_client(&node_url, tls_root_certs)?.get_connection_info().clone();
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(ct))
                    .set_response_timeout(Some(rt));
                let discovery = Arc::new(Discovery::new(sentinels, master_name, node, config, ack_pool, ct));
                discovery.follow_switches();
                if self.settings.release_notifications != Some(false) {
                    notifier = Some(Notifier::new(PubSubSource::Sentinel(discovery.clone()), ct.max(rt)));
                }
                let dedicated = ack.map(|_| Dedicated::Sentinel(discovery.clone()));
                // A discovery is two connections and two replies (a sentinel,
                // then the primary), a second sentinel if the first fails.
                let budget = ct.saturating_add(rt).saturating_mul(2);
                let shared = SharedStandalone::new(StandaloneSource::Sentinel(discovery), budget);
                (Shared::Standalone(Box::new(shared)), dedicated)
            }
            Source::Url(url) => {
                let client = open_client(&url, tls_root_certs)?;
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(ct))
                    .set_response_timeout(Some(rt));
                let dedicated = match ack_pool {
                    Some(spec) => Some(Dedicated::Standalone(
                        spec.build(client.get_connection_info().clone(), config.clone())?,
                    )),
                    None => None,
                };
                if self.settings.release_notifications != Some(false) {
                    notifier = Some(Notifier::new(
                        PubSubSource::Client(Box::new(client.clone())),
                        ct.max(rt),
                    ));
                }
                let shared = SharedStandalone::new(
                    StandaloneSource::Client {
                        client,
                        config: Box::new(config),
                    },
                    ct,
                );
                (Shared::Standalone(Box::new(shared)), dedicated)
            }
            Source::ClusterUrls(urls) => {
                if urls.is_empty() {
                    return Err(Error::invalid("a cluster needs at least one node URL"));
                }
                let builder = ClusterClientBuilder::new(urls.iter().map(String::as_str))
                    .connection_timeout(ct)
                    .response_timeout(rt);
                #[cfg(feature = "tls")]
                let builder = match &tls_root_certs {
                    Some(pem) => builder.certs(redis::TlsCertificates {
                        client_tls: None,
                        root_cert: Some(pem.clone()),
                    }),
                    None => builder,
                };
                let client = builder.build().map_err(|e| bad_url(&redact_all(&urls), &e))?;
                let conn =
                    match tokio::time::timeout(ct.saturating_mul(2).saturating_add(rt), client.get_async_connection())
                        .await
                    {
                        Ok(r) => r.map_err(connect_error)?,
                        Err(_) => return Err(connect_error("no cluster connection within the connect timeout")),
                    };
                let dedicated = match ack {
                    Some(ack) => {
                        let manager = cluster::Manager::new(urls.iter().map(String::as_str).collect(), false)
                            .map_err(|e| bad_url(&redact_all(&urls), &e))?;
                        let pool = cluster::Pool::builder(manager)
                            .max_size(self.settings.ack_connections)
                            .runtime(Runtime::Tokio1)
                            .wait_timeout(Some(ct.saturating_add(rt).saturating_add(ack.timeout)))
                            .create_timeout(Some(ct.saturating_mul(2).saturating_add(rt)))
                            .recycle_timeout(Some(rt))
                            .build()
                            .map_err(pool_error)?;
                        Some(Dedicated::Cluster(pool))
                    }
                    None => None,
                };
                (Shared::Cluster(conn), dedicated)
            }
            Source::Pool(pool) => {
                let dedicated = ack.map(|_| Dedicated::Standalone(pool.clone()));
                let shared = SharedStandalone::new(StandaloneSource::Pool(pool), ct);
                (Shared::Standalone(Box::new(shared)), dedicated)
            }
            Source::ClusterPool(pool) => {
                let conn = match tokio::time::timeout(ct.saturating_mul(2).saturating_add(rt), pool.get()).await {
                    Ok(r) => cluster::Connection::take(r.map_err(pool_error)?),
                    Err(_) => return Err(connect_error("no cluster connection from the pool in time")),
                };
                let dedicated = ack.map(|_| Dedicated::Cluster(pool));
                (Shared::Cluster(conn), dedicated)
            }
            Source::Connection(conn) => (
                Shared::Standalone(Box::new(SharedStandalone::new(StandaloneSource::Fixed(conn), ct))),
                None,
            ),
            Source::ClusterConnection(conn) => (Shared::Cluster(conn), None),
        };
        let inner = Inner::new(
            description,
            cluster,
            shared,
            dedicated,
            notifier,
            self.fencing,
            ack,
            ct,
            rt,
        )?;
        // Fail here, not on first use, for a wrong password or address.
        inner.probe().await?;
        Ok(RedisLuaBackend { inner: Arc::new(inner) })
    }
}

/// A client for `url`, trusting `root_certs` (PEM) when given.
fn open_client(url: &str, root_certs: Option<Vec<u8>>) -> Result<redis::Client> {
    match root_certs {
        #[cfg(feature = "tls")]
        Some(pem) => redis::Client::build_with_tls(
            url,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem),
            },
        )
        .map_err(|e| bad_url(url, &e)),
        _ => redis::Client::open(url).map_err(|e| bad_url(url, &e)),
    }
}

/// A URL the client refused, described without its credentials.
fn bad_url(url: &str, e: &redis::RedisError) -> Error {
    let hint = if url.starts_with("rediss") && !cfg!(feature = "tls") {
        " (rediss:// needs the `tls` feature of lock-redis-lua)"
    } else {
        ""
    };
    Error::invalid(format!("invalid Redis URL {}: {}{hint}", redact_url(url), e.category()))
}

fn redact_all(urls: &[String]) -> String {
    urls.iter().map(|u| redact_url(u)).collect::<Vec<_>>().join(", ")
}
