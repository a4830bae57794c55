//! Settings of the Tair backend, its builder, and building: the clients
//! opened and checked.

use std::time::Duration;

use std::sync::Arc;

use fred::clients::{Client, Pool};
use fred::interfaces::ClientLike;
use fred::types::config::ReconnectPolicy;
use lock_core::{Error, Result};

use crate::acquire::FENCED_ACQUIRE;
use crate::conn::{self, Clients};
use crate::renew::RENEW_MANY;
use crate::unsettled::Unsettled;
use crate::{Inner, Notifications, TairBackend, notify, switches};

use lock_redis_family::settings::Settings;
pub use lock_redis_family::settings::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT, MAX_ACK_CONNECTIONS};

/// Default prefix of fence counter keys (see [`TairBuilder::fencing`]).
pub const DEFAULT_FENCE_PREFIX: &str = "verrou:fence:";

/// Default number of connections dedicated to write + `WAIT` (opened at
/// build; see [`TairBuilder::ack_connections`]).
pub const DEFAULT_ACK_CONNECTIONS: usize = 2;

pub use lock_core::{OnShortfall, ReplicaAck};

/// Where the backend's connections come from.
pub(crate) enum Source {
    /// A URL: the backend builds and owns its fred clients.
    Url(String),
    /// The application's connected (or not yet connected) fred client.
    Client(Client),
    /// The application's fred pool.
    Pool(Pool),
}

/// Builds a [`TairBackend`].
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// use std::time::Duration;
/// use lock_tair::{ReplicaAck, TairBackend};
///
/// let backend = TairBackend::builder("tair://127.0.0.1:6379")?
///     .response_timeout(Duration::from_millis(500))
///     .fencing(true)
///     .replica_ack(ReplicaAck::new(1, Duration::from_millis(50)))
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
pub struct TairBuilder {
    pub(crate) source: Source,
    /// Timeouts, replica acknowledgement, release notifications (`None`:
    /// on unless on a cluster).
    pub(crate) settings: Settings,
    pub(crate) reconnect: ReconnectPolicy,
    pub(crate) fence_prefix: Option<String>,
    pub(crate) retry_after_hint: bool,
    pub(crate) check_commands: bool,
    /// PEM CA certificates for TLS; `None`: the platform's roots.
    #[cfg(feature = "tls")]
    pub(crate) tls_root_certs: Option<Vec<u8>>,
}

impl std::fmt::Debug for TairBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let source = match &self.source {
            Source::Url(_) => "url", // may hold a password: not printed
            Source::Client(_) => "client",
            Source::Pool(_) => "pool",
        };
        f.debug_struct("TairBuilder")
            .field("source", &source)
            .field("settings", &self.settings)
            .field("fence_prefix", &self.fence_prefix)
            .field("retry_after_hint", &self.retry_after_hint)
            .field("check_commands", &self.check_commands)
            .finish_non_exhaustive()
    }
}

impl TairBuilder {
    fn new(source: Source) -> Self {
        TairBuilder {
            source,
            settings: Settings::new(DEFAULT_ACK_CONNECTIONS),
            // Retry forever, 50 ms doubling to 2 s: a restarted server is
            // found again without the caller doing anything.
            reconnect: ReconnectPolicy::new_exponential(0, 50, 2_000, 2),
            fence_prefix: None,
            retry_after_hint: false,
            check_commands: true,
            #[cfg(feature = "tls")]
            tls_root_certs: None,
        }
    }

    /// Connect to a URL: `redis://[user:pass@]host:port[/db]`, `rediss://`
    /// (needs the `tls` feature), or `redis-cluster://host:port[?node=h:p]`
    /// for Redis Cluster (commands are routed by their key's slot).
    pub fn url(url: impl Into<String>) -> Self {
        TairBuilder::new(Source::Url(url.into()))
    }

    /// Use the application's own fred client, one connection (per node, on a
    /// cluster), connected or not (it is connected if needed). Its reconnect
    /// policy is kept (set one: without it fred never reconnects); every
    /// command this backend sends overrides the attempts (1) and timeout
    /// ([`TairBuilder::response_timeout`]). The same name as on the Lua
    /// backend's builder.
    pub fn connection(client: Client) -> Self {
        TairBuilder::new(Source::Client(client))
    }

    /// Use the application's own fred pool (see [`TairBuilder::connection`]).
    /// Commands go to its clients in turn.
    pub fn pool(pool: Pool) -> Self {
        TairBuilder::new(Source::Pool(pool))
    }

    /// Every shared setting at once (from a config; see
    /// [`crate::TairConfig`]).
    pub(crate) fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Time to wait for each reply: the timeout of every command (default
    /// [`DEFAULT_RESPONSE_TIMEOUT`]). A write that times out is reported with `outcome_unknown: true`.
    /// The same name as on the Lua backend's builder.
    #[must_use]
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.settings.response_timeout = timeout;
        self
    }

