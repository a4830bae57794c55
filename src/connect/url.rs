//! Parsing a connect URL into a [`Target`]: scheme, hosts, credentials and
//! the query parameters of the one Redis-family vocabulary. Nothing here
//! connects, and no message quotes a password.
//!
//! The parser knows every scheme whatever the features, so that it can name
//! the missing feature; what builds a disabled backend is compiled out.
#![cfg_attr(
    not(all(
        feature = "memory",
        feature = "redis-lua-tls",
        feature = "tair-tls",
        feature = "redlock",
        feature = "postgres"
    )),
    allow(dead_code)
)]

use std::path::PathBuf;
use std::time::Duration;

use lock_core::raw::redact_url;
use lock_core::{Error, MAX_TIMEOUT, ReplicaAck, Result};

/// Port used when a host names none.
pub const DEFAULT_PORT: u16 = 6379;

/// The schemes [`crate::connect()`] understands, for error messages.
pub const SCHEMES: &str = "memory://, redis://, rediss://, redis+cluster://, rediss+cluster://, tair://, tairs://, \
                           tair+cluster://, tairs+cluster://, redlock://, postgres://, postgresql://, etcd://, etcds://";

/// The query parameters shared by the Redis-family schemes (`redis…://` and
/// `tair…://`), named after the builder methods they set.
pub const FAMILY_PARAMS: &str = "connect_timeout, response_timeout, fencing, release_notifications, replica_ack, \
                                 replica_ack_timeout, ack_connections, db, tls_ca";

/// The query parameters of `redlock://`.
pub const REDLOCK_PARAMS: &str = "node (repeated), quorum, node_timeout, drift_factor";

/// Most `ack_connections` the Redis-family builders take (the same bound on
/// both; with neither compiled in no Redis-family URL gets this far).
#[cfg(feature = "redis-lua")]
const MAX_ACK_CONNECTIONS: usize = lock_redis_lua::MAX_ACK_CONNECTIONS;
#[cfg(all(feature = "tair", not(feature = "redis-lua")))]
const MAX_ACK_CONNECTIONS: usize = lock_tair::MAX_ACK_CONNECTIONS;
#[cfg(not(any(feature = "redis-lua", feature = "tair")))]
const MAX_ACK_CONNECTIONS: usize = 1;

/// Longest `replica_ack_timeout` ([`ReplicaAck::validate`]'s bound).
const MAX_REPLICA_ACK_TIMEOUT: Duration = Duration::from_secs(3600);

/// Which backend family a Redis-protocol URL selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    /// `redis://`: the Lua-script backend.
    RedisLua,
    /// `tair://`: the native TairString backend.
    Tair,
}

/// A parsed connect URL.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    Memory,
    Server(Server),
    Redlock(RedlockTarget),
    #[cfg(feature = "postgres")]
    Postgres(super::postgres::PostgresTarget),
    // Parsed without the feature too, so the error can name the feature.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    Etcd(super::etcd::EtcdTarget),
}

