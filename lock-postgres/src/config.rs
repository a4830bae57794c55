//! The configuration contract for `postgres://` URLs: [`PostgresConfig`],
//! the backend's `connect` / `builder` / `builder_from` /
//! `builder_with_client`, and [`PostgresConnector`] for the facade.
//!
//! The URL is libpq's (read by tokio-postgres: `sslmode`,
//! `application_name`, …); verrou's own parameters are taken out before it
//! is handed over.

use std::sync::Arc;
use std::time::Duration;

use lock_core::raw::{
    BackendConfig, Connected, Connector, SchemeTable, UrlParts, async_trait, in_context, parse_bool, parse_duration,
    parse_number, redact_url,
};
use lock_core::{Error, Result};

use crate::builder::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_POOL_SIZE, DEFAULT_RESPONSE_TIMEOUT, MAX_POOL_SIZE};
use crate::schema::{DEFAULT_SCHEMA, validate_identifier};
use crate::{PostgresBackend, PostgresBuilder};

/// verrou's parameters of a `postgres://` URL (libpq's own pass through).
pub const POSTGRES_PARAMS: &[&str] = &[
    "schema",
    "create_schema",
    "connect_timeout",
    "response_timeout",
    "pool_size",
    "release_notifications",
    "listen_url",
    "mode",
    "fencing",
    "multiplexed_sessions",
];

/// How a `postgres://` backend holds its locks (URL parameter `mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostgresMode {
    /// `mode=lease` (the default): leases as rows of a table
    /// ([`PostgresBackend`]); every lock kind, fair mode, fencing tokens,
    /// the versioned store.
    #[default]
    Lease,
    /// `mode=advisory`: a held lock is a session advisory lock
    /// ([`AdvisoryBackend`](crate::AdvisoryBackend)); plain locks only (see
    /// the crate's *Advisory mode*).
    Advisory,
}

/// The configuration of a [`PostgresBackend`]: what a
/// `postgres://user[:password]@host[:port]/database[?…]` (or
/// `postgresql://`) URL says, with the defaults for what it leaves out.
///
/// ```
/// use lock_core::raw::BackendConfig;
/// use lock_postgres::PostgresConfig;
///
/// let config = PostgresConfig::from_url("postgres://app:secret@db/app?schema=locks&pool_size=4")?;
/// assert_eq!(config.schema, "locks");
/// assert_eq!(config.pool_size, 4);
/// assert_eq!(config.description(), "postgres://***@db/app");
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct PostgresConfig {
    /// The URL for tokio-postgres without verrou's parameters (may hold a
    /// password: never printed).
    url: String,
    /// `schema`: the schema holding the tables (default `verrou`).
    pub schema: String,
    /// `create_schema`: create it at build when missing (default true).
    pub create_schema: bool,
    /// `connect_timeout`: time to open a connection (default 2 s; libpq's
    /// whole seconds or a duration such as `500ms`).
    pub connect_timeout: Duration,
    /// `response_timeout`: a pooled connection plus one reply (default 2 s).
    pub response_timeout: Duration,
    /// `pool_size`: connections the backend opens itself (default 16, 1 to
    /// [`MAX_POOL_SIZE`]).
    pub pool_size: usize,
    /// `release_notifications`: `LISTEN`/`pg_notify` wake-ups; `None`
    /// leaves them to the mode (on for lease rows, none in advisory mode).
    pub release_notifications: Option<bool>,
    /// `listen_url`: a direct connection for `LISTEN` (percent-encoded in
    /// the URL; may hold a password: never printed).
    listen_url: Option<String>,
    /// `mode`: leases in a table (`lease`, the default) or session advisory
    /// locks (`advisory`).
    pub mode: PostgresMode,
    /// `fencing`: advisory mode's fencing tokens (unset: off). The lease
    /// mode always issues them: it takes `fencing=true` and refuses
    /// `fencing=false`.
    pub fencing: Option<bool>,
    /// `multiplexed_sessions`: advisory mode's sessions shared by the locks
    /// of many keys (unset: 2, or `pool_size - 1` when smaller; 0: every
    /// held lock keeps a session of its own). Below `pool_size`.
    pub multiplexed_sessions: Option<usize>,
}

impl std::fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &self.description())
            .field("schema", &self.schema)
            .field("create_schema", &self.create_schema)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("pool_size", &self.pool_size)
            .field("release_notifications", &self.release_notifications)
            .field("listen_url", &self.listen_url.as_deref().map(redact_url))
            .field("mode", &self.mode)
            .field("fencing", &self.fencing)
            .field("multiplexed_sessions", &self.multiplexed_sessions)
            .finish_non_exhaustive()
    }
}

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig {
            url: "postgres://localhost/postgres".to_owned(),
            schema: DEFAULT_SCHEMA.to_owned(),
            create_schema: true,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            pool_size: DEFAULT_POOL_SIZE,
            release_notifications: None,
            listen_url: None,
            mode: PostgresMode::Lease,
            fencing: None,
            multiplexed_sessions: None,
        }
    }
}