    /// Trust these CA certificates (PEM) instead of the platform's roots for
    /// `rediss://` URLs (feature `tls`; URL sources only).
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    #[must_use]
    pub fn tls_root_certs(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root_certs = Some(pem.into());
        self
    }

    /// Time to open a connection: TCP connect, TLS, `HELLO`/`AUTH` (default
    /// [`DEFAULT_CONNECT_TIMEOUT`]; URL sources only). The same name as on
    /// the Lua backend's builder.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.connect_timeout = timeout;
        self
    }

    /// Reconnect policy of the clients built from a URL (default:
    /// exponential 50 ms to 2 s, forever).
    #[must_use]
    pub fn reconnect_policy(mut self, policy: ReconnectPolicy) -> Self {
        self.reconnect = policy;
        self
    }

    /// Issue fencing tokens (default off). Acquire then runs one small Lua
    /// script (Tair runs `EVAL` too) that checks the key, sets the lock and
    /// hands out the next fence, atomically: still one round trip, but a
    /// script instead of one native command. Release and renew are as
    /// without fencing (`CAS` renews). The counter lives at [`DEFAULT_FENCE_PREFIX`]` + key` (the key
    /// wrapped in `{}` when it has no hash tag, so both share a cluster slot),
    /// has no TTL and is never deleted: one small key per lock name.
    ///
    /// The fence is `max(counter + 1, server time in µs)`, as on the Lua
    /// backend: strictly increasing while the counter survives, and still
    /// above every earlier token when the counter is lost (evicted, a
    /// restart without data), as long as the server clock has not gone back.
    /// A failover that loses the counter (asynchronous replication) keeps
    /// the tokens increasing only if the new primary's clock is ahead of the
    /// old one's at its last grant: clocks skewed by more than the time
    /// between that grant and the failover can hand out a smaller token.
    #[must_use]
    pub fn fencing(mut self, on: bool) -> Self {
        self.fence_prefix = on.then(|| DEFAULT_FENCE_PREFIX.to_owned());
        self
    }

    /// Announce releases to waiters (default on; a single server only: a
    /// cluster client ignores it and its waiters poll). A waiter subscribes
    /// on a pub/sub connection of its backend (opened by the first wait) and
    /// registers in the key's wake set; release is then one small script
    /// instead of `CAD`: `GET`, one `DEL` of the key and its waiter marker,
    /// and, only when a waiter registered, a `PUBLISH` that wakes that one
    /// waiter. Off: release is `CAD` and waiters sleep their backoff. A user
    /// without channel rights (`NOPERM`) gets one warning, and its waiters
    /// use their timers.
    #[must_use]
    pub fn release_notifications(mut self, on: bool) -> Self {
        self.settings.release_notifications = Some(on);
        self
    }

    /// Turn fencing on with another counter key prefix: not empty (a
    /// hash-tagged key would be its own counter), no braces, and neither
    /// over nor under [`crate::RESERVED_KEY_PREFIX`]; else `build` fails
    /// with `InvalidArgument`. User keys under it are refused (see
    /// [`crate::TairBackend::reserved_key_prefixes`]).
    #[must_use]
    pub fn fence_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.fence_prefix = Some(prefix.into());
        self
    }

    /// Wait for replica acknowledgement after acquires, renewals and
    /// versioned writes (see the crate docs for what a shortfall does).
    #[must_use]
    pub fn replica_ack(mut self, ack: ReplicaAck) -> Self {
        self.settings.replica_ack = Some(ack);
        self
    }

    /// Connections dedicated to write + `WAIT` (default
    /// [`DEFAULT_ACK_CONNECTIONS`], at most [`MAX_ACK_CONNECTIONS`]; opened at
    /// build), when
    /// [`TairBuilder::replica_ack`] is set. Writes waiting on one connection
    /// queue behind each other's `WAIT`; more connections, less queueing.
    #[must_use]
    pub fn ack_connections(mut self, n: usize) -> Self {
        self.settings.ack_connections = n;
        self
    }

    /// After a refused acquire, ask the holder's remaining TTL with `PTTL`
    /// (one more round trip) so the manager never sleeps past it. Default
    /// off: `SET NX` does not return the TTL, and a holder usually releases
    /// long before its TTL, which the manager's backoff (capped at 200 ms)
    /// already covers. With fencing on, the hint comes free with the reply.
    #[must_use]
    pub fn retry_after_hint(mut self, on: bool) -> Self {
        self.retry_after_hint = on;
        self
    }

    /// Check at connect that the server has the TairString commands
    /// (`COMMAND INFO`; default on). Turn off for servers that disable
    /// `COMMAND`; a missing command is then reported as
    /// [`lock_core::Error::Unsupported`] at its first use.
    #[must_use]
    pub fn check_commands(mut self, on: bool) -> Self {
        self.check_commands = on;
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        self.settings.check()?;
        if let Some(prefix) = &self.fence_prefix {
            crate::keys::validate_fence_prefix(prefix)?;
        }
        Ok(())
    }

    /// Connect, check the server, and return the backend.
    ///
    /// # Errors
    /// [`lock_core::Error::InvalidArgument`] for bad settings or URL;
    /// [`lock_core::Error::Backend`] when the server cannot be reached;
    /// [`lock_core::Error::Unsupported`] when it lacks a TairString command.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the connections made so far; nothing is
    /// written to the server.
    pub async fn build(self) -> Result<TairBackend> {
        TairBackend::from_builder(self).await
    }
}

