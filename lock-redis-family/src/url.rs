//! The URL grammar both Redis-family backends read —
//! `redis://[user:pass@]host[:port][/db][?…]` and its TLS, cluster and
//! Sentinel forms — into one settings struct; each backend crate wraps it in its own
//! config type with its own schemes (`RedisLuaConfig`, `TairConfig`).

use std::path::PathBuf;
use std::time::Duration;

use lock_core::raw::{
    UrlParts, parse_bool, parse_duration, parse_host_port, parse_number, percent_decode, unknown_parameter,
};
use lock_core::{Error, ReplicaAck, Result};

use crate::settings::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT, MAX_ACK_CONNECTIONS, Settings};

/// Port used when a host names none.
pub const DEFAULT_PORT: u16 = 6379;
/// Port used when a sentinel's host names none.
pub const DEFAULT_SENTINEL_PORT: u16 = 26379;

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
    "sentinel_username",
    "sentinel_password",
];

/// What tells the two backends' URLs apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flavor {
    /// `redis` or `tair`: the plain scheme; `…s` is TLS, `…+cluster` a
    /// cluster, `…+sentinel` a primary found through Redis Sentinel.
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
    /// The six schemes: plain, TLS, cluster, TLS cluster, Sentinel, TLS
    /// Sentinel.
    pub fn schemes(&self) -> [String; 6] {
        let b = self.base;
        [
            b.to_owned(),
            format!("{b}s"),
            format!("{b}+cluster"),
            format!("{b}s+cluster"),
            format!("{b}+sentinel"),
            format!("{b}s+sentinel"),
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
    /// Redis Sentinel (`…+sentinel://S1,S2/NAME`): the name the sentinels
    /// monitor the primary under; [`FamilyConfig::hosts`] are then the
    /// sentinels' (default port [`DEFAULT_SENTINEL_PORT`]).
    pub sentinel_master: Option<String>,
    /// `host:port`, at least one (one unless a cluster or the sentinels).
    pub hosts: Vec<String>,
    /// `user:password` as written (percent-encoded); never printed. The
    /// data nodes' credentials, also through Sentinel.
    user_info: Option<String>,
    /// `sentinel_username` and `sentinel_password`, decoded: the
    /// sentinels' own credentials; never printed.
    sentinel_username: Option<String>,
    sentinel_password: Option<String>,
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
            sentinel_master: None,
            hosts: vec![format!("127.0.0.1:{DEFAULT_PORT}")],
            user_info: None,
            sentinel_username: None,
            sentinel_password: None,
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
        let [plain, tls, cluster, tls_cluster, sentinel, tls_sentinel] = flavor.schemes();
        let also = flavor.also;
        let alias = |suffix: &str| !also.is_empty() && scheme == format!("{also}{suffix}");
        let (is_tls, is_cluster, is_sentinel) = match scheme {
            s if s == plain || alias("") => (false, false, false),
            s if s == tls || alias("s") => (true, false, false),
            s if s == cluster || alias("+cluster") => (false, true, false),
            s if s == tls_cluster || alias("s+cluster") => (true, true, false),
            s if s == sentinel || alias("+sentinel") => (false, false, true),
            s if s == tls_sentinel || alias("s+sentinel") => (true, false, true),
            _ => {
                return Err(Error::invalid(format!(
                    "{scheme}:// is not a {} URL: use {plain}://, {tls}://, {cluster}://, {tls_cluster}://, \
                     {sentinel}:// or {tls_sentinel}://",
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
                match (is_cluster, is_sentinel) {
                    (true, _) => "[,HOST[:PORT]…]",
                    (_, true) => "[,HOST[:PORT]…]/MASTER_NAME (the sentinels)",
                    _ => "",
                }
            )));
        }
        let port = if is_sentinel {
            DEFAULT_SENTINEL_PORT
        } else {
            DEFAULT_PORT
        };
        let hosts = parts
            .hosts
            .split(',')
            .map(|h| parse_host_port(scheme, h, port))
            .collect::<Result<Vec<_>>>()?;
        if !is_cluster && !is_sentinel && hosts.len() > 1 {
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
        let mut path = parts.path.trim_start_matches('/');
        if is_sentinel {
            let (name, db) = path.split_once('/').unwrap_or((path, ""));
            config.sentinel_master = Some(parse_master_name(scheme, name)?);
            path = db;
        }
        match path {
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
        let s = if self.tls { "s" } else { "" };
        match (self.cluster, self.sentinel_master.is_some()) {
            (true, _) => format!("{b}{s}+cluster"),
            (false, true) => format!("{b}{s}+sentinel"),
            (false, false) => format!("{b}{s}"),
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
            "sentinel_username" => self.sentinel_username = Some(value.to_owned()),
            "sentinel_password" => self.sentinel_password = Some(value.to_owned()),
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
        let sentinel = self.sentinel_master.is_some();
        let many = self.cluster || sentinel;
        if self.hosts.is_empty() || (!many && self.hosts.len() > 1) {
            return Err(Error::invalid(format!(
                "{scheme}:// needs one host{}, got {}",
                if many { " or more" } else { "" },
                self.hosts.len()
            )));
        }
        if let Some(name) = &self.sentinel_master {
            if self.cluster {
                return Err(Error::invalid(
                    "a URL is either a cluster or Sentinel's: set cluster or sentinel_master, not both",
                ));
            }
            parse_master_name(&scheme, name)?;
        } else if self.sentinel_username.is_some() || self.sentinel_password.is_some() {
            return Err(Error::invalid(format!(
                "sentinel_username and sentinel_password are for {}+sentinel:// URLs: remove them",
                self.flavor.base
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
        let master = self
            .sentinel_master
            .as_ref()
            .map(|m| format!("/{m}"))
            .unwrap_or_default();
        let db = self.db.map(|d| format!("/{d}")).unwrap_or_default();
        format!("{}://{user}{}{master}{db}", self.scheme(), self.hosts.join(","))
    }

    /// Sets the credentials (`user:password`, percent-encoded as in a URL;
    /// `:password` for a password alone).
    pub fn set_user_info(&mut self, user_info: Option<String>) {
        self.user_info = user_info;
    }

    /// Sets the sentinels' own credentials (decoded; `None` for none).
    pub fn set_sentinel_credentials(&mut self, username: Option<String>, password: Option<String>) {
        self.sentinel_username = username;
        self.sentinel_password = password;
    }

    /// The sentinels' user name and password (`sentinel_username`,
    /// `sentinel_password`), decoded.
    pub fn sentinel_credentials(&self) -> (Option<&str>, Option<&str>) {
        (self.sentinel_username.as_deref(), self.sentinel_password.as_deref())
    }

    /// The data nodes' user name and password, decoded (`None` without
    /// credentials; an empty user for a password alone).
    pub fn credentials_decoded(&self) -> Option<(String, String)> {
        let info = self.user_info.as_deref()?;
        Some(match info.split_once(':') {
            Some((user, password)) => (percent_decode(user), percent_decode(password)),
            None => (String::new(), percent_decode(info)),
        })
    }

    fn credentials(&self) -> String {
        self.user_info.as_ref().map(|u| format!("{u}@")).unwrap_or_default()
    }

    /// One `redis[s]://[user:pass@]host:port[/db]` URL per host, as
    /// redis-rs takes them (through Sentinel: [`FamilyConfig::node_url`]
    /// and [`FamilyConfig::sentinel_urls`]).
    pub fn node_urls(&self) -> Vec<String> {
        self.hosts.iter().map(|h| self.node_url(h)).collect()
    }

    /// The `redis[s]://[user:pass@]host:port[/db]` URL of the data node at
    /// `host` (`name:port`), with the data nodes' credentials and database.
    pub fn node_url(&self, host: &str) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let db = self.db.map(|d| format!("/{d}")).unwrap_or_default();
        format!("{scheme}://{}{host}{db}", self.credentials())
    }

    /// One `redis[s]://[user:pass@]host:port` URL per sentinel, with the
    /// sentinels' credentials (`sentinel_username`, `sentinel_password`).
    pub fn sentinel_urls(&self) -> Vec<String> {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let user = self
            .sentinel_username
            .as_deref()
            .map(percent_encode)
            .unwrap_or_default();
        let credentials = match &self.sentinel_password {
            Some(p) => format!("{user}:{}@", percent_encode(p)),
            None if !user.is_empty() => format!("{user}@"),
            None => String::new(),
        };
        self.hosts
            .iter()
            .map(|h| format!("{scheme}://{credentials}{h}"))
            .collect()
    }

    /// The single URL fred takes: `redis[s][-cluster|-sentinel]://…?node=h:p…`
    /// (through Sentinel the hosts are the sentinels', with
    /// `sentinelServiceName` and the sentinels' own credentials, which
    /// fred reads with its `sentinel-auth` feature).
    pub fn fred_url(&self) -> String {
        let tls = if self.tls { "s" } else { "" };
        let topology = match (self.cluster, self.sentinel_master.is_some()) {
            (true, _) => "-cluster",
            (false, true) => "-sentinel",
            (false, false) => "",
        };
        let (first, others) = self.hosts.split_first().map_or(("", &[][..]), |(f, o)| (f.as_str(), o));
        let db = self.db.map(|d| format!("/{d}")).unwrap_or_default();
        let mut query: Vec<String> = others.iter().map(|h| format!("node={h}")).collect();
        if let Some(name) = &self.sentinel_master {
            query.push(format!("sentinelServiceName={}", percent_encode(name)));
            if let Some(user) = &self.sentinel_username {
                query.push(format!("sentinelUsername={}", percent_encode(user)));
            }
            if let Some(password) = &self.sentinel_password {
                query.push(format!("sentinelPassword={}", percent_encode(password)));
            }
        }
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{}", query.join("&"))
        };
        format!("redis{tls}{topology}://{}{first}{db}{query}", self.credentials())
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

/// A master name as Sentinel knows it: percent-decoded, not empty, no
/// spaces or control characters.
fn parse_master_name(scheme: &str, text: &str) -> Result<String> {
    let name = percent_decode(text);
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control() || c == '/') {
        return Err(Error::invalid(format!(
            "{scheme}:// needs the name the sentinels monitor the primary under: write \
             {scheme}://SENTINEL[:PORT][,SENTINEL[:PORT]…]/MASTER_NAME[/DB] (e.g. /mymaster)"
        )));
    }
    Ok(name)
}

/// `text` with everything but unreserved characters percent-encoded (for
/// credentials in a URL's authority).
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn parse_db(scheme: &str, text: &str) -> Result<u32> {
    text.parse().map_err(|_| {
        Error::invalid(format!(
            "{scheme}:// database `{text}` is not a number: write /N or db=N (e.g. /0 to /{})",
            u32::MAX
        ))
    })
}

#[cfg(test)]
#[path = "url_tests.rs"]
mod tests;
