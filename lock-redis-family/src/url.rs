//! The URL grammar both Redis-family backends read —
//! `redis://[user:pass@]host[:port][/db][?…]` and its TLS and cluster forms
//! — into one settings struct; each backend crate wraps it in its own
//! config type with its own schemes (`RedisLuaConfig`, `TairConfig`).

use std::path::PathBuf;
use std::time::Duration;

use lock_core::raw::{UrlParts, parse_bool, parse_duration, parse_host_port, parse_number, unknown_parameter};
use lock_core::{Error, ReplicaAck, Result};

use crate::settings::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT, MAX_ACK_CONNECTIONS, Settings};

/// Port used when a host names none.
pub const DEFAULT_PORT: u16 = 6379;

/// Longest `replica_ack_timeout` ([`ReplicaAck::validate`]'s bound).
const MAX_REPLICA_ACK_TIMEOUT: Duration = Duration::from_secs(3600);

/// The query parameters of every Redis-family scheme, named after the
/// builder methods they set.
pub const FAMILY_PARAMS: &[&str] = &[
    "connect_timeout",
    "response_timeout",
    "fencing",
    "release_notifications",
    "replica_ack",
    "replica_ack_timeout",
    "ack_connections",
    "db",
    "tls_ca",
];

/// What tells the two backends' URLs apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flavor {
    /// `redis` or `tair`: the plain scheme; `…s` is TLS, `…+cluster` a
    /// cluster.
    pub base: &'static str,
    /// Whether this build of the backend crate has TLS.
    pub tls_compiled: bool,
    /// The backend crate, for the feature hint.
    pub crate_name: &'static str,
    /// The backend's default `ack_connections`.
    pub default_ack_connections: usize,
    /// Another base the backend's own `connect` also reads (the Tair
    /// backend reads `redis://` URLs too: a Tair server speaks the Redis
    /// protocol); empty for none. The facade maps each scheme to one crate.
    pub also: &'static str,
}

impl Flavor {
    /// The four schemes: plain, TLS, cluster, TLS cluster.
    pub fn schemes(&self) -> [String; 4] {
        let b = self.base;
        [
            b.to_owned(),
            format!("{b}s"),
            format!("{b}+cluster"),
            format!("{b}s+cluster"),
        ]
    }
}

/// A Redis-family URL, parsed and bounded, with the defaults for what it
/// leaves out.
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct FamilyConfig {
    /// TLS (`rediss://`, `tairs://`, …).
    pub tls: bool,
    /// A Redis Cluster (`…+cluster://`), seeded by [`FamilyConfig::hosts`].
    pub cluster: bool,
    /// `host:port`, at least one (one unless a cluster).
    pub hosts: Vec<String>,
    /// `user:password` as written (percent-encoded); never printed.
    user_info: Option<String>,
    /// The database (`/N` or `db=N`); a cluster has only 0.
    pub db: Option<u32>,
    /// `connect_timeout`: time to open a connection.
    pub connect_timeout: Duration,
    /// `response_timeout`: time to wait for each reply.
    pub response_timeout: Duration,
    /// `fencing`: issue fencing tokens.
    pub fencing: bool,
    /// `release_notifications`: `None` leaves them to the backend (on for
    /// one server, off on a cluster).
    pub release_notifications: Option<bool>,
    /// `replica_ack`: replicas that must acknowledge each write.
    pub replica_ack: Option<u32>,
    /// `replica_ack_timeout`: how long `WAIT` may block.
    pub replica_ack_timeout: Option<Duration>,
    /// `ack_connections`: connections kept for write + `WAIT` pairs.
    pub ack_connections: usize,
    /// `tls_ca`: a PEM file of trusted CA certificates (TLS only; the
    /// platform's roots otherwise).
    pub tls_ca: Option<PathBuf>,
    flavor: Flavor,
}

impl std::fmt::Debug for FamilyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FamilyConfig")
            .field("url", &self.description())
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("fencing", &self.fencing)
            .field("release_notifications", &self.release_notifications)
            .field("replica_ack", &self.replica_ack)
            .field("replica_ack_timeout", &self.replica_ack_timeout)
            .field("ack_connections", &self.ack_connections)
            .field("tls_ca", &self.tls_ca)
            .finish_non_exhaustive()
    }
}

impl FamilyConfig {
    /// The defaults: one server at `127.0.0.1:6379`.
    pub fn defaults(flavor: Flavor) -> Self {
        FamilyConfig {
            tls: false,
            cluster: false,
            hosts: vec![format!("127.0.0.1:{DEFAULT_PORT}")],
            user_info: None,
            db: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            fencing: false,
            release_notifications: None,
            replica_ack: None,
            replica_ack_timeout: None,
            ack_connections: flavor.default_ack_connections,
            tls_ca: None,
            flavor,
        }
    }

