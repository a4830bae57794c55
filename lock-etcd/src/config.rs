//! The configuration contract for `etcd://` URLs: [`EtcdConfig`], the
//! backend's `connect` / `builder` / `builder_from` /
//! `builder_with_client`, and [`EtcdConnector`] for the facade.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use lock_core::raw::{
    BackendConfig, Connected, Connector, SchemeTable, UrlParts, async_trait, in_context, parse_duration,
    parse_host_port, unknown_parameter,
};
use lock_core::{Error, Result};

use crate::builder::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_NAMESPACE, DEFAULT_RESPONSE_TIMEOUT};
use crate::{EtcdBackend, EtcdBuilder};

/// The etcd client port used when a host names none.
pub const DEFAULT_PORT: u16 = 2379;

/// The query parameters of `etcd://` and `etcds://`.
pub const ETCD_PARAMS: &[&str] = &["connect_timeout", "response_timeout", "namespace", "tls_ca"];

/// The configuration of an [`EtcdBackend`]: what an
/// `etcd://[user:password@]host[:port][,host[:port]…][?…]` (or `etcds://`
/// for TLS) URL says, with the defaults for what it leaves out. The user
/// and password are etcd's own (`etcdctl user add`), percent-encoded.
///
/// ```
/// use lock_core::raw::BackendConfig;
/// use lock_etcd::EtcdConfig;
///
/// let config = EtcdConfig::from_url("etcd://app:secret@a,b:2380?namespace=jobs/")?;
/// assert_eq!(config.hosts, ["a:2379", "b:2380"]);
/// assert_eq!(config.namespace, "jobs/");
/// assert_eq!(config.description(), "etcd://app:***@a:2379,b:2380");
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct EtcdConfig {
    /// TLS (`etcds://`).
    pub tls: bool,
    /// `host:port`, at least one.
    pub hosts: Vec<String>,
    /// User name and password, decoded; the password is never printed.
    user: Option<(String, String)>,
    /// `connect_timeout` (default 2 s).
    pub connect_timeout: Duration,
    /// `response_timeout` (default 2 s).
    pub response_timeout: Duration,
    /// `namespace`: the prefix of every key (default `verrou/`).
    pub namespace: String,
    /// `tls_ca`: a PEM file of trusted CA certificates (`etcds://` only;
    /// the platform's roots otherwise).
    pub tls_ca: Option<PathBuf>,
}

impl std::fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("url", &self.description())
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("namespace", &self.namespace)
            .field("tls_ca", &self.tls_ca)
            .finish_non_exhaustive()
    }
}

impl Default for EtcdConfig {
    fn default() -> Self {
        EtcdConfig {
            tls: false,
            hosts: vec![format!("127.0.0.1:{DEFAULT_PORT}")],
            user: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            namespace: DEFAULT_NAMESPACE.to_owned(),
            tls_ca: None,
        }
    }
}

impl EtcdConfig {
    /// Authenticate as `user` with `password`.
    pub fn set_user(&mut self, user: impl Into<String>, password: impl Into<String>) {
        self.user = Some((user.into(), password.into()));
    }

    fn scheme(&self) -> &'static str {
        if self.tls { "etcds" } else { "etcd" }
    }

    /// One endpoint per host, as etcd-client takes them.
    pub fn endpoints(&self) -> Vec<String> {
        let scheme = if self.tls { "https" } else { "http" };
        self.hosts.iter().map(|h| format!("{scheme}://{h}")).collect()
    }
}