/// A Redis-protocol server or cluster.
#[derive(Clone)]
pub(crate) struct Server {
    pub family: Family,
    pub tls: bool,
    pub cluster: bool,
    /// `host:port`, at least one.
    pub hosts: Vec<String>,
    /// `user:password` as written (percent-encoded); never printed.
    pub userinfo: Option<String>,
    pub db: Option<u32>,
    pub options: FamilyOptions,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// The options every Redis-family builder takes under the same names.
#[derive(Debug, Clone, Default)]
pub(crate) struct FamilyOptions {
    pub connect_timeout: Option<Duration>,
    pub response_timeout: Option<Duration>,
    pub fencing: Option<bool>,
    pub release_notifications: Option<bool>,
    pub replica_ack: Option<u32>,
    pub replica_ack_timeout: Option<Duration>,
    pub ack_connections: Option<usize>,
    pub tls_ca: Option<PathBuf>,
}

impl FamilyOptions {
    /// The replica acknowledgement asked for, if any.
    pub(crate) fn replica_ack(&self) -> Result<Option<ReplicaAck>> {
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
}

/// `redlock://?quorum=M&node=URL&node=URL…`
#[derive(Debug, Clone)]
pub(crate) struct RedlockTarget {
    pub nodes: Vec<Target>,
    pub quorum: Option<usize>,
    pub node_timeout: Option<Duration>,
    pub drift_factor: Option<f64>,
}

/// Which optional parts of verrou this build has (the Cargo features).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Features {
    pub memory: bool,
    pub redis_lua: bool,
    pub redis_lua_tls: bool,
    pub tair: bool,
    pub tair_tls: bool,
    pub redlock: bool,
    pub postgres: bool,
    pub etcd: bool,
    pub etcd_tls: bool,
}

impl Features {
    /// The features this crate was compiled with.
    pub(crate) const ENABLED: Features = Features {
        memory: cfg!(feature = "memory"),
        redis_lua: cfg!(feature = "redis-lua"),
        redis_lua_tls: cfg!(feature = "redis-lua-tls"),
        tair: cfg!(feature = "tair"),
        tair_tls: cfg!(feature = "tair-tls"),
        redlock: cfg!(feature = "redlock"),
        postgres: cfg!(feature = "postgres"),
        etcd: cfg!(feature = "etcd"),
        etcd_tls: cfg!(feature = "etcd-tls"),
    };
}

/// Parse `url` for a build with `features`.
pub(crate) fn parse(url: &str, features: &Features) -> Result<Target> {
    parse_quoting(url, features).map_err(|e| hide_quoted_url_text(e, url))
}

/// `text` with its percent-escapes decoded (`+` and `&` kept as they are).
pub(crate) fn percent_decode(text: &str) -> String {
    let query = format!("x={}", text.replace('+', "%2B").replace('&', "%26"));
    form_urlencoded::parse(query.as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

/// `err` with every `quoted` piece of `url` hidden when `url` holds a `@`
/// (credentials may be in it). A password with an unencoded `/`, `?`, `#`
/// or `@` is cut by the parser into what looks like a host, a path or a
/// parameter, and the messages quote those to say what to fix; with a `@`
/// anywhere in the URL they say it without the quote.
pub(crate) fn hide_quoted_url_text(err: Error, url: &str) -> Error {
    let Error::InvalidArgument(message) = &err else {
        return err;
    };
    if !url.contains('@') {
        return err;
    }
    let decoded = percent_decode(url);
    let parts: Vec<&str> = message.split('`').collect();
    let mut shown = String::with_capacity(message.len());
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            shown.push('`');
        }
        // Odd parts are quoted when a closing backtick follows.
        let quoted = i % 2 == 1 && i + 1 < parts.len();
        if quoted && !part.is_empty() && (url.contains(part) || decoded.contains(part)) {
            shown.push_str("***");
        } else {
            shown.push_str(part);
        }
    }
    Error::InvalidArgument(shown)
}

fn parse_quoting(url: &str, features: &Features) -> Result<Target> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(Error::invalid(format!(
            "URL {} has no scheme: start it with one of {SCHEMES}",
            redact_url(url)
        )));
    };
    let scheme = scheme.to_ascii_lowercase();
    if rest.contains('#') {
        return Err(Error::invalid(format!(
            "URL {} has a #fragment: remove it (percent-encode a '#' in a password as %23)",
            redact_url(url)
        )));
    }
    let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
    let params: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes()).into_owned().collect();
    // `node` is the one parameter meant to repeat (redlock://).
    refuse_conflicting_repeats(&scheme, &params, &["node"])?;
    match scheme.as_str() {
        "memory" => {
            require(features.memory, "memory://", "memory")?;
            if !before_query.is_empty() && before_query != "/" {
                return Err(Error::invalid(
                    "memory:// takes no host or path: the backend lives in this process; write just memory://",
                ));
            }
            if let Some((name, _)) = params.first() {
                return Err(Error::invalid(format!(
                    "unknown parameter `{name}` for memory://: it takes no parameters"
                )));
            }
            Ok(Target::Memory)
        }
        "redlock" => {
            require(features.redlock, "redlock://", "redlock")?;
            parse_redlock(before_query, &params, features)
        }
        "postgres" | "postgresql" => {
            require(features.postgres, &format!("{scheme}://"), "postgres")?;
            parse_postgres(url, before_query, &params)
        }
        "etcd" | "etcds" => super::etcd::parse_etcd(scheme == "etcds", before_query, &params, features),
        _ => {
            let (family, tls, cluster) = match scheme.as_str() {
                "redis" => (Family::RedisLua, false, false),
                "rediss" => (Family::RedisLua, true, false),
                "redis+cluster" => (Family::RedisLua, false, true),
                "rediss+cluster" => (Family::RedisLua, true, true),
                "tair" => (Family::Tair, false, false),
                "tairs" => (Family::Tair, true, false),
                "tair+cluster" => (Family::Tair, false, true),
                "tairs+cluster" => (Family::Tair, true, true),
                _ => {
                    return Err(Error::invalid(format!(
                        "unknown scheme `{scheme}://` in {}: use one of {SCHEMES}",
                        redact_url(url)
                    )));
                }
            };
            let shown = format!("{scheme}://");
            match (family, tls) {
                (Family::RedisLua, false) => require(features.redis_lua, &shown, "redis-lua")?,
                (Family::RedisLua, true) => require(features.redis_lua_tls, &shown, "redis-lua-tls")?,
                (Family::Tair, false) => require(features.tair, &shown, "tair")?,
                (Family::Tair, true) => require(features.tair_tls, &shown, "tair-tls")?,
            }
            parse_server(&scheme, family, tls, cluster, before_query, &params).map(Target::Server)
        }
    }
}

