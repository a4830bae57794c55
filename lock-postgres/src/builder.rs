//! Building a [`PostgresBackend`]: where connections come from, the schema,
//! the timeouts.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use lock_core::{Error, RefusalReason, Result};
use tokio_postgres::config::SslMode;

use crate::conn::Op;
use crate::error::{BACKEND, missing_schema, statement_error};
use crate::schema::{DEFAULT_SCHEMA, Statements, schema_sql};
use crate::{Inner, PostgresBackend};

/// Default time to open a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Default time to wait for a connection from the pool plus one reply.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// Default number of pooled connections the backend opens itself.
pub const DEFAULT_POOL_SIZE: usize = 16;
/// Largest pool the backend opens itself: PostgreSQL's own default
/// `max_connections` is 100, and the pool sizes its slot list by it.
pub const MAX_POOL_SIZE: usize = 1024;

enum Source {
    Config(Box<tokio_postgres::Config>),
    Pool(Pool),
}

/// Configures a [`PostgresBackend`]: start from a URL, connection settings
/// or an application's `deadpool_postgres::Pool`.
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// use lock_postgres::PostgresBackend;
/// let backend = PostgresBackend::builder("postgres://app@db.internal/app")?
///     .schema("app_locks")
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
pub struct PostgresBuilder {
    source: Source,
    schema: String,
    create_schema: bool,
    connect_timeout: Duration,
    response_timeout: Duration,
    pool_size: usize,
    notifications: Option<bool>,
    listen_url: Option<String>,
}

impl std::fmt::Debug for PostgresBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresBuilder")
            .field("schema", &self.schema)
            .field("create_schema", &self.create_schema)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("pool_size", &self.pool_size)
            .field("notifications", &self.notifications)
            .finish_non_exhaustive()
    }
}

impl PostgresBuilder {
    fn new(source: Source) -> Self {
        PostgresBuilder {
            source,
            schema: DEFAULT_SCHEMA.to_owned(),
            create_schema: true,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            pool_size: DEFAULT_POOL_SIZE,
            notifications: None,
            listen_url: None,
        }
    }

    /// Connect with a `postgres://` / `postgresql://` URL or a `key=value`
    /// connection string (libpq's syntax; `sslmode` as libpq: `disable`,
    /// `prefer` (the default, plain text when the `tls` feature is off),
    /// `require`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a string tokio-postgres cannot parse
    /// (the message never quotes a password).
    pub fn url(url: &str) -> Result<Self> {
        Ok(Self::config(parse_libpq(url)?))
    }

    /// Connect with these settings.
    pub fn config(config: tokio_postgres::Config) -> Self {
        Self::new(Source::Config(Box::new(config)))
    }

    /// Use the application's pool. Every operation is one statement on a
    /// pooled connection, sent unprepared (no statement cache is used), so
    /// any pool mode works, PgBouncer's transaction mode included.
    pub fn pool(pool: Pool) -> Self {
        Self::new(Source::Pool(pool))
    }

    /// The schema holding the tables (default `verrou`); see
    /// [`validate_identifier`](crate::validate_identifier).
    #[must_use]
    pub fn schema(mut self, name: impl Into<String>) -> Self {
        self.schema = name.into();
        self
    }

    /// Create the schema at build when it is missing (default `true`). With
    /// `false`, a missing schema fails the build with a
    /// [`Error::Refused`] for [`RefusalReason::MissingSchema`] (apply [`schema_sql`] in your migrations).
    #[must_use]
    pub fn create_schema(mut self, create: bool) -> Self {
        self.create_schema = create;
        self
    }

