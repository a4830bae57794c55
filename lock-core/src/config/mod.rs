//! The configuration contract: how a backend crate reads its URL, validates
//! its settings and connects, so that the facade's `connect(url)` only
//! dispatches by scheme (for backend authors, through [`crate::raw`]).
//!
//! Each backend crate owns three things:
//! - a typed config (`RedisLuaConfig`, `PostgresConfig`, …) implementing
//!   [`BackendConfig`]: its schemes, its parameter names, parsing a URL into
//!   bounded values ([`BackendConfig::from_url`]), setting one parameter by
//!   name as a URL query would ([`BackendConfig::set`], object_store's
//!   `with_config`), the checks across parameters and a password-free
//!   description;
//! - the vocabulary on its backend type, the same in every crate:
//!   `connect(url)`, `builder(url) -> Result<Builder>`, `builder_from(config)`
//!   and, where its client library has one, `builder_with_client(client)`;
//! - a [`Connector`], the object the facade's [`SchemeTable`] holds for each
//!   of the crate's schemes.

mod url;

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::kinds::election::ElectionBackend;
use crate::kinds::multi::MultiLockBackend;
use crate::kinds::rw::RwLockBackend;
use crate::kinds::semaphore::SemaphoreBackend;
use crate::{LockBackend, VersionedStore};

pub use url::{
    UrlParts, hide_quoted_url_text, parse_bool, parse_duration, parse_host_port, parse_number, percent_decode,
    refuse_conflicting_repeats, unknown_parameter,
};

/// A backend's typed configuration: what its URL and its parameters say,
/// validated, with the backend's defaults for what they leave out.
///
/// `from_url` is `set` applied to each query parameter of the URL, then
/// `validate`; a config built in code (from `Default`, or deserialized)
/// goes through the same `validate` when a builder is made from it.
pub trait BackendConfig: Clone + fmt::Debug + Send + Sync + Sized + 'static {
    /// The URL schemes this config reads (lowercase, without `://`).
    const SCHEMES: &'static [&'static str];

    /// The query parameter names it takes, for messages and docs.
    const PARAMS: &'static [&'static str];

    /// Parses and validates `url`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming what to fix (never quoting
    /// credentials); [`Error::Unsupported`] for a scheme this build of the
    /// crate cannot serve (naming the Cargo feature).
    fn from_url(url: &str) -> Result<Self>;

    /// Sets one parameter by name, as `?key=value` in the URL would.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown name (listing the names)
    /// or a value out of its documented range.
    fn set(&mut self, key: &str, value: &str) -> Result<()>;

    /// The checks across parameters (and of values set directly on the
    /// config's fields).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the parameters and their ranges.
    fn validate(&self) -> Result<()>;

    /// The URL it stands for without credentials, for messages and
    /// [`Connected::description`].
    fn description(&self) -> String;
}

/// One backend crate's entry point for the facade: checks and connects the
/// URLs of its schemes. Implemented by a unit struct in each backend crate
/// (`RedisLuaConnector`, …); [`SchemeTable`] holds them.
#[crate::raw::async_trait]
pub trait Connector: Send + Sync + 'static {
    /// The same checks as [`Connector::connect`], short of connecting.
    ///
    /// # Errors
    /// As [`BackendConfig::from_url`].
    fn check(&self, url: &str, table: &SchemeTable) -> Result<()>;

    /// Parses `url` and connects the backend it names. `table` resolves
    /// URLs nested in this one (a Redlock's nodes).
    ///
    /// # Errors
    /// As [`Connector::check`], and [`Error::Backend`] when the server
    /// cannot be reached or refuses the credentials.
    ///
    /// # Cancel safety
    /// Cancelling drops the connections made so far; nothing is written.
    async fn connect(&self, url: &str, table: &SchemeTable) -> Result<Connected>;
}

/// A connected backend as the facade hands it out: its lock operations,
/// its versioned store and lock kinds where it has them, and a description
/// without credentials.
#[derive(Clone)]
pub struct Connected {
    /// The lock operations.
    pub locks: Arc<dyn LockBackend>,
    /// The versioned store, if the backend has one.
    pub store: Option<Arc<dyn VersionedStore>>,
    /// Leased semaphores, if any.
    pub semaphores: Option<Arc<dyn SemaphoreBackend>>,
    /// Leader election, if any.
    pub elections: Option<Arc<dyn ElectionBackend>>,
    /// Read-write locks, if any.
    pub rw_locks: Option<Arc<dyn RwLockBackend>>,
    /// Multi-key locks, if any.
    pub multi_locks: Option<Arc<dyn MultiLockBackend>>,
    /// The URL without credentials.
    pub description: String,
    /// True when the locks exist only inside this process.
    pub in_process: bool,
}

impl fmt::Debug for Connected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connected")
            .field("description", &self.description)
            .field("backend", &self.locks.capabilities().name)
            .field("store", &self.store.is_some())
            .finish_non_exhaustive()
    }
}

impl Connected {
    /// A backend with every capability: locks, store and every lock kind
    /// (each kind's manager still checks the backend's capabilities).
    pub fn full<B>(backend: Arc<B>, description: String) -> Self
    where
        B: LockBackend
            + VersionedStore
            + SemaphoreBackend
            + ElectionBackend
            + RwLockBackend
            + MultiLockBackend
            + 'static,
    {
        Connected {
            locks: backend.clone(),
            store: Some(backend.clone()),
            semaphores: Some(backend.clone()),
            elections: Some(backend.clone()),
            rw_locks: Some(backend.clone()),
            multi_locks: Some(backend),
            description,
            in_process: false,
        }
    }

