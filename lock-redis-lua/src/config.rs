//! The configuration contract for `redis://` URLs: [`RedisLuaConfig`],
//! the backend's `connect` / `builder` / `builder_from` /
//! `builder_with_client`, and [`RedisLuaConnector`] for the facade.

use std::sync::Arc;

use lock_core::Result;
use lock_core::raw::{BackendConfig, Connected, Connector, SchemeTable, async_trait, in_context};
use lock_redis_family::url::{FamilyConfig, Flavor};

use crate::builder::DEFAULT_ACK_CONNECTIONS;
use crate::{RedisLuaBackend, RedisLuaBuilder};

const FLAVOR: Flavor = Flavor {
    base: "redis",
    tls_compiled: cfg!(feature = "tls"),
    crate_name: "lock-redis-lua",
    default_ack_connections: DEFAULT_ACK_CONNECTIONS,
    also: "",
};

/// The configuration of a [`RedisLuaBackend`]: what a
/// `redis://[user:pass@]host[:port][/db][?…]` URL says (also `rediss://`
/// for TLS, `redis+cluster://h1[:p1],h2[:p2]…` and `rediss+cluster://`,
/// `redis+sentinel://s1[:p1],s2[:p2]…/MASTER_NAME[/db]` and
/// `rediss+sentinel://` for a primary found through Redis Sentinel, the
/// sentinels' own credentials in `sentinel_username` / `sentinel_password`),
/// with the defaults for what it leaves out. The settings are the fields
/// of [`FamilyConfig`] (through `Deref`), shared with the Tair backend;
/// the parameters are [`lock_redis_family::url::FAMILY_PARAMS`].
///
/// ```
/// use lock_core::raw::BackendConfig;
/// use lock_redis_lua::RedisLuaConfig;
///
/// let mut config = RedisLuaConfig::from_url("redis://app:secret@cache:6380/2?fencing=true")?;
/// config.set("response_timeout", "500ms")?;
/// assert_eq!(config.description(), "redis://app:***@cache:6380/2");
/// assert!(config.fencing);
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone, PartialEq)]
pub struct RedisLuaConfig(FamilyConfig);

lock_redis_family::family_config!(
    RedisLuaConfig,
    FLAVOR,
    [
        "redis",
        "rediss",
        "redis+cluster",
        "rediss+cluster",
        "redis+sentinel",
        "rediss+sentinel"
    ]
);

impl std::fmt::Debug for RedisLuaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl RedisLuaBackend {
    /// A backend on the server (or cluster) `url` names, with its
    /// parameters (see [`RedisLuaConfig`]).
    ///
    /// # Errors
    /// As [`RedisLuaBackend::builder`] and [`RedisLuaBuilder::build`].
    ///
    /// # Cancel safety
    /// Dropping the future drops the connections made so far; nothing is
    /// written to the server.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder(url)?.build().await
    }

    /// A builder for `url` and its parameters (see [`RedisLuaConfig`]);
    /// the builder's methods then change what the URL said.
    ///
    /// # Errors
    /// [`lock_core::Error::InvalidArgument`] for a malformed URL or a
    /// parameter out of range.
    pub fn builder(url: &str) -> Result<RedisLuaBuilder> {
        Self::builder_from(RedisLuaConfig::from_url(url)?)
    }

    /// A builder for `config`.
    ///
    /// # Errors
    /// [`lock_core::Error::InvalidArgument`] when the config does not
    /// validate or its `tls_ca` file cannot be read.
    pub fn builder_from(config: RedisLuaConfig) -> Result<RedisLuaBuilder> {
        config.validate()?;
        let mut builder = if let Some(master) = &config.sentinel_master {
            // The data nodes' URL: any host, replaced by the primary's.
            let node = config.node_url(config.hosts.first().map_or("127.0.0.1:6379", String::as_str));
            RedisLuaBuilder::sentinel(config.sentinel_urls(), master.clone(), node)
        } else if config.cluster {
            RedisLuaBuilder::cluster(config.node_urls())
        } else {
            RedisLuaBuilder::url(config.node_urls().into_iter().next().unwrap_or_default())
        };
        builder = builder.settings(config.settings()?).fencing(config.fencing);
        #[cfg(feature = "tls")]
        if let Some(pem) = config.read_tls_ca()? {
            builder = builder.tls_root_certs(pem);
        }
        Ok(builder)
    }

    /// A builder on the application's own deadpool-redis pool (see
    /// [`RedisLuaBuilder::pool`]; the other client shapes:
    /// [`RedisLuaBuilder::connection`], [`RedisLuaBuilder::cluster_pool`],
    /// [`RedisLuaBuilder::cluster_connection`]).
    pub fn builder_with_client(pool: deadpool_redis::Pool) -> RedisLuaBuilder {
        RedisLuaBuilder::pool(pool)
    }
}

/// The facade's entry for the `redis…://` schemes.
#[derive(Debug, Clone, Copy, Default)]
pub struct RedisLuaConnector;

#[async_trait]
impl Connector for RedisLuaConnector {
    fn check(&self, url: &str, _: &SchemeTable) -> Result<()> {
        RedisLuaConfig::from_url(url).map(drop)
    }

    async fn connect(&self, url: &str, _: &SchemeTable) -> Result<Connected> {
        let config = RedisLuaConfig::from_url(url)?;
        let description = config.description();
        let backend = RedisLuaBackend::builder_from(config)?
            .build()
            .await
            .map_err(|e| in_context(e, &description))?;
        Ok(Connected::full(Arc::new(backend), description))
    }
}