pub(crate) fn require(enabled: bool, scheme: &str, feature: &str) -> Result<()> {
    if enabled {
        Ok(())
    } else {
        Err(Error::Unsupported {
            backend: "verrou::connect".to_owned(),
            what: format!("{scheme} URLs: enable the Cargo feature `{feature}` of verrou"),
        })
    }
}

fn parse_server(
    scheme: &str,
    family: Family,
    tls: bool,
    cluster: bool,
    before_query: &str,
    params: &[(String, String)],
) -> Result<Server> {
    let (authority, path) = match before_query.find('/') {
        Some(i) => before_query.split_at(i),
        None => (before_query, ""),
    };
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (Some(authority[..at].to_owned()), &authority[at + 1..]),
        None => (None, authority),
    };
    if hosts.is_empty() {
        return Err(Error::invalid(format!(
            "{scheme}:// URL has no host: write {scheme}://HOST[:PORT]{}",
            if cluster { "[,HOST[:PORT]…]" } else { "" }
        )));
    }
    let hosts = hosts
        .split(',')
        .map(|h| host_port(scheme, h))
        .collect::<Result<Vec<_>>>()?;
    if !cluster && hosts.len() > 1 {
        return Err(Error::invalid(format!(
            "{scheme}:// takes one host, got {}: for a cluster seeded with several nodes use {scheme}+cluster://",
            hosts.len()
        )));
    }
    let mut db = match path.trim_start_matches('/') {
        "" => None,
        n => Some(parse_db(scheme, n)?),
    };
    let mut options = FamilyOptions::default();
    for (name, value) in params {
        let v = value.as_str();
        match name.as_str() {
            "connect_timeout" => options.connect_timeout = Some(duration(name, v)?),
            "response_timeout" => options.response_timeout = Some(duration(name, v)?),
            "fencing" => options.fencing = Some(boolean(name, v)?),
            "release_notifications" => options.release_notifications = Some(boolean(name, v)?),
            "replica_ack" => options.replica_ack = Some(number_in(name, v, 1, u64::from(u32::MAX))?),
            "replica_ack_timeout" => options.replica_ack_timeout = Some(duration(name, v)?),
            "ack_connections" => options.ack_connections = Some(number_in(name, v, 1, MAX_ACK_CONNECTIONS as u64)?),
            "db" => {
                let n = parse_db(scheme, v)?;
                if db.is_some_and(|d| d != n) {
                    return Err(Error::invalid(format!(
                        "{scheme}:// URL names two databases (path and db=): keep one"
                    )));
                }
                db = Some(n);
            }
            "tls_ca" if tls => options.tls_ca = Some(PathBuf::from(v)),
            "tls_ca" => {
                return Err(Error::invalid(format!(
                    "tls_ca is for TLS URLs: use {}s:// (or drop tls_ca)",
                    scheme.split('+').next().unwrap_or(scheme)
                )));
            }
            other => {
                return Err(Error::invalid(format!(
                    "unknown parameter `{other}` for {scheme}://: the parameters are {FAMILY_PARAMS}"
                )));
            }
        }
    }
    if cluster && db.is_some_and(|d| d != 0) {
        return Err(Error::invalid(format!(
            "{scheme}:// cannot select a database: a Redis Cluster has only database 0"
        )));
    }
    if cluster && options.release_notifications == Some(true) {
        return Err(Error::invalid(format!(
            "{scheme}:// has no release notifications (they need one standalone server): remove \
             release_notifications=true"
        )));
    }
    options.replica_ack()?;
    Ok(Server {
        family,
        tls,
        cluster,
        hosts,
        userinfo,
        db,
        options,
    })
}

