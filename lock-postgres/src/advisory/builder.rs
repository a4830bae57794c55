//! Building an [`AdvisoryBackend`]: where its sessions come from, the
//! timeouts, fencing tokens and their sequence.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use lock_core::raw::BackendConfig;
use lock_core::{Error, RefusalReason, Result};
use tokio_postgres::types::Type;

use super::{AdvisoryBackend, Inner, Statements};
use crate::builder::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_POOL_SIZE, DEFAULT_RESPONSE_TIMEOUT, MAX_POOL_SIZE};
use crate::config::{PostgresConfig, PostgresMode};
use crate::error::{missing_schema, statement_error};
use crate::schema::{DEFAULT_SCHEMA, validate_identifier};

/// Multiplexed sessions unless told otherwise (capped below the pool's
/// size): two server processes, so a 2-core server works on both.
const DEFAULT_MULTIPLEXED_SESSIONS: usize = 2;

enum Source {
    Config(Box<tokio_postgres::Config>),
    Pool(Pool),
}

/// Configures an [`AdvisoryBackend`]: start from a URL
/// ([`AdvisoryBackend::builder`]), a [`PostgresConfig`] or an
/// application's `deadpool_postgres::Pool`.
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// use lock_postgres::AdvisoryBackend;
/// let backend = AdvisoryBackend::builder("postgres://app@db.internal/app?mode=advisory")?
///     .fencing(true)
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
pub struct AdvisoryBuilder {
    source: Source,
    schema: String,
    create_schema: bool,
    connect_timeout: Duration,
    response_timeout: Duration,
    pool_size: usize,
    fencing: bool,
    multiplexed_sessions: Option<usize>,
}

impl std::fmt::Debug for AdvisoryBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdvisoryBuilder")
            .field("schema", &self.schema)
            .field("create_schema", &self.create_schema)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("pool_size", &self.pool_size)
            .field("fencing", &self.fencing)
            .field("multiplexed_sessions", &self.multiplexed_sessions)
            .finish_non_exhaustive()
    }
}

impl AdvisoryBuilder {
    fn new(source: Source) -> Self {
        AdvisoryBuilder {
            source,
            schema: DEFAULT_SCHEMA.to_owned(),
            create_schema: true,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            pool_size: DEFAULT_POOL_SIZE,
            fencing: false,
            multiplexed_sessions: None,
        }
    }

    /// Connect with these settings.
    pub fn config(config: tokio_postgres::Config) -> Self {
        Self::new(Source::Config(Box::new(config)))
    }

    /// Use the application's pool: each held lock keeps one of its
    /// connections checked out. The pool's connections must be sessions
    /// of their own (direct, or PgBouncer in *session* mode): see the
    /// crate's *Advisory mode*.
    pub fn pool(pool: Pool) -> Self {
        Self::new(Source::Pool(pool))
    }

    /// The schema of the fencing sequence (`fence_seq`, the lease mode's,
    /// so both modes draw from one sequence); used only with
    /// [`fencing`](Self::fencing). Default `verrou`.
    #[must_use]
    pub fn schema(mut self, name: impl Into<String>) -> Self {
        self.schema = name.into();
        self
    }

    /// With [`fencing`](Self::fencing): create the schema and its sequence
    /// at build when missing (default `true`); `false` fails the build with
    /// [`RefusalReason::MissingSchema`] when the sequence is not there.
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