    /// Time to open a connection (own connections only; default 2 s).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Time for a pooled connection plus one reply (default 2 s), and for
    /// each round trip of [`build`](Self::build). A write without a reply in
    /// time fails as outcome-unknown; its connection is never handed to the
    /// next caller (kept aside until the reply comes, then closed).
    #[must_use]
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Size of the pool the backend opens itself (default 16, at most
    /// [`MAX_POOL_SIZE`]; else `build` fails with `InvalidArgument`).
    #[must_use]
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// Release notifications (default on, except over an application pool
    /// without a [`listen_url`](Self::listen_url)): a waiter is woken by the
    /// release instead of its timer, through one `LISTEN` connection per
    /// backend; a release sends `pg_notify` only when someone waits (see
    /// [Waiting](crate#waiting)). The listening connection uses the
    /// backend's own settings, or `listen_url`'s; over an application pool,
    /// `listen_url` is required (`LISTEN` is session state, which PgBouncer's
    /// transaction mode does not keep).
    #[must_use]
    pub fn release_notifications(mut self, on: bool) -> Self {
        self.notifications = Some(on);
        self
    }

    /// A direct connection (not PgBouncer in transaction mode: `LISTEN` is
    /// session state) for release notifications; turns them on. Checked at
    /// build.
    #[must_use]
    pub fn listen_url(mut self, url: impl Into<String>) -> Self {
        self.listen_url = Some(url.into());
        self.notifications = Some(true);
        self
    }

    /// Connect, check (or create) the schema, and return the backend.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for bad settings; [`Error::Refused`] when
    /// the server refuses (a missing schema or privilege, or a read-only
    /// server when the schema must be created); [`Error::Backend`] when the
    /// server cannot be reached, or when a round trip (the schema check, its creation, which
    /// waits for another session creating it) takes longer than the
    /// response timeout.
    ///
    /// # Cancel safety
    /// Dropping the future drops the connections made so far; the schema is
    /// created whole or not at all.
    pub async fn build(self) -> Result<PostgresBackend> {
        let statements = Statements::new(&self.schema)?;
        for (name, timeout) in [
            ("connect_timeout", self.connect_timeout),
            ("response_timeout", self.response_timeout),
        ] {
            if timeout.is_zero() || timeout > lock_core::raw::MAX_TIMEOUT {
                return Err(Error::invalid(format!(
                    "{name} must be above zero and at most {} days, got {timeout:?}",
                    lock_core::raw::MAX_TIMEOUT.as_secs() / 86_400
                )));
            }
        }
        if !(1..=MAX_POOL_SIZE).contains(&self.pool_size) {
            return Err(Error::invalid(format!(
                "pool_size must be from 1 to {MAX_POOL_SIZE}, got {}",
                self.pool_size
            )));
        }
        // On by default where a direct connection is known.
        let notifications = self
            .notifications
            .unwrap_or(matches!(self.source, Source::Config(_)) || self.listen_url.is_some());
        let listen = match (&self.listen_url, &self.source) {
            _ if !notifications => None,
            (Some(url), _) => Some(
                url.parse::<tokio_postgres::Config>()
                    .map_err(|e| Error::invalid(format!("listen_url is not a PostgreSQL connection string: {e}")))?,
            ),
            (None, Source::Config(config)) => Some((**config).clone()),
            (None, Source::Pool(_)) => {
                return Err(Error::invalid(
                    "release notifications over an application pool need listen_url (a direct connection for LISTEN)",
                ));
            }
        };
        let channel: String = format!("verrou_{}", statements.schema).chars().take(63).collect();
        let notifier = listen.map(|mut config| {
            if config.get_connect_timeout().is_none() {
                config.connect_timeout(self.connect_timeout);
            }
            crate::notify::Notifier::start(config, channel.clone())
        });
        let (pool, description) = match self.source {
            Source::Pool(pool) => (pool, "application pool".to_owned()),
            Source::Config(mut config) => {
                if config.get_connect_timeout().is_none() {
                    config.connect_timeout(self.connect_timeout);
                }
                let description = describe(&config);
                (own_pool(*config, self.pool_size)?, description)
            }
        };
        let inner = Inner {
            pool,
            sql: statements,
            response_timeout: self.response_timeout,
            description,
            replication: std::sync::OnceLock::new(),
            notifier,
            channel,
            set_aside: Default::default(),
        };
        let backend = PostgresBackend { inner: Arc::new(inner) };
        ensure_schema(&backend, self.create_schema).await?;
        if let Ok(mode) = backend.replication().await {
            let _ = backend.inner.replication.set(mode);
        }
        crate::sweep::spawn(Arc::downgrade(&backend.inner));
        Ok(backend)
    }
}

/// tokio-postgres's reading of a libpq URL or connection string.
pub(crate) fn parse_libpq(url: &str) -> Result<tokio_postgres::Config> {
    url.parse().map_err(|e: tokio_postgres::Error| {
        // The cause names the option (`invalid value for option
        // `connect_timeout``), never its value.
        let cause = std::error::Error::source(&e)
            .map(|c| format!(": {c}"))
            .unwrap_or_default();
        Error::invalid(format!("not a PostgreSQL connection string: {e}{cause}"))
    })
}

/// `host:port/dbname`, never a password.
pub(crate) fn describe(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}/{}", config.get_dbname().unwrap_or_default())
}