pub(crate) fn host_port(scheme: &str, host: &str) -> Result<String> {
    if host.is_empty() {
        return Err(Error::invalid(format!(
            "{scheme}:// URL has an empty host in its list: write HOST[:PORT],HOST[:PORT] without empty entries"
        )));
    }
    // `[v6]:port`, `[v6]`, `host:port`, `host`.
    let (name, port) = if let Some(v6) = host.strip_prefix('[') {
        match v6.split_once(']') {
            Some((addr, "")) => (format!("[{addr}]"), None),
            Some((addr, port)) if port.starts_with(':') => (format!("[{addr}]"), Some(&port[1..])),
            _ => {
                return Err(Error::invalid(format!(
                    "{scheme}:// host `{host}` is not [IPv6]:PORT: close the bracket before the port"
                )));
            }
        }
    } else {
        match host.split_once(':') {
            Some((name, port)) => (name.to_owned(), Some(port)),
            None => (host.to_owned(), None),
        }
    };
    if name.is_empty() || name == "[]" {
        return Err(Error::invalid(format!(
            "{scheme}:// URL has a port but no host name in `{host}`: write HOST:PORT"
        )));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => match p.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => {
                return Err(Error::invalid(format!(
                    "{scheme}:// host `{host}` has port `{p}`: a port is a number from 1 to 65535"
                )));
            }
        },
    };
    Ok(format!("{name}:{port}"))
}

fn parse_db(scheme: &str, text: &str) -> Result<u32> {
    text.parse().map_err(|_| {
        Error::invalid(format!(
            "{scheme}:// database `{text}` is not a number: write /N or db=N (e.g. /0 to /{})",
            u32::MAX
        ))
    })
}

/// Refuses a parameter given twice with different values (which one would
/// win is a guess); the same value twice says it once. Values are not
/// quoted: some hold URLs with passwords.
fn refuse_conflicting_repeats(scheme: &str, params: &[(String, String)], repeatable: &[&str]) -> Result<()> {
    for (i, (name, value)) in params.iter().enumerate() {
        if repeatable.contains(&name.as_str()) {
            continue;
        }
        if params[..i].iter().any(|(n, v)| n == name && v != value) {
            return Err(Error::invalid(format!(
                "{scheme}:// parameter {name} is given twice with different values: keep one"
            )));
        }
    }
    Ok(())
}

fn parse_redlock(before_query: &str, params: &[(String, String)], features: &Features) -> Result<Target> {
    if !before_query.is_empty() && before_query != "/" {
        return Err(Error::invalid(
            "redlock:// takes no host: list its nodes as parameters, e.g. \
             redlock://?quorum=2&node=redis://a:6379&node=redis://b:6379&node=tair://c:6379",
        ));
    }
    let mut nodes = Vec::new();
    let mut quorum = None;
    let mut node_timeout = None;
    let mut drift_factor = None;
    for (name, value) in params {
        match name.as_str() {
            "node" => {
                if value.to_ascii_lowercase().starts_with("redlock:") {
                    return Err(Error::invalid(
                        "a redlock:// node cannot itself be redlock://: list every server as its own node=",
                    ));
                }
                let node = parse(value, features).map_err(|e| match e {
                    Error::InvalidArgument(m) => Error::invalid(format!("redlock node {}: {m}", nodes.len() + 1)),
                    other => other,
                })?;
                nodes.push(node);
            }
            "quorum" => quorum = Some(number::<usize>(name, value)?),
            "node_timeout" => node_timeout = Some(duration(name, value)?),
            "drift_factor" => {
                // RedlockOptions::validate's range, checked here so that
                // check_url refuses what connect refuses.
                match value.parse::<f64>() {
                    Ok(x) if (0.0..0.5).contains(&x) => drift_factor = Some(x),
                    _ => {
                        return Err(Error::invalid(format!(
                            "drift_factor `{value}` is not a number from 0 up to (not including) 0.5: write e.g. \
                             drift_factor=0.01"
                        )));
                    }
                }
            }
            other => {
                return Err(Error::invalid(format!(
                    "unknown parameter `{other}` for redlock://: the parameters are {REDLOCK_PARAMS} (percent-encode \
                     a node's own parameters, e.g. node=redis://a:6379%3Ffencing%3Dtrue)"
                )));
            }
        }
    }
    let n = nodes.len();
    if n < 2 {
        return Err(Error::invalid(format!(
            "redlock:// needs at least 2 nodes (3 or more for fault tolerance), got {n}: add node=URL parameters"
        )));
    }
    if let Some(m) = quorum {
        if m > n {
            return Err(Error::invalid(format!(
                "redlock:// quorum {m} is above the {n} nodes: use a quorum from {} to {n}",
                n / 2 + 1
            )));
        }
        if 2 * m <= n {
            return Err(Error::invalid(format!(
                "redlock:// quorum {m} of {n} nodes is not a majority (two clients could both reach it): use a \
                 quorum from {} to {n}",
                n / 2 + 1
            )));
        }
    }
    Ok(Target::Redlock(RedlockTarget {
        nodes,
        quorum,
        node_timeout,
        drift_factor,
    }))
}

