//! `memory://`: the configuration contract for the in-process backend,
//! which has nothing to configure.

use std::sync::Arc;

use lock_core::raw::{BackendConfig, Connected, Connector, SchemeTable, UrlParts, async_trait, unknown_parameter};
use lock_core::{Error, Result};

use crate::MemoryBackend;

/// The configuration of a [`MemoryBackend`]: `memory://`, no parameters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryConfig {}

impl BackendConfig for MemoryConfig {
    const SCHEMES: &'static [&'static str] = &["memory"];
    const PARAMS: &'static [&'static str] = &[];

    fn from_url(url: &str) -> Result<Self> {
        // A password with an unencoded `/`, `?` or `#` can be cut into what
        // a message quotes as a host or a value: hidden here.
        Self::parse_url(url).map_err(|e| lock_core::raw::hide_quoted_url_text(e, url))
    }
    fn set(&mut self, key: &str, _value: &str) -> Result<()> {
        Err(unknown_parameter("memory", key, Self::PARAMS))
    }

    fn validate(&self) -> Result<()> {
        Ok(())
    }

    fn description(&self) -> String {
        "memory://".to_owned()
    }
}

impl MemoryConfig {
    /// [`BackendConfig::from_url`] before its errors' quoted URL text is
    /// hidden.
    fn parse_url(url: &str) -> Result<Self> {
        let parts = UrlParts::parse(url, &[])?;
        if parts.scheme != "memory" {
            return Err(Error::invalid(format!("{}:// is not memory://", parts.scheme)));
        }
        if parts.user_info.is_some() || !parts.hosts.is_empty() || !matches!(parts.path.as_str(), "" | "/") {
            return Err(Error::invalid(
                "memory:// takes no host or path: the backend lives in this process; write just memory://",
            ));
        }
        let mut config = MemoryConfig::default();
        for (name, value) in &parts.params {
            config.set(name, value)?;
        }
        Ok(config)
    }
}

/// Builds a [`MemoryBackend`] (nothing to set: the same vocabulary as the
/// other backends).
#[derive(Debug, Default)]
#[must_use = "call build() to get the backend"]
pub struct MemoryBuilder {
    _config: MemoryConfig,
}

impl MemoryBuilder {
    /// The backend.
    ///
    /// # Errors
    /// None today; the `Result` keeps the builders' one signature.
    ///
    /// # Cancel safety
    /// Nothing to cancel: the backend lives in this process.
    pub async fn build(self) -> Result<MemoryBackend> {
        Ok(MemoryBackend::new())
    }
}

impl MemoryBackend {
    /// A backend for `url` (`memory://`), as the other backends connect.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for anything but `memory://`.
    ///
    /// # Cancel safety
    /// Nothing to cancel.
    pub async fn connect(url: &str) -> Result<MemoryBackend> {
        Self::builder(url)?.build().await
    }

    /// A builder for `url` (`memory://`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for anything but `memory://`.
    pub fn builder(url: &str) -> Result<MemoryBuilder> {
        Ok(Self::builder_from(MemoryConfig::from_url(url)?))
    }

    /// A builder for `config`.
    pub fn builder_from(config: MemoryConfig) -> MemoryBuilder {
        MemoryBuilder { _config: config }
    }
}

/// The facade's entry for `memory://`.
#[derive(Debug, Clone, Copy, Default)]
pub struct MemoryConnector;

#[async_trait]
impl Connector for MemoryConnector {
    fn check(&self, url: &str, _: &SchemeTable) -> Result<()> {
        MemoryConfig::from_url(url).map(drop)
    }

    async fn connect(&self, url: &str, _: &SchemeTable) -> Result<Connected> {
        let config = MemoryConfig::from_url(url)?;
        let backend = Arc::new(MemoryBackend::builder_from(config.clone()).build().await?);
        Ok(Connected::full(backend, config.description()).in_process(true))
    }
}