    /// Parses `url`, one of `flavor`'s schemes.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming what to fix; [`Error::Unsupported`]
    /// for a TLS scheme without the crate's `tls` feature.
    pub fn parse(url: &str, flavor: Flavor) -> Result<Self> {
        let parts = UrlParts::parse(url, &[])?;
        let scheme = parts.scheme.as_str();
        let [plain, tls, cluster, tls_cluster] = flavor.schemes();
        let also = flavor.also;
        let alias = |suffix: &str| !also.is_empty() && scheme == format!("{also}{suffix}");
        let (is_tls, is_cluster) = match scheme {
            s if s == plain || alias("") => (false, false),
            s if s == tls || alias("s") => (true, false),
            s if s == cluster || alias("+cluster") => (false, true),
            s if s == tls_cluster || alias("s+cluster") => (true, true),
            _ => {
                return Err(Error::invalid(format!(
                    "{scheme}:// is not a {} URL: use {plain}://, {tls}://, {cluster}:// or {tls_cluster}://",
                    flavor.crate_name
                )));
            }
        };
        if is_tls && !flavor.tls_compiled {
            return Err(Error::Unsupported {
                backend: flavor.crate_name.to_owned(),
                what: format!(
                    "{scheme}:// URLs: enable the Cargo feature `tls` of {}",
                    flavor.crate_name
                ),
            });
        }
        if parts.hosts.is_empty() {
            return Err(Error::invalid(format!(
                "{scheme}:// URL has no host: write {scheme}://HOST[:PORT]{}",
                if is_cluster { "[,HOST[:PORT]…]" } else { "" }
            )));
        }
        let hosts = parts
            .hosts
            .split(',')
            .map(|h| parse_host_port(scheme, h, DEFAULT_PORT))
            .collect::<Result<Vec<_>>>()?;
        if !is_cluster && hosts.len() > 1 {
            return Err(Error::invalid(format!(
                "{scheme}:// takes one host, got {}: for a cluster seeded with several nodes use {scheme}+cluster://",
                hosts.len()
            )));
        }
        let mut config = FamilyConfig {
            tls: is_tls,
            cluster: is_cluster,
            hosts,
            user_info: parts.user_info.clone(),
            ..FamilyConfig::defaults(flavor)
        };
        match parts.path.trim_start_matches('/') {
            "" => {}
            n => config.db = Some(parse_db(scheme, n)?),
        }
        for (name, value) in &parts.params {
            config.set(name, value)?;
        }
        config.validate()?;
        Ok(config)
    }

    /// The scheme this config stands for.
    pub fn scheme(&self) -> String {
        let b = self.flavor.base;
        match (self.tls, self.cluster) {
            (false, false) => b.to_owned(),
            (true, false) => format!("{b}s"),
            (false, true) => format!("{b}+cluster"),
            (true, true) => format!("{b}s+cluster"),
        }
    }