/// A rustls connector trusting only the CA certificates in `pem`.
#[cfg(feature = "tls")]
pub(crate) fn tls_connector(pem: &[u8]) -> Result<fred::types::config::TlsConnector> {
    use fred::rustls::pki_types::CertificateDer;
    use fred::rustls::pki_types::pem::PemObject;
    use fred::rustls::{ClientConfig, RootCertStore};

    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| Error::invalid(format!("tls_root_certs: not a PEM certificate list: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| Error::invalid(format!("tls_root_certs: unusable CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(Error::invalid("tls_root_certs holds no PEM certificate"));
    }
    let provider = std::sync::Arc::new(fred::rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::invalid(format!("TLS set-up failed: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config.into())
}

impl TairBackend {
    /// Opens the clients `builder` asks for, checks the server has the
    /// commands, and makes the backend.
    pub(crate) async fn from_builder(builder: TairBuilder) -> Result<Self> {
        builder.validate()?;
        let longest_wait = builder.settings.replica_ack.map_or(Duration::ZERO, |a| a.timeout);
        let mut owned = Vec::new();
        let options = conn::command_options(builder.settings.response_timeout);
        let (commands, template) = match &builder.source {
            Source::Url(url) => {
                let client = conn::build_client(url, &builder, Duration::ZERO)?;
                owned.push(client.clone());
                (Clients::new(vec![client], &options)?, None)
            }
            Source::Client(client) => (Clients::new(vec![client.clone()], &options)?, Some(client.clone())),
            Source::Pool(pool) => (
                Clients::new(pool.clients().to_vec(), &options)?,
                pool.clients().first().cloned(),
            ),
        };
        if let Some(app_client) = &template
            && !app_client.has_reconnect_policy()
        {
            tracing::warn!("the fred client given to the Tair backend has no reconnect policy: it will not reconnect");
        }
        let ack = match builder.settings.replica_ack {
            None => None,
            Some(ack) => {
                let mut list = Vec::with_capacity(builder.settings.ack_connections);
                for _ in 0..builder.settings.ack_connections {
                    let client = match (&builder.source, &template) {
                        (Source::Url(url), _) => conn::build_client(url, &builder, longest_wait)?,
                        (_, Some(app_client)) => app_client.clone_new(),
                        (_, None) => return Err(Error::invalid("a fred pool with no clients")),
                    };
                    owned.push(client.clone());
                    list.push(client);
                }
                Some((Clients::new(list, &options)?, ack))
            }
        };
        let clustered = commands.first().is_clustered();
        let wake = match (&builder.source, &template) {
            _ if clustered || builder.settings.release_notifications == Some(false) => None,
            (Source::Url(url), _) => Some(conn::build_client(url, &builder, Duration::ZERO)?),
            (_, Some(app_client)) => Some(app_client.clone_new()),
            (_, None) => None,
        }
        .map(|client| {
            let checker = commands.first().clone();
            notify::Notifier::new(client, checker, builder.settings.response_timeout)
        });
        // Through Sentinel, the clients built here leave a primary the
        // sentinels replaced as soon as they announce it, and so does the
        // notifier's pub/sub connection (it subscribes again on the new one).
        let switches = match &builder.source {
            Source::Url(url) => switches::follow(
                url,
                owned.clone(),
                wake.as_ref().map(Arc::downgrade),
                builder.settings.connect_timeout,
            ),
            _ => None,
        };
        let wake = wake.map(Notifications::new);
        // Whatever fails from here on, the clients built so far are closed
        // by `Inner`'s drop.
        let inner = Inner {
            clustered,
            commands,
            ack,
            options,
            response_timeout: builder.settings.response_timeout,
            fence_prefix: builder.fence_prefix.clone(),
            script_sha: fred::util::sha1_hash(FENCED_ACQUIRE),
            renew_many_sha: fred::util::sha1_hash(RENEW_MANY),
            retry_after_hint: builder.retry_after_hint,
            owned,
            unsettled: Unsettled::default(),
            wake,
            _switches: switches,
        };
        for client in inner.commands.all() {
            conn::ensure_connected(client, builder.settings.connect_timeout).await?;
        }
        if let Some((clients, _)) = &inner.ack {
            for client in clients.all() {
                conn::ensure_connected(client, builder.settings.connect_timeout).await?;
            }
        }
        if builder.check_commands {
            conn::check_commands(inner.commands.first(), &inner.options).await?;
        }
        Ok(TairBackend { inner: Arc::new(inner) })
    }
}
