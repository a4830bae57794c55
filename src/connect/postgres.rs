//! `postgres://` and `postgresql://` URLs: libpq's URL syntax, read by
//! tokio-postgres, plus verrou's own parameters (taken out before the URL
//! is handed over).

use std::time::Duration;

use lock_core::{Error, Result};

/// The parameters `postgres://` URLs take besides libpq's (`sslmode`,
/// `connect_timeout` in seconds, `application_name`, ...).
pub const POSTGRES_PARAMS: &str =
    "schema, create_schema, response_timeout, pool_size, release_notifications, listen_url";

/// A parsed `postgres://` URL.
#[derive(Clone)]
pub(crate) struct PostgresTarget {
    /// The URL for tokio-postgres, without verrou's parameters.
    pub url: String,
    /// The URL without password or query, for messages.
    pub shown: String,
    pub schema: Option<String>,
    pub create_schema: Option<bool>,
    pub response_timeout: Option<Duration>,
    pub pool_size: Option<usize>,
    pub release_notifications: Option<bool>,
    /// A direct connection for `LISTEN` (percent-encoded in the URL).
    pub listen_url: Option<String>,
}

impl std::fmt::Debug for PostgresTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

/// Split verrou's parameters off `url` (whose scheme is `postgres` or
/// `postgresql`); the rest is checked when the backend is built.
pub(crate) fn parse_postgres(url: &str, before_query: &str, params: &[(String, String)]) -> Result<PostgresTarget> {
    let shown = lock_core::raw::redact_url(url);
    if before_query.is_empty() {
        return Err(Error::invalid(format!(
            "{shown} has no host: write postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
        )));
    }
    let mut target = PostgresTarget {
        url: String::new(),
        shown: shown.split('?').next().unwrap_or_default().to_owned(),
        schema: None,
        create_schema: None,
        response_timeout: None,
        pool_size: None,
        release_notifications: None,
        listen_url: None,
    };
    let mut passed = form_urlencoded::Serializer::new(String::new());
    for (name, value) in params {
        match name.as_str() {
            "schema" => {
                lock_postgres::validate_identifier(value)?;
                target.schema = Some(value.clone());
            }
            "create_schema" => target.create_schema = Some(super::url::boolean(name, value)?),
            "response_timeout" => target.response_timeout = Some(super::url::duration(name, value)?),
            "pool_size" => {
                let max = lock_postgres::MAX_POOL_SIZE as u64;
                target.pool_size = Some(super::url::number_in(name, value, 1, max)?);
            }
            "release_notifications" => target.release_notifications = Some(super::url::boolean(name, value)?),
            "listen_url" => {
                lock_postgres::PostgresBuilder::url(value).map_err(|_| {
                    Error::invalid(
                        "listen_url is not a PostgreSQL URL: percent-encode a direct connection's URL, \
                         e.g. listen_url=postgres%3A%2F%2Fapp%40db-primary%2Fapp",
                    )
                })?;
                target.listen_url = Some(value.clone());
            }
            _ => {
                passed.append_pair(name, value);
            }
        }
    }
    let passed = passed.finish();
    let (scheme, _) = url.split_once("://").unwrap_or(("postgres", ""));
    target.url = if passed.is_empty() {
        format!("{scheme}://{before_query}")
    } else {
        format!("{scheme}://{before_query}?{passed}")
    };
    // tokio-postgres's own check now, so a bad URL fails before connecting.
    lock_postgres::PostgresBuilder::url(&target.url).map_err(|e| match e {
        Error::InvalidArgument(m) => Error::invalid(format!(
            "{}: {m} (verrou's own parameters are {POSTGRES_PARAMS})",
            target.shown
        )),
        other => other,
    })?;
    Ok(target)
}

/// Connect the backend a `postgres://` URL names.
pub(crate) async fn build_postgres(target: PostgresTarget) -> Result<super::Backend> {
    let mut b = lock_postgres::PostgresBuilder::url(&target.url)?;
    if let Some(schema) = &target.schema {
        b = b.schema(schema.clone());
    }
    if let Some(create) = target.create_schema {
        b = b.create_schema(create);
    }
    if let Some(t) = target.response_timeout {
        b = b.response_timeout(t);
    }
    if let Some(n) = target.pool_size {
        b = b.pool_size(n);
    }
    if let Some(on) = target.release_notifications {
        b = b.release_notifications(on);
    }
    if let Some(url) = &target.listen_url {
        b = b.listen_url(url.clone());
    }
    let backend = std::sync::Arc::new(b.build().await.map_err(|e| super::in_context(e, &target.shown))?);
    Ok(super::Backend {
        locks: backend.clone(),
        kinds: super::kinds::Kinds::of(&backend),
        store: Some(backend),
        description: target.shown,
        in_process: false,
    })
}