    /// Sets one parameter by name (see [`FAMILY_PARAMS`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown name or a value out of its
    /// range.
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        match name {
            "connect_timeout" => self.connect_timeout = parse_duration(name, value)?,
            "response_timeout" => self.response_timeout = parse_duration(name, value)?,
            "fencing" => self.fencing = parse_bool(name, value)?,
            "release_notifications" => self.release_notifications = Some(parse_bool(name, value)?),
            "replica_ack" => self.replica_ack = Some(parse_number(name, value, 1, u64::from(u32::MAX))?),
            "replica_ack_timeout" => self.replica_ack_timeout = Some(parse_duration(name, value)?),
            "ack_connections" => {
                self.ack_connections = parse_number(name, value, 1, MAX_ACK_CONNECTIONS as u64)?;
            }
            "db" => {
                let scheme = self.scheme();
                let n = parse_db(&scheme, value)?;
                if self.db.is_some_and(|d| d != n) {
                    return Err(Error::invalid(format!(
                        "{scheme}:// URL names two databases (path and db=): keep one"
                    )));
                }
                self.db = Some(n);
            }
            "tls_ca" => self.tls_ca = Some(PathBuf::from(value)),
            other => return Err(unknown_parameter(&self.scheme(), other, FAMILY_PARAMS)),
        }
        Ok(())
    }

    /// The checks across parameters, and the bounds of values set on the
    /// fields directly.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the parameters.
    pub fn validate(&self) -> Result<()> {
        let scheme = self.scheme();
        if self.hosts.is_empty() || (!self.cluster && self.hosts.len() > 1) {
            return Err(Error::invalid(format!(
                "{scheme}:// needs one host{}, got {}",
                if self.cluster { " or more" } else { "" },
                self.hosts.len()
            )));
        }
        if self.tls_ca.is_some() && !self.tls {
            return Err(Error::invalid(format!(
                "tls_ca is for TLS URLs: use {}s:// (or drop tls_ca)",
                self.flavor.base
            )));
        }
        if self.cluster && self.db.is_some_and(|d| d != 0) {
            return Err(Error::invalid(format!(
                "{scheme}:// cannot select a database: a Redis Cluster has only database 0"
            )));
        }
        if self.cluster && self.release_notifications == Some(true) {
            return Err(Error::invalid(format!(
                "{scheme}:// has no release notifications (they need one standalone server): remove \
                 release_notifications=true"
            )));
        }
        self.settings().map(drop)
    }

    /// The replica acknowledgement asked for, if any.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when only one of `replica_ack` and
    /// `replica_ack_timeout` is set, or either is out of range.
    pub fn replica_ack(&self) -> Result<Option<ReplicaAck>> {
        match (self.replica_ack, self.replica_ack_timeout) {
            (None, None) => Ok(None),
            (Some(n), Some(t)) => {
                if !(Duration::from_millis(1)..=MAX_REPLICA_ACK_TIMEOUT).contains(&t) {
                    return Err(Error::invalid(format!(
                        "replica_ack_timeout must be from 1ms to 1h (WAIT with 0 blocks forever), got {t:?}"
                    )));
                }
                let ack = ReplicaAck::new(n, t);
                ack.validate()
                    .map_err(|e| Error::invalid(format!("replica_ack={n}, replica_ack_timeout={t:?}: {e}")))?;
                Ok(Some(ack))
            }
            (Some(_), None) => Err(Error::invalid(
                "replica_ack=N needs replica_ack_timeout=D too (how long WAIT may block, e.g. replica_ack_timeout=100ms)",
            )),
            (None, Some(_)) => Err(Error::invalid(
                "replica_ack_timeout is set without replica_ack=N (the number of replicas that must acknowledge)",
            )),
        }
    }

    /// The builder settings this config stands for, checked.
    ///
    /// # Errors
    /// As [`FamilyConfig::replica_ack`] and [`Settings::check`].
    pub fn settings(&self) -> Result<Settings> {
        let settings = Settings {
            connect_timeout: self.connect_timeout,
            response_timeout: self.response_timeout,
            replica_ack: self.replica_ack()?,
            ack_connections: self.ack_connections,
            release_notifications: self.release_notifications,
        };
        settings.check()?;
        Ok(settings)
    }

    /// The URL without its password (user names are kept).
    pub fn description(&self) -> String {
        let user = match &self.user_info {
            Some(info) => match info.split_once(':') {
                Some((user, _)) if !user.contains(['/', '?', '#', '@']) => format!("{user}:***@"),
                _ => "***@".to_owned(), // a lone token is a password
            },
            None => String::new(),
        };
        let db = self.db.map(|d| format!("/{d}")).unwrap_or_default();
        format!("{}://{user}{}{db}", self.scheme(), self.hosts.join(","))
    }

    /// Sets the credentials (`user:password`, percent-encoded as in a URL;
    /// `:password` for a password alone).
    pub fn set_user_info(&mut self, user_info: Option<String>) {
        self.user_info = user_info;
    }

    fn credentials(&self) -> String {
        self.user_info.as_ref().map(|u| format!("{u}@")).unwrap_or_default()
    }

    /// One `redis[s]://[user:pass@]host:port[/db]` URL per host, as
    /// redis-rs takes them.
    pub fn node_urls(&self) -> Vec<String> {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let db = self.db.map(|d| format!("/{d}")).unwrap_or_default();
        self.hosts
            .iter()
            .map(|h| format!("{scheme}://{}{h}{db}", self.credentials()))
            .collect()
    }

    /// The single URL fred takes: `redis[s][-cluster]://…?node=h:p…`.
    pub fn fred_url(&self) -> String {
        let scheme = match (self.tls, self.cluster) {
            (false, false) => "redis",
            (true, false) => "rediss",
            (false, true) => "redis-cluster",
            (true, true) => "rediss-cluster",
        };
        let (first, others) = self.hosts.split_first().map_or(("", &[][..]), |(f, o)| (f.as_str(), o));
        let db = self.db.map(|d| format!("/{d}")).unwrap_or_default();
        let nodes: Vec<String> = others.iter().map(|h| format!("node={h}")).collect();
        let query = if nodes.is_empty() {
            String::new()
        } else {
            format!("?{}", nodes.join("&"))
        };
        format!("{scheme}://{}{first}{db}{query}", self.credentials())
    }

    /// The `tls_ca` file's contents, if set.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the file cannot be read.
    pub fn read_tls_ca(&self) -> Result<Option<Vec<u8>>> {
        let Some(path) = &self.tls_ca else {
            return Ok(None);
        };
        std::fs::read(path).map(Some).map_err(|e| {
            Error::invalid(format!(
                "cannot read tls_ca file {}: {e}: point tls_ca at a PEM file of CA certificates",
                path.display()
            ))
        })
    }
}