impl PostgresConfig {
    /// Sets the direct connection for `LISTEN` (turns release
    /// notifications on).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when it is not a PostgreSQL URL.
    pub fn set_listen_url(&mut self, url: &str) -> Result<()> {
        PostgresBuilder::url(url).map_err(|_| {
            Error::invalid(
                "listen_url is not a PostgreSQL URL: percent-encode a direct connection's URL, \
                 e.g. listen_url=postgres%3A%2F%2Fapp%40db-primary%2Fapp",
            )
        })?;
        self.listen_url = Some(url.to_owned());
        self.release_notifications = Some(true);
        Ok(())
    }

    /// The URL for tokio-postgres (verrou's parameters taken out).
    pub(crate) fn libpq_url(&self) -> &str {
        &self.url
    }

    /// The direct connection for `LISTEN`, if set.
    pub fn listen_url(&self) -> Option<&str> {
        self.listen_url.as_deref()
    }
}

impl BackendConfig for PostgresConfig {
    const SCHEMES: &'static [&'static str] = &["postgres", "postgresql"];
    const PARAMS: &'static [&'static str] = POSTGRES_PARAMS;

    fn from_url(url: &str) -> Result<Self> {
        // A password with an unencoded `/`, `?` or `#` can be cut into what
        // a message quotes as a host or a value: hidden here.
        Self::parse_url(url).map_err(|e| lock_core::raw::hide_quoted_url_text(e, url))
    }
    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        match key {
            "schema" => {
                validate_identifier(value)?;
                self.schema = value.to_owned();
            }
            "create_schema" => self.create_schema = parse_bool(key, value)?,
            // libpq writes whole seconds; a duration with a unit works too.
            "connect_timeout" => match value.parse::<u64>() {
                Ok(secs) => self.connect_timeout = parse_duration(key, &format!("{secs}s"))?,
                Err(_) => self.connect_timeout = parse_duration(key, value)?,
            },
            "response_timeout" => self.response_timeout = parse_duration(key, value)?,
            "pool_size" => self.pool_size = parse_number(key, value, 1, MAX_POOL_SIZE as u64)?,
            "release_notifications" => self.release_notifications = Some(parse_bool(key, value)?),
            "listen_url" => self.set_listen_url(value)?,
            "mode" => {
                self.mode = match value {
                    "lease" => PostgresMode::Lease,
                    "advisory" => PostgresMode::Advisory,
                    other => {
                        return Err(Error::invalid(format!(
                            "mode must be `lease` (rows of a table, the default) or `advisory` (session \
                             advisory locks), got {other:?}"
                        )));
                    }
                }
            }
            "fencing" => self.fencing = Some(parse_bool(key, value)?),
            "multiplexed_sessions" => {
                self.multiplexed_sessions = Some(parse_number(key, value, 0, MAX_POOL_SIZE as u64 - 1)?);
            }
            other => {
                return Err(Error::invalid(format!(
                    "unknown parameter `{other}` for postgres://: verrou's parameters are {} (libpq's go in \
                     the URL)",
                    POSTGRES_PARAMS.join(", ")
                )));
            }
        }
        Ok(())
    }

    fn validate(&self) -> Result<()> {
        validate_identifier(&self.schema)?;
        for (name, t) in [
            ("connect_timeout", self.connect_timeout),
            ("response_timeout", self.response_timeout),
        ] {
            if t.is_zero() || t > lock_core::raw::MAX_TIMEOUT {
                return Err(Error::invalid(format!(
                    "{name} must be above zero and at most {} days, got {t:?}",
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
        match self.mode {
            PostgresMode::Advisory if self.release_notifications == Some(true) || self.listen_url.is_some() => {
                return Err(Error::invalid(
                    "mode=advisory has no release notifications (release_notifications, listen_url): \
                     its waiters poll pg_try_advisory_lock; drop those parameters or use mode=lease",
                ));
            }
            PostgresMode::Advisory if self.multiplexed_sessions.is_some_and(|n| n >= self.pool_size) => {
                return Err(Error::invalid(format!(
                    "multiplexed_sessions must be below pool_size ({}): the pool keeps a connection for the \
                     other statements, got {:?}",
                    self.pool_size, self.multiplexed_sessions
                )));
            }
            PostgresMode::Lease if self.multiplexed_sessions.is_some() => {
                return Err(Error::invalid(
                    "multiplexed_sessions is a setting of mode=advisory: mode=lease holds no session",
                ));
            }
            PostgresMode::Lease if self.fencing == Some(false) => {
                return Err(Error::invalid(
                    "fencing=false is a setting of mode=advisory: mode=lease always issues fencing tokens",
                ));
            }
            _ => {}
        }
        Ok(())
    }

    fn description(&self) -> String {
        let shown = redact_url(&self.url);
        shown.split('?').next().unwrap_or_default().to_owned()
    }
}

impl PostgresConfig {
    /// [`BackendConfig::from_url`] before its errors' quoted URL text is
    /// hidden.
    fn parse_url(url: &str) -> Result<Self> {
        let parts = UrlParts::parse(url, &[])?;
        if !Self::SCHEMES.contains(&parts.scheme.as_str()) {
            return Err(Error::invalid(format!(
                "{}:// is not a PostgreSQL URL: use postgres:// or postgresql://",
                parts.scheme
            )));
        }
        let shown = redact_url(url);
        let shown = shown.split('?').next().unwrap_or_default();
        if parts.hosts.is_empty() {
            return Err(Error::invalid(format!(
                "{shown} has no host: write postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
            )));
        }
        let mut config = PostgresConfig::default();
        let mut passed = form_urlencoded::Serializer::new(String::new());
        for (name, value) in &parts.params {
            if POSTGRES_PARAMS.contains(&name.as_str()) {
                config.set(name, value)?;
            } else {
                passed.append_pair(name, value);
            }
        }
        let passed = passed.finish();
        let before_query = url.split_once("://").map_or("", |(_, rest)| rest);
        let before_query = before_query.split('?').next().unwrap_or_default();
        config.url = if passed.is_empty() {
            format!("{}://{before_query}", parts.scheme)
        } else {
            format!("{}://{before_query}?{passed}", parts.scheme)
        };
        // tokio-postgres's own check now, so a bad URL fails before connecting.
        PostgresBuilder::url(&config.url).map_err(|e| match e {
            Error::InvalidArgument(m) => Error::invalid(format!(
                "{shown}: {m} (verrou's own parameters are {})",
                POSTGRES_PARAMS.join(", ")
            )),
            other => other,
        })?;
        config.validate()?;
        Ok(config)
    }
}

impl PostgresBackend {
    /// A backend at `url` (with its parameters: see [`PostgresConfig`]),
    /// the schema created when missing.
    ///
    /// # Errors
    /// As [`PostgresBackend::builder`] and [`PostgresBuilder::build`].
    ///
    /// # Cancel safety
    /// As [`PostgresBuilder::build`].
    pub async fn connect(url: &str) -> Result<PostgresBackend> {
        Self::builder(url)?.build().await
    }

    /// A builder for `url` and its parameters (see [`PostgresConfig`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a malformed URL or a parameter out of
    /// range (the message never quotes a password).
    pub fn builder(url: &str) -> Result<PostgresBuilder> {
        Self::builder_from(PostgresConfig::from_url(url)?)
    }

    /// A builder for `config`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the config does not validate.
    pub fn builder_from(config: PostgresConfig) -> Result<PostgresBuilder> {
        config.validate()?;
        if config.mode == PostgresMode::Advisory {
            return Err(Error::invalid(
                "mode=advisory is lock_postgres::AdvisoryBackend's (verrou::connect picks it): \
                 PostgresBackend holds leases as rows (mode=lease)",
            ));
        }
        let mut builder = PostgresBuilder::url(&config.url)?
            .schema(config.schema)
            .create_schema(config.create_schema)
            .connect_timeout(config.connect_timeout)
            .response_timeout(config.response_timeout)
            .pool_size(config.pool_size);
        if let Some(on) = config.release_notifications {
            builder = builder.release_notifications(on);
        }
        if let Some(url) = config.listen_url {
            builder = builder.listen_url(url);
        }
        Ok(builder)
    }

    /// A builder over the application's own pool (see
    /// [`PostgresBuilder::pool`]).
    pub fn builder_with_client(pool: deadpool_postgres::Pool) -> PostgresBuilder {
        PostgresBuilder::pool(pool)
    }
}

/// The facade's entry for `postgres://` and `postgresql://`.
#[derive(Debug, Clone, Copy, Default)]
pub struct PostgresConnector;

#[async_trait]
impl Connector for PostgresConnector {
    fn check(&self, url: &str, _: &SchemeTable) -> Result<()> {
        PostgresConfig::from_url(url).map(drop)
    }

    async fn connect(&self, url: &str, _: &SchemeTable) -> Result<Connected> {
        let config = PostgresConfig::from_url(url)?;
        let description = config.description();
        if config.mode == PostgresMode::Advisory {
            let backend = crate::AdvisoryBackend::builder_from(config)?
                .build()
                .await
                .map_err(|e| in_context(e, &description))?;
            return Ok(Connected::locks_only(Arc::new(backend), description));
        }
        let backend = PostgresBackend::builder_from(config)?
            .build()
            .await
            .map_err(|e| in_context(e, &description))?;
        Ok(Connected::full(Arc::new(backend), description))
    }
}
