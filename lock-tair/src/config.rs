//! The configuration contract for `tair://` URLs: [`TairConfig`],
//! the backend's `connect` / `builder` / `builder_from` /
//! `builder_with_client`, and [`TairConnector`] for the facade.

use std::sync::Arc;

use lock_core::Result;
use lock_core::raw::{BackendConfig, Connected, Connector, SchemeTable, async_trait, in_context};
use lock_redis_family::url::{FamilyConfig, Flavor};

use crate::builder::DEFAULT_ACK_CONNECTIONS;
use crate::{TairBackend, TairBuilder};

const FLAVOR: Flavor = Flavor {
    base: "tair",
    tls_compiled: cfg!(feature = "tls"),
    crate_name: "lock-tair",
    default_ack_connections: DEFAULT_ACK_CONNECTIONS,
    also: "redis",
};

/// The configuration of a [`TairBackend`]: what a
/// `tair://[user:pass@]host[:port][/db][?…]` URL says (also `tairs://`
/// for TLS, `tair+cluster://h1[:p1],h2[:p2]…` and `tairs+cluster://`,
/// `tair+sentinel://s1[:p1],s2[:p2]…/MASTER_NAME[/db]` and
/// `tairs+sentinel://` for a primary found through Redis Sentinel, the
/// sentinels' own credentials in `sentinel_username` / `sentinel_password`),
/// with the defaults for what it leaves out. The settings are the fields
/// of [`FamilyConfig`] (through `Deref`), shared with the Lua backend.
/// `TairBackend::connect` reads `redis://` URLs (and their TLS and cluster
/// forms) too, as Tair servers speak the Redis protocol;
/// the parameters are [`lock_redis_family::url::FAMILY_PARAMS`].
///
/// ```
/// use lock_core::raw::BackendConfig;
/// use lock_tair::TairConfig;
///
/// let mut config = TairConfig::from_url("tair://app:secret@cache:6380/2?fencing=true")?;
/// config.set("response_timeout", "500ms")?;
/// assert_eq!(config.description(), "tair://app:***@cache:6380/2");
/// assert!(config.fencing);
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone, PartialEq)]
pub struct TairConfig(FamilyConfig);

lock_redis_family::family_config!(
    TairConfig,
    FLAVOR,
    [
        "tair",
        "tairs",
        "tair+cluster",
        "tairs+cluster",
        "tair+sentinel",
        "tairs+sentinel"
    ]
);

impl std::fmt::Debug for TairConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl TairBackend {
    /// A backend on the server (or cluster) `url` names, with its
    /// parameters (see [`TairConfig`]).
    ///
    /// # Errors
    /// As [`TairBackend::builder`] and [`TairBuilder::build`].
    ///
    /// # Cancel safety
    /// Dropping the future drops the connections made so far; nothing is
    /// written to the server.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder(url)?.build().await
    }

    /// A builder for `url` and its parameters (see [`TairConfig`]);
    /// the builder's methods then change what the URL said.
    ///
    /// # Errors
    /// [`lock_core::Error::InvalidArgument`] for a malformed URL or a
    /// parameter out of range.
    pub fn builder(url: &str) -> Result<TairBuilder> {
        Self::builder_from(TairConfig::from_url(url)?)
    }

    /// A builder for `config`.
    ///
    /// # Errors
    /// [`lock_core::Error::InvalidArgument`] when the config does not
    /// validate or its `tls_ca` file cannot be read.
    pub fn builder_from(config: TairConfig) -> Result<TairBuilder> {
        config.validate()?;
        let mut builder = TairBuilder::url(config.fred_url());
        builder = builder.settings(config.settings()?).fencing(config.fencing);
        #[cfg(feature = "tls")]
        if let Some(pem) = config.read_tls_ca()? {
            builder = builder.tls_root_certs(pem);
        }
        Ok(builder)
    }

    /// A builder on the application's own fred client (see
    /// [`TairBuilder::connection`]; a pool: [`TairBuilder::pool`]).
    pub fn builder_with_client(client: fred::clients::Client) -> TairBuilder {
        TairBuilder::connection(client)
    }
}

/// The facade's entry for the `tair…://` schemes.
#[derive(Debug, Clone, Copy, Default)]
pub struct TairConnector;

#[async_trait]
impl Connector for TairConnector {
    fn check(&self, url: &str, _: &SchemeTable) -> Result<()> {
        TairConfig::from_url(url).map(drop)
    }

    async fn connect(&self, url: &str, _: &SchemeTable) -> Result<Connected> {
        let config = TairConfig::from_url(url)?;
        let description = config.description();
        let backend = TairBackend::builder_from(config)?
            .build()
            .await
            .map_err(|e| in_context(e, &description))?;
        Ok(Connected::full(Arc::new(backend), description))
    }
}