#[cfg(feature = "postgres")]
fn parse_postgres(url: &str, before_query: &str, params: &[(String, String)]) -> Result<Target> {
    super::postgres::parse_postgres(url, before_query, params).map(Target::Postgres)
}

#[cfg(not(feature = "postgres"))]
fn parse_postgres(_: &str, _: &str, _: &[(String, String)]) -> Result<Target> {
    require(false, "postgres://", "postgres").map(|()| Target::Memory)
}

/// A duration above zero and at most [`MAX_TIMEOUT`], the bound of every
/// timeout in verrou (the sums the backends wait for stay far from
/// overflowing).
pub(crate) fn duration(name: &str, value: &str) -> Result<Duration> {
    let range = format!("above zero and at most {} days", MAX_TIMEOUT.as_secs() / 86_400);
    match humantime::parse_duration(value) {
        Ok(d) if !d.is_zero() && d <= MAX_TIMEOUT => Ok(d),
        Ok(_) => Err(Error::invalid(format!("{name} must be {range}, got `{value}`"))),
        Err(e) => Err(Error::invalid(format!(
            "{name} `{value}` is not a duration {range} ({e}): write e.g. {name}=500ms or {name}=2s"
        ))),
    }
}

/// A whole number from `min` to `max`, as the `usize` or `u32` the
/// builders take (`max` fits them).
pub(crate) fn number_in<T: TryFrom<u64>>(name: &str, value: &str, min: u64, max: u64) -> Result<T> {
    let out_of_range = || {
        Error::invalid(format!(
            "{name} must be a whole number from {min} to {max}, got `{value}`"
        ))
    };
    let n: u64 = value.parse().map_err(|_| out_of_range())?;
    if !(min..=max).contains(&n) {
        return Err(out_of_range());
    }
    T::try_from(n).map_err(|_| out_of_range())
}

pub(crate) fn boolean(name: &str, value: &str) -> Result<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(Error::invalid(format!(
            "{name} `{value}` is not a boolean: write {name}=true or {name}=false"
        ))),
    }
}

pub(crate) fn number<T: std::str::FromStr>(name: &str, value: &str) -> Result<T> {
    value
        .parse()
        .map_err(|_| Error::invalid(format!("{name} `{value}` is not a whole number: write e.g. {name}=2")))
}

impl Server {
    /// The scheme as written by the user.
    pub(crate) fn scheme(&self) -> &'static str {
        match (self.family, self.tls, self.cluster) {
            (Family::RedisLua, false, false) => "redis",
            (Family::RedisLua, true, false) => "rediss",
            (Family::RedisLua, false, true) => "redis+cluster",
            (Family::RedisLua, true, true) => "rediss+cluster",
            (Family::Tair, false, false) => "tair",
            (Family::Tair, true, false) => "tairs",
            (Family::Tair, false, true) => "tair+cluster",
            (Family::Tair, true, true) => "tairs+cluster",
        }
    }

    /// The URL without its password (user names are kept).
    pub(crate) fn describe(&self) -> String {
        let user = match &self.userinfo {
            Some(info) => match info.split_once(':') {
                Some((user, _)) => format!("{user}:***@"),
                None => "***@".to_owned(), // a lone token is a password
            },
            None => String::new(),
        };
        let db = self.db.map(|d| format!("/{d}")).unwrap_or_default();
        format!("{}://{user}{}{db}", self.scheme(), self.hosts.join(","))
    }

    fn credentials(&self) -> String {
        self.userinfo.as_ref().map(|u| format!("{u}@")).unwrap_or_default()
    }

    /// One `redis[s]://[user:pass@]host:port[/db]` URL per host, as the
    /// redis-rs based backend takes them.
    pub(crate) fn node_urls(&self) -> Vec<String> {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let db = self.db.map(|d| format!("/{d}")).unwrap_or_default();
        self.hosts
            .iter()
            .map(|h| format!("{scheme}://{}{h}{db}", self.credentials()))
            .collect()
    }

    /// The single URL fred takes: `redis[s][-cluster]://…?node=h:p…`.
    pub(crate) fn fred_url(&self) -> String {
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
}