impl BackendConfig for EtcdConfig {
    const SCHEMES: &'static [&'static str] = &["etcd", "etcds"];
    const PARAMS: &'static [&'static str] = ETCD_PARAMS;

    fn from_url(url: &str) -> Result<Self> {
        // A password with an unencoded `/`, `?` or `#` can be cut into what
        // a message quotes as a host or a value: hidden here.
        Self::parse_url(url).map_err(|e| lock_core::raw::hide_quoted_url_text(e, url))
    }
    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        match key {
            "connect_timeout" => self.connect_timeout = parse_duration(key, value)?,
            "response_timeout" => self.response_timeout = parse_duration(key, value)?,
            "namespace" => self.namespace = value.to_owned(),
            "tls_ca" => self.tls_ca = Some(PathBuf::from(value)),
            other => return Err(unknown_parameter(self.scheme(), other, ETCD_PARAMS)),
        }
        Ok(())
    }

    fn validate(&self) -> Result<()> {
        if self.hosts.is_empty() {
            return Err(Error::invalid("an etcd backend needs at least one host"));
        }
        if self.tls_ca.is_some() && !self.tls {
            return Err(Error::invalid("tls_ca is for TLS URLs: use etcds:// (or drop tls_ca)"));
        }
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
        Ok(())
    }

    fn description(&self) -> String {
        let user = self.user.as_ref().map(|(u, _)| format!("{u}:***@")).unwrap_or_default();
        format!("{}://{user}{}", self.scheme(), self.hosts.join(","))
    }
}

impl EtcdConfig {
    /// [`BackendConfig::from_url`] before its errors' quoted URL text is
    /// hidden.
    fn parse_url(url: &str) -> Result<Self> {
        let parts = UrlParts::parse(url, &[])?;
        let tls = match parts.scheme.as_str() {
            "etcd" => false,
            "etcds" => true,
            other => return Err(Error::invalid(format!("{other}:// is not etcd:// or etcds://"))),
        };
        if tls && !cfg!(feature = "tls") {
            return Err(Error::Unsupported {
                backend: crate::error::NAME.to_owned(),
                what: "etcds:// URLs: enable the Cargo feature `tls` of lock-etcd".to_owned(),
            });
        }
        let scheme = parts.scheme.as_str();
        if !matches!(parts.path.as_str(), "" | "/") {
            return Err(Error::invalid(format!(
                "{scheme}:// takes no path: write {scheme}://HOST[:PORT][,HOST[:PORT]…] (key prefix: namespace=)"
            )));
        }
        if parts.hosts.is_empty() {
            return Err(Error::invalid(format!(
                "{scheme}:// URL has no host: write {scheme}://HOST[:PORT][,HOST[:PORT]…]"
            )));
        }
        let hosts = parts
            .hosts
            .split(',')
            .map(|h| parse_host_port(scheme, h, DEFAULT_PORT))
            .collect::<Result<Vec<_>>>()?;
        let user = match parts.credentials() {
            None => None,
            Some((user, password))
                if !user.is_empty() && parts.user_info.as_deref().is_some_and(|i| i.contains(':')) =>
            {
                Some((user, password))
            }
            Some(_) => {
                return Err(Error::invalid(format!(
                    "{scheme}:// credentials must be USER:PASSWORD@ (etcd has no password-only login)"
                )));
            }
        };
        let mut config = EtcdConfig {
            tls,
            hosts,
            user,
            ..EtcdConfig::default()
        };
        for (name, value) in &parts.params {
            config.set(name, value)?;
        }
        config.validate()?;
        Ok(config)
    }
}

impl EtcdBackend {
    /// A backend on the members `url` names (with its parameters: see
    /// [`EtcdConfig`]).
    ///
    /// # Errors
    /// As [`EtcdBackend::builder`] and [`EtcdBuilder::build`].
    ///
    /// # Cancel safety
    /// As [`EtcdBuilder::build`].
    pub async fn connect(url: &str) -> Result<EtcdBackend> {
        Self::builder(url)?.build().await
    }

    /// A builder for `url` and its parameters (see [`EtcdConfig`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a malformed URL or a parameter out of
    /// range.
    pub fn builder(url: &str) -> Result<EtcdBuilder> {
        Self::builder_from(EtcdConfig::from_url(url)?)
    }