    /// Time for a pooled connection plus one reply (default 2 s). A grant
    /// or an unlock without a reply in time closes its session (which ends
    /// its lock, if it took one).
    #[must_use]
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Size of the pool the backend opens itself (default 16, at most
    /// [`MAX_POOL_SIZE`]): every held lock keeps one connection, so this
    /// bounds the locks held at once through the backend (a try when every
    /// connection holds a lock waits for one up to the response timeout).
    #[must_use]
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// Sessions shared by the locks of many keys (default 2, or
    /// `pool_size - 1` when smaller): each is a pooled connection kept for
    /// the backend's life, its locks' statements pipelined on it, a key
    /// always going to the same one. `0`: every held lock keeps a session
    /// of its own (the pool then bounds the locks held at once). When one
    /// session ends (its connection fails, the server terminates it), every
    /// lock on it is lost and signalled so at its next liveness check.
    /// Must be below the pool's size: other statements need a connection.
    #[must_use]
    pub fn multiplexed_sessions(mut self, count: usize) -> Self {
        self.multiplexed_sessions = Some(count);
        self
    }

    /// Fencing tokens (default off): each grant draws `nextval` of the
    /// schema's `fence_seq` in the same statement as the lock (one round
    /// trip), committed with `synchronous_commit` at least `on`, so a token
    /// never goes backwards after a crash. Needs the sequence (created
    /// at build, see [`create_schema`](Self::create_schema)).
    #[must_use]
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// Connect (and, with fencing, check or create the sequence).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for bad settings; [`Error::Refused`] when
    /// the fencing sequence is missing and may not be created, or the
    /// server refuses its creation; [`Error::Backend`] when the server
    /// cannot be reached within the timeouts.
    ///
    /// # Cancel safety
    /// Dropping the future drops the connections made so far; the sequence
    /// is created whole or not at all.
    pub async fn build(self) -> Result<AdvisoryBackend> {
        validate_identifier(&self.schema)?;
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
        let (pool, description) = match self.source {
            Source::Pool(pool) => (pool, "application pool".to_owned()),
            Source::Config(mut config) => {
                if config.get_connect_timeout().is_none() {
                    config.connect_timeout(self.connect_timeout);
                }
                let description = crate::builder::describe(&config);
                (crate::builder::own_pool(*config, self.pool_size)?, description)
            }
        };
        let max_size = pool.status().max_size;
        let multiplexed = match self.multiplexed_sessions {
            Some(n) if n >= max_size => {
                return Err(Error::invalid(format!(
                    "multiplexed_sessions must be below the pool's size ({max_size}): the pool keeps a \
                     connection for the other statements, got {n}"
                )));
            }
            Some(n) => n,
            None => DEFAULT_MULTIPLEXED_SESSIONS.min(max_size.saturating_sub(1)),
        };
        let backend = AdvisoryBackend {
            inner: Arc::new(Inner {
                pool,
                sql: Statements::new(&self.schema, self.fencing),
                response_timeout: self.response_timeout,
                description,
                held: Default::default(),
                multiplexed: super::Multiplexed::new(multiplexed),
            }),
        };
        if self.fencing {
            ensure_sequence(&backend, &self.schema, self.create_schema).await?;
        }
        refuse_shared_sessions(&backend).await?;
        Ok(backend)
    }
}

/// Refuses a pool whose connections share server sessions (PgBouncer in
/// transaction or statement mode): a session-level setting made on one
/// pooled connection must not be seen by another. Through such a pooler
/// the second connection's statement runs on the server connection the
/// first one just used, and sees it: two holders there would share one
/// session, where advisory locks are re-entrant. A direct connection (or
/// PgBouncer in session mode) never sees another session's setting. Over a
/// pool of one connection, only one round trip checks the server answers.
async fn refuse_shared_sessions(backend: &AdvisoryBackend) -> Result<()> {
    let timeout = backend.inner.response_timeout;
    let first = backend.checkout().await?;
    let probe = lock_core::LockToken::generate()?;
    let probe: String = probe.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
    let set = "SELECT set_config('verrou.advisory_probe', $1, false)";
    let read = "SELECT current_setting('verrou.advisory_probe', true)";
    probe_setting(&first, set, Some(&probe), timeout).await?;
    if backend.inner.pool.status().max_size < 2 {
        first.finish();
        return Ok(());
    }
    let second = backend.checkout().await?;
    let seen = probe_setting(&second, read, None, timeout).await?;
    // Both back to the pool: a session-level setting holds no lock.
    first.finish();
    second.finish();
    if seen.as_deref() == Some(probe.as_str()) {
        return Err(Error::unsupported(
            super::BACKEND,
            "advisory mode through a pooler that shares server sessions between its clients (PgBouncer in \
             transaction or statement mode): a session advisory lock would be re-entered by another holder; \
             connect directly, through PgBouncer in session mode, or use mode=lease",
        ));
    }
    Ok(())
}

/// One statement of the probe: `sql` with `value` (or none), its text
/// answer.
async fn probe_setting(
    session: &super::Session,
    sql: &str,
    value: Option<&str>,
    timeout: Duration,
) -> Result<Option<String>> {
    let Some(client) = session.client() else {
        return Err(Error::backend(super::BACKEND, "no connection"));
    };
    // Unnamed statements (Parse, Bind, Execute, Sync at once): a
    // transaction pooler runs each on one server connection.
    let reply = match value {
        Some(v) => tokio::time::timeout(timeout, client.query_typed(sql, &[(&v, Type::TEXT)])).await,
        None => tokio::time::timeout(timeout, client.query_typed(sql, &[])).await,
    };
    match reply {
        Ok(Ok(rows)) => Ok(rows
            .first()
            .and_then(|r| r.try_get::<_, Option<String>>(0).ok())
            .flatten()),
        Ok(Err(e)) => Err(statement_error(e, false, "")),
        Err(_) => Err(Error::backend(super::BACKEND, "no reply within the response timeout")),
    }
}

/// The sequence of fencing tokens: checked, and created when missing and
/// allowed (the lease schema's statement, so both modes share it).
async fn ensure_sequence(backend: &AdvisoryBackend, schema: &str, create: bool) -> Result<()> {
    let session = backend.checkout().await?;
    let Some(client) = session.client() else {
        return Err(Error::backend(super::BACKEND, "no connection"));
    };
    let timeout = backend.inner.response_timeout;
    let check = format!("SELECT to_regclass('\"{schema}\".fence_seq') IS NOT NULL");
    let present = match tokio::time::timeout(timeout, client.query_one(&check, &[])).await {
        Ok(Ok(row)) => row.try_get::<_, bool>(0).unwrap_or(false),
        Ok(Err(e)) => return Err(statement_error(e, false, schema)),
        Err(_) => return Err(Error::backend(super::BACKEND, "no reply within the response timeout")),
    };
    if present {
        session.finish();
        return Ok(());
    }
    if !create {
        return Err(Error::refused(
            super::BACKEND,
            RefusalReason::MissingSchema,
            missing_schema(
                schema,
                "fencing is on, create_schema(false) and the sequence fence_seq is missing",
            ),
        ));
    }
    // One simple-protocol string: one implicit transaction, under the
    // creation lock the lease schema takes.
    let script = format!(
        "SELECT pg_advisory_xact_lock(hashtext('verrou schema {schema}')); \
         CREATE SCHEMA IF NOT EXISTS \"{schema}\"; \
         DO $$ BEGIN \
             IF to_regclass('\"{schema}\".fence_seq') IS NULL THEN \
                 EXECUTE format('CREATE SEQUENCE \"{schema}\".fence_seq START WITH %s', \
                     (extract(epoch FROM clock_timestamp()) * 1000000)::bigint); \
             END IF; \
         END $$;"
    );
    match tokio::time::timeout(timeout, client.batch_execute(&script)).await {
        Ok(Ok(())) => {
            session.finish();
            Ok(())
        }
        Ok(Err(e)) => Err(statement_error(e, false, schema)),
        Err(_) => Err(Error::backend(
            super::BACKEND,
            format!("the fencing sequence of {schema:?} was not created within the response timeout ({timeout:?})"),
        )),
    }
}

impl AdvisoryBackend {
    /// A backend at `url` (`mode=advisory` or not: see [`PostgresConfig`]).
    ///
    /// # Errors
    /// As [`AdvisoryBackend::builder`] and [`AdvisoryBuilder::build`].
    ///
    /// # Cancel safety
    /// As [`AdvisoryBuilder::build`].
    pub async fn connect(url: &str) -> Result<AdvisoryBackend> {
        Self::builder(url)?.build().await
    }