fn parse_db(scheme: &str, text: &str) -> Result<u32> {
    text.parse().map_err(|_| {
        Error::invalid(format!(
            "{scheme}:// database `{text}` is not a number: write /N or db=N (e.g. /0 to /{})",
            u32::MAX
        ))
    })
}

/// Implements the configuration contract for a backend crate's config type
/// (a newtype over [`FamilyConfig`]): `BackendConfig`, `Default`, `Deref`,
/// and `serde` where the crate enables it. A macro, as the two crates'
/// types must be their own (the contract's trait is foreign to both).
#[macro_export]
macro_rules! family_config {
    ($config:ident, $flavor:expr, [$($scheme:literal),+]) => {
        impl ::std::default::Default for $config {
            fn default() -> Self {
                $config($crate::url::FamilyConfig::defaults($flavor))
            }
        }

        impl ::std::ops::Deref for $config {
            type Target = $crate::url::FamilyConfig;
            fn deref(&self) -> &Self::Target {
                &self.0
            }
        }

        impl ::std::ops::DerefMut for $config {
            fn deref_mut(&mut self) -> &mut Self::Target {
                &mut self.0
            }
        }

        impl $crate::__private::lock_core::raw::BackendConfig for $config {
            const SCHEMES: &'static [&'static str] = &[$($scheme),+];
            const PARAMS: &'static [&'static str] = $crate::url::FAMILY_PARAMS;

            fn from_url(url: &str) -> $crate::__private::lock_core::Result<Self> {
                $crate::url::FamilyConfig::parse(url, $flavor)
                    .map($config)
                    .map_err(|e| $crate::__private::lock_core::raw::hide_quoted_url_text(e, url))
            }

            fn set(&mut self, key: &str, value: &str) -> $crate::__private::lock_core::Result<()> {
                self.0.set(key, value)
            }

            fn validate(&self) -> $crate::__private::lock_core::Result<()> {
                self.0.validate()
            }

            fn description(&self) -> String {
                self.0.description()
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    const LUA: Flavor = Flavor {
        base: "redis",
        tls_compiled: false,
        crate_name: "lock-redis-lua",
        default_ack_connections: 16,
        also: "",
    };

    #[test]
    fn urls_parse_into_bounded_settings() {
        let c = FamilyConfig::parse("redis://u:p%2Fw@h:7/3?fencing=true&response_timeout=500ms", LUA).ok();
        let c = c.as_ref();
        assert_eq!(c.map(|c| c.hosts.clone()), Some(vec!["h:7".to_owned()]));
        assert_eq!(c.and_then(|c| c.db), Some(3));
        assert_eq!(c.map(|c| c.fencing), Some(true));
        assert_eq!(c.map(|c| c.description()), Some("redis://u:***@h:7/3".to_owned()));
        assert_eq!(c.map(|c| c.node_urls()), Some(vec!["redis://u:p%2Fw@h:7/3".to_owned()]));
        for bad in [
            "redis://h?ack_connections=0",
            "redis://h?ack_connections=18446744073709551615",
            "redis://h?response_timeout=18446744073709551615s",
            "redis://h?replica_ack=1",
            "redis://h?fencing=true&fencing=false",
            "redis://h/1?db=2",
            "redis+cluster://a,b/1",
            "redis://a,b",
            "rediss://h",
            "redis://h?tls_ca=x.pem",
            "redis://h?nope=1",
        ] {
            assert!(FamilyConfig::parse(bad, LUA).is_err(), "{bad}");
        }
    }

    #[test]
    fn hosts_ports_and_databases_are_normalised() {
        let tair = Flavor {
            base: "tair",
            tls_compiled: true,
            crate_name: "lock-tair",
            default_ack_connections: 2,
            also: "redis",
        };
        let url = |u: &str, f: Flavor| FamilyConfig::parse(u, f).map_err(|e| e.to_string());
        assert_eq!(
            url("redis://u:p@example.com/3?connect_timeout=250ms", LUA).map(|c| (c.node_urls(), c.connect_timeout)),
            Ok((
                vec!["redis://u:p@example.com:6379/3".to_owned()],
                Duration::from_millis(250)
            ))
        );
        assert_eq!(
            url("tair+cluster://[::1]:7000,b", tair).map(|c| c.fred_url()),
            Ok("redis-cluster://[::1]:7000?node=b:6379".to_owned())
        );
        assert_eq!(
            url("tairs://h?db=4", tair).map(|c| c.fred_url()),
            Ok("rediss://h:6379/4".to_owned())
        );
        // The Tair backend's own connect also reads redis:// URLs.
        assert_eq!(
            url("redis://h", tair).map(|c| c.description()),
            Ok("tair://h:6379".to_owned())
        );
    }
}