    /// A builder for `config`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the config does not validate or its
    /// `tls_ca` file cannot be read.
    pub fn builder_from(config: EtcdConfig) -> Result<EtcdBuilder> {
        config.validate()?;
        let mut builder = EtcdBuilder::new(config.endpoints())
            .connect_timeout(config.connect_timeout)
            .response_timeout(config.response_timeout)
            .namespace(config.namespace.clone());
        if let Some((user, password)) = &config.user {
            builder = builder.user(user.clone(), password.clone());
        }
        #[cfg(feature = "tls")]
        if config.tls {
            let mut tls = crate::TlsOptions::new().with_native_roots();
            if let Some(path) = &config.tls_ca {
                let pem = std::fs::read(path).map_err(|e| {
                    Error::invalid(format!(
                        "cannot read tls_ca file {}: {e}: point tls_ca at a PEM file of CA certificates",
                        path.display()
                    ))
                })?;
                tls = tls.ca_certificate(crate::Certificate::from_pem(pem));
            }
            builder = builder.tls(tls);
        }
        Ok(builder)
    }

    /// A builder on the application's own etcd client (its endpoints,
    /// credentials and TLS are its own; see [`EtcdBuilder::client`]).
    pub fn builder_with_client(client: etcd_client::Client) -> EtcdBuilder {
        EtcdBuilder::client(client)
    }
}

/// The facade's entry for `etcd://` and `etcds://`.
#[derive(Debug, Clone, Copy, Default)]
pub struct EtcdConnector;

#[async_trait]
impl Connector for EtcdConnector {
    fn check(&self, url: &str, _: &SchemeTable) -> Result<()> {
        EtcdConfig::from_url(url).map(drop)
    }

    async fn connect(&self, url: &str, _: &SchemeTable) -> Result<Connected> {
        let config = EtcdConfig::from_url(url)?;
        let description = config.description();
        let backend = EtcdBackend::builder_from(config)?
            .build()
            .await
            .map_err(|e| in_context(e, &description))?;
        Ok(Connected::full(Arc::new(backend), description))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(url: &str) -> String {
        match EtcdConfig::from_url(url) {
            Err(Error::InvalidArgument(m)) => m,
            other => format!("not InvalidArgument: {other:?}"),
        }
    }

    #[test]
    fn etcd_urls_parse() {
        let t = EtcdConfig::from_url("etcd://u:p%40ss@h1,h2:2380,[::1]?namespace=app/&response_timeout=2s");
        let Ok(t) = t else {
            unreachable!("{t:?}");
        };
        assert_eq!(t.hosts, ["h1:2379", "h2:2380", "[::1]:2379"]);
        assert!(!t.tls);
        assert_eq!(t.user, Some(("u".to_owned(), "p@ss".to_owned())));
        assert_eq!(t.namespace, "app/");
        assert_eq!(t.description(), "etcd://u:***@h1:2379,h2:2380,[::1]:2379");
        assert!(!format!("{t:?}").contains("p@ss"), "no password in Debug");
        assert!(invalid("etcd://h?tls_ca=/ca.pem").contains("etcds://"));
        assert!(invalid("etcd://h?fencing=true").contains("response_timeout"));
        assert!(invalid("etcd://").contains("no host"));
        assert!(invalid("etcd://h/db").contains("no path"));
        assert!(invalid("etcd://:secret@h").contains("USER:PASSWORD"));
        assert!(invalid("etcd://h:0").contains("port"));
        assert!(invalid("etcd://h?connect_timeout=1s&connect_timeout=2s").contains("twice"));
        let tls = EtcdConfig::from_url("etcds://h?tls_ca=/ca.pem");
        if cfg!(feature = "tls") {
            assert!(tls.is_ok_and(|t| t.tls));
        } else {
            assert!(matches!(tls, Err(Error::Unsupported { what, .. }) if what.contains("`tls`")));
        }
    }

    #[test]
    fn defaults_are_the_builders() {
        let c = EtcdConfig::default();
        assert_eq!(c.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(c.response_timeout, DEFAULT_RESPONSE_TIMEOUT);
        assert_eq!(c.namespace, DEFAULT_NAMESPACE);
    }
}