pub(crate) fn own_pool(config: tokio_postgres::Config, size: usize) -> Result<Pool> {
    let manager_config = ManagerConfig {
        // Fast: a pooled connection is reused if it is not closed; no
        // statement on checkout (one round trip per operation).
        recycling_method: RecyclingMethod::Fast,
    };
    let manager = match config.get_ssl_mode() {
        SslMode::Disable => Manager::from_config(config, tokio_postgres::NoTls, manager_config),
        _ => tls_manager(config, manager_config)?,
    };
    Pool::builder(manager)
        .max_size(size)
        .runtime(Runtime::Tokio1)
        .build()
        .map_err(|e| Error::invalid(format!("cannot build the connection pool: {e}")))
}

#[cfg(feature = "tls")]
fn tls_manager(config: tokio_postgres::Config, manager_config: ManagerConfig) -> Result<Manager> {
    Ok(Manager::from_config(config, rustls_connector()?, manager_config))
}

#[cfg(feature = "tls")]
fn rustls_connector() -> Result<tokio_postgres_rustls::MakeRustlsConnect> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::invalid(format!("TLS setup: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(tls))
}

/// One connection for `LISTEN`, with the TLS the pool would use; its
/// notifications' payloads arrive on the receiver.
pub(crate) async fn connect_listener(
    config: &tokio_postgres::Config,
) -> std::result::Result<
    (
        tokio_postgres::Client,
        tokio::sync::mpsc::UnboundedReceiver<String>,
        crate::notify::AbortOnDrop,
    ),
    tokio_postgres::Error,
> {
    #[cfg(feature = "tls")]
    if config.get_ssl_mode() != SslMode::Disable
        && let Ok(tls) = rustls_connector()
    {
        let (client, connection) = config.connect(tls).await?;
        let (keys, pump) = crate::notify::pump(connection);
        return Ok((client, keys, pump));
    }
    let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
    let (keys, pump) = crate::notify::pump(connection);
    Ok((client, keys, pump))
}

/// Without the `tls` feature: `prefer` connects in plain text, `require`
/// is refused here rather than at every connection.
#[cfg(not(feature = "tls"))]
fn tls_manager(config: tokio_postgres::Config, manager_config: ManagerConfig) -> Result<Manager> {
    if config.get_ssl_mode() == SslMode::Prefer {
        return Ok(Manager::from_config(config, tokio_postgres::NoTls, manager_config));
    }
    Err(Error::invalid(
        "sslmode asks for TLS: build lock-postgres with its `tls` feature (verrou: `postgres-tls`)",
    ))
}

/// Check that the tables exist; create them (under a transaction-scoped
/// advisory lock, so concurrent first uses do not collide) when allowed.
/// Each round trip is bounded by the response timeout: a session holding
/// the creation lock, or a stalled server, fails the build.
async fn ensure_schema(backend: &PostgresBackend, create: bool) -> Result<()> {
    let inner = &backend.inner;
    let schema = inner.sql.schema.as_str();
    let rows = backend.query(&inner.sql.exists, &[], false).await?;
    if rows.first().and_then(|r| r.try_get::<_, bool>(0).ok()) == Some(true) {
        return Ok(());
    }
    if !create {
        let detail = "create_schema(false) and the schema is incomplete";
        return Err(Error::refused(
            BACKEND,
            RefusalReason::MissingSchema,
            missing_schema(schema, detail),
        ));
    }
    // One simple-protocol string runs as one implicit transaction: all of it
    // or none, and the xact lock is held to its end.
    let script = format!(
        "SELECT pg_advisory_xact_lock(hashtext('verrou schema {schema}')); {}",
        schema_sql(schema)?
    );
    let timeout = inner.response_timeout;
    let started = tokio::time::Instant::now();
    let busy = backend.busy(Op::Write, timeout).await?;
    let left = timeout.saturating_sub(started.elapsed()).max(Duration::from_millis(1));
    let Some(client) = busy.client() else {
        return Err(Error::backend(BACKEND, "no connection"));
    };
    match tokio::time::timeout(left, client.batch_execute(&script)).await {
        Ok(result) => {
            busy.finish();
            result.map_err(|e| statement_error(e, false, schema))
        }
        // The connection, its script still running, is set aside.
        Err(_) => Err(Error::backend(
            BACKEND,
            format!(
                "the schema {schema:?} was not created within the response timeout ({timeout:?}): \
                 another session holds its creation lock, or the server is stalled"
            ),
        )),
    }
}