    /// A builder for `url` and its parameters (see [`PostgresConfig`]; the
    /// advisory mode is this builder's whatever `mode` says).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a malformed URL, a parameter out of
    /// range or one the advisory mode does not have (the message never
    /// quotes a password).
    pub fn builder(url: &str) -> Result<AdvisoryBuilder> {
        let mut config = PostgresConfig::from_url(url)?;
        config.mode = PostgresMode::Advisory;
        Self::builder_from(config)
    }

    /// A builder for `config` (taken as `mode=advisory`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the config does not validate.
    pub fn builder_from(mut config: PostgresConfig) -> Result<AdvisoryBuilder> {
        config.mode = PostgresMode::Advisory;
        config.validate()?;
        let tokio_config = crate::builder::parse_libpq(config.libpq_url())?;
        let builder = AdvisoryBuilder::config(tokio_config)
            .schema(config.schema)
            .create_schema(config.create_schema)
            .connect_timeout(config.connect_timeout)
            .response_timeout(config.response_timeout)
            .pool_size(config.pool_size)
            .fencing(config.fencing.unwrap_or(false));
        Ok(match config.multiplexed_sessions {
            Some(n) => builder.multiplexed_sessions(n),
            None => builder,
        })
    }

    /// A builder over the application's own pool (see
    /// [`AdvisoryBuilder::pool`]).
    pub fn builder_with_client(pool: Pool) -> AdvisoryBuilder {
        AdvisoryBuilder::pool(pool)
    }
}