    /// A backend with lock operations only (no store, no kinds).
    pub fn locks_only(locks: Arc<dyn LockBackend>, description: String) -> Self {
        Connected {
            locks,
            store: None,
            semaphores: None,
            elections: None,
            rw_locks: None,
            multi_locks: None,
            description,
            in_process: false,
        }
    }

    /// Marks the backend as living in this process only.
    #[must_use]
    pub fn in_process(mut self, yes: bool) -> Self {
        self.in_process = yes;
        self
    }
}

/// One scheme of a [`SchemeTable`]: the Cargo feature that serves it and,
/// when that feature is compiled in, its connector.
#[derive(Clone, Copy)]
pub struct SchemeEntry {
    /// Lowercase, without `://`.
    pub scheme: &'static str,
    /// The facade's Cargo feature that serves it (named in the error when
    /// it is off).
    pub feature: &'static str,
    /// `None` when the feature is off.
    pub connector: Option<&'static dyn Connector>,
}

impl fmt::Debug for SchemeEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchemeEntry")
            .field("scheme", &self.scheme)
            .field("feature", &self.feature)
            .field("compiled_in", &self.connector.is_some())
            .finish_non_exhaustive()
    }
}

/// Scheme → connector: the whole of the facade's dispatch.
#[derive(Debug, Clone)]
pub struct SchemeTable {
    entries: Vec<SchemeEntry>,
    owner: &'static str,
}

impl SchemeTable {
    /// A table of `entries`; `owner` names the crate whose features the
    /// errors mention (e.g. `verrou`).
    pub fn new(owner: &'static str, entries: Vec<SchemeEntry>) -> Self {
        SchemeTable { entries, owner }
    }

    /// Every scheme, as `a://, b://, …`, for messages.
    pub fn schemes(&self) -> String {
        let names: Vec<String> = self.entries.iter().map(|e| format!("{}://", e.scheme)).collect();
        names.join(", ")
    }

    /// The entries, in order.
    pub fn entries(&self) -> &[SchemeEntry] {
        &self.entries
    }

    /// The connector for `url`'s scheme.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a URL without a known scheme;
    /// [`Error::Unsupported`] naming the feature to enable.
    pub fn resolve(&self, url: &str) -> Result<&'static dyn Connector> {
        let Some((scheme, _)) = url.split_once("://") else {
            return Err(Error::invalid(format!(
                "URL {} has no scheme: start it with one of {}",
                crate::redact::redact_url(url),
                self.schemes()
            )));
        };
        let scheme = scheme.to_ascii_lowercase();
        let Some(entry) = self.entries.iter().find(|e| e.scheme == scheme) else {
            return Err(Error::invalid(format!(
                "unknown scheme `{scheme}://` in {}: use one of {}",
                crate::redact::redact_url(url),
                self.schemes()
            )));
        };
        entry.connector.ok_or_else(|| Error::Unsupported {
            backend: format!("{}::connect", self.owner),
            what: format!(
                "{scheme}:// URLs: enable the Cargo feature `{}` of {}",
                entry.feature, self.owner
            ),
        })
    }

    /// Checks `url` as [`SchemeTable::connect`] would, short of connecting.
    ///
    /// # Errors
    /// As [`Connector::check`].
    pub fn check(&self, url: &str) -> Result<()> {
        self.resolve(url)
            .and_then(|c| c.check(url, self))
            .map_err(|e| hide_quoted_url_text(e, url))
    }

    /// Connects `url` through its scheme's connector.
    ///
    /// # Errors
    /// As [`Connector::connect`].
    ///
    /// # Cancel safety
    /// As [`Connector::connect`].
    pub async fn connect(&self, url: &str) -> Result<Connected> {
        let connector = self.resolve(url).map_err(|e| hide_quoted_url_text(e, url))?;
        connector
            .connect(url, self)
            .await
            .map_err(|e| hide_quoted_url_text(e, url))
    }
}

/// Names `description` (a URL without credentials) in a backend error, so
/// that a failure among several nodes says which.
pub fn in_context(e: Error, description: &str) -> Error {
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
mod tests {
    use super::*;

    #[test]
    fn a_scheme_whose_feature_is_off_names_the_feature() {
        let table = SchemeTable::new(
            "verrou",
            vec![
                SchemeEntry {
                    scheme: "redis",
                    feature: "redis-lua",
                    connector: None,
                },
                SchemeEntry {
                    scheme: "rediss",
                    feature: "redis-lua-tls",
                    connector: None,
                },
            ],
        );
        for (url, feature) in [("redis://h", "`redis-lua`"), ("REDISS://h", "`redis-lua-tls`")] {
            match table.check(url) {
                Err(e @ Error::Unsupported { .. }) => {
                    let message = e.to_string();
                    assert!(message.contains(feature), "{url}: {message}");
                    assert!(message.contains("Cargo feature"), "{url}: {message}");
                }
                other => unreachable!("{url}: {other:?}"),
            }
        }
        assert!(
            matches!(table.check("mysql://u:pw@h"), Err(Error::InvalidArgument(m)) if m.contains("redis://, rediss://"))
        );
        assert!(matches!(table.check("h:1"), Err(Error::InvalidArgument(m)) if m.contains("start it with one of")));
    }
}
