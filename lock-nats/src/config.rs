//! The configuration contract for NATS URLs ([`NatsConfig`], a
//! [`BackendConfig`]; [`NatsConnector`](crate::NatsConnector) for the
//! facade). The grammar:
//! `nats://[user:password@]host[:port][,host[:port]…][?params]` and
//! `tls://…` (TLS required), the port defaulting to 4222; a user info
//! without `:` is a token (`nats://TOKEN@host`). Parameters, each at most
//! once (the same value twice says it once):
//!
//! | parameter | default | range |
//! |---|---|---|
//! | `bucket` | `verrou` | letters, digits, `-`, `_` |
//! | `replicas` | 1 | 1 to 5 (a new bucket's; use 3 on a cluster) |
//! | `connect_timeout` | 2 s | above zero, at most 365 days |
//! | `response_timeout` | 2 s | above zero, at most 365 days |
//! | `marker_ttl` | 1 s | whole seconds, 1 s to 1 day |
//! | `tls_ca` | — | a PEM file of CA certificates (`tls://` only) |

use std::path::PathBuf;
use std::time::Duration;

use lock_core::raw::MAX_TIMEOUT;
use lock_core::raw::{
    BackendConfig, UrlParts, hide_quoted_url_text, parse_duration, parse_host_port, parse_number, percent_decode,
    unknown_parameter,
};
use lock_core::{Error, Result};

/// The NATS client port used when a host names none.
pub const DEFAULT_PORT: u16 = 4222;

/// The bucket locks and values live in by default.
pub const DEFAULT_BUCKET: &str = "verrou";

/// Default time to connect to a server.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Default time to wait for the answer to one request (a write's
/// acknowledgement, a read).
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Default lifetime of a delete marker (a release's, or the server's when a
/// key's TTL runs out): the bucket's `subject_delete_marker_ttl`.
pub const DEFAULT_MARKER_TTL: Duration = Duration::from_secs(1);

/// Most replicas JetStream keeps of a stream.
pub const MAX_REPLICAS: usize = 5;

/// The query parameters of `nats://` and `tls://`.
pub const PARAMS: &[&str] = &[
    "bucket",
    "replicas",
    "connect_timeout",
    "response_timeout",
    "marker_ttl",
    "tls_ca",
];

/// The longest `marker_ttl`.
const MAX_MARKER_TTL: Duration = Duration::from_secs(86_400);

/// How the client proves who it is.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Credentials {
    /// A user name and password.
    UserPassword {
        /// The user name.
        user: String,
        /// The password (never printed).
        password: String,
    },
    /// A token (`authorization { token: … }` on the server; never printed).
    Token(String),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::UserPassword { user, .. } => write!(f, "UserPassword {{ user: {user:?}, password: *** }}"),
            Credentials::Token(_) => f.write_str("Token(***)"),
        }
    }
}

/// Settings of a [`crate::NatsBackend`]: what a URL says, field by field.
/// `Default` holds the defaults (servers: `127.0.0.1:4222`).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NatsConfig {
    /// Servers, `host:port`, at least one.
    pub servers: Vec<String>,
    /// Require TLS (`tls://`).
    pub tls: bool,
    /// Credentials, if any (never printed).
    pub credentials: Option<Credentials>,
    /// The key-value bucket (created when missing).
    pub bucket: String,
    /// Replicas of a bucket this backend creates (1 to 5).
    pub replicas: usize,
    /// Time to connect.
    pub connect_timeout: Duration,
    /// Time to wait for one answer.
    pub response_timeout: Duration,
    /// Lifetime of delete markers, whole seconds (a bucket this backend
    /// creates).
    pub marker_ttl: Duration,
    /// A PEM file of trusted CA certificates (TLS only).
    pub tls_ca: Option<PathBuf>,
}

impl Default for NatsConfig {
    fn default() -> Self {
        NatsConfig {
            servers: vec![format!("127.0.0.1:{DEFAULT_PORT}")],
            tls: false,
            credentials: None,
            bucket: DEFAULT_BUCKET.to_owned(),
            replicas: 1,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            marker_ttl: DEFAULT_MARKER_TTL,
            tls_ca: None,
        }
    }
}

impl std::fmt::Debug for NatsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsConfig")
            .field("url", &self.description())
            .field("credentials", &self.credentials)
            .field("bucket", &self.bucket)
            .field("replicas", &self.replicas)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("marker_ttl", &self.marker_ttl)
            .field("tls_ca", &self.tls_ca)
            .finish_non_exhaustive()
    }
}

impl BackendConfig for NatsConfig {
    const SCHEMES: &'static [&'static str] = &["nats", "tls"];
    const PARAMS: &'static [&'static str] = PARAMS;

    fn from_url(url: &str) -> Result<Self> {
        // A password with an unencoded `/`, `?` or `#` can be cut into what
        // a message quotes as a host or a value: hidden here.
        NatsConfig::parse(url).map_err(|e| hide_quoted_url_text(e, url))
    }

    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        match key {
            "bucket" => {
                if value.is_empty()
                    || !value
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                {
                    return Err(Error::invalid(format!(
                        "bucket `{value}` must be letters, digits, '-' and '_' (a NATS key-value bucket name)"
                    )));
                }
                self.bucket = value.to_owned();
            }
            "replicas" => self.replicas = parse_number(key, value, 1, MAX_REPLICAS as u64)?,
            "connect_timeout" => self.connect_timeout = parse_duration(key, value)?,
            "response_timeout" => self.response_timeout = parse_duration(key, value)?,
            "marker_ttl" => {
                let d = parse_duration(key, value)?;
                if d.subsec_nanos() != 0 || d < Duration::from_secs(1) || d > MAX_MARKER_TTL {
                    return Err(Error::invalid(format!(
                        "marker_ttl must be whole seconds from 1s to 1 day, got `{value}`"
                    )));
                }
                self.marker_ttl = d;
            }
            "tls_ca" => self.tls_ca = Some(PathBuf::from(value)),
            other => return Err(unknown_parameter(self.scheme(), other, PARAMS)),
        }
        Ok(())
    }

    fn validate(&self) -> Result<()> {
        if self.servers.is_empty() {
            return Err(Error::invalid("a NATS backend needs at least one server"));
        }
        if self.tls_ca.is_some() && !self.tls {
            return Err(Error::invalid("tls_ca is for TLS: use tls:// (or drop tls_ca)"));
        }
        for (name, t) in [
            ("connect_timeout", self.connect_timeout),
            ("response_timeout", self.response_timeout),
        ] {
            if t.is_zero() || t > MAX_TIMEOUT {
                return Err(Error::invalid(format!(
                    "{name} must be above zero and at most {} days, got {t:?}",
                    MAX_TIMEOUT.as_secs() / 86_400
                )));
            }
        }
        if !(1..=MAX_REPLICAS).contains(&self.replicas) {
            return Err(Error::invalid(format!(
                "replicas must be a whole number from 1 to {MAX_REPLICAS}, got {}",
                self.replicas
            )));
        }
        let m = self.marker_ttl;
        if m.subsec_nanos() != 0 || m < Duration::from_secs(1) || m > MAX_MARKER_TTL {
            return Err(Error::invalid(format!(
                "marker_ttl must be whole seconds from 1s to 1 day, got {m:?}"
            )));
        }
        Ok(())
    }

    fn description(&self) -> String {
        let user = match &self.credentials {
            Some(Credentials::UserPassword { user, .. }) => format!("{user}:***@"),
            Some(Credentials::Token(_)) => "***@".to_owned(),
            None => String::new(),
        };
        format!("{}://{user}{}", self.scheme(), self.servers.join(","))
    }
}

impl NatsConfig {
    fn scheme(&self) -> &'static str {
        if self.tls { "tls" } else { "nats" }
    }

    /// [`BackendConfig::from_url`] before its errors' quoted URL text is
    /// hidden.
    fn parse(url: &str) -> Result<NatsConfig> {
        let parts = UrlParts::parse(url, &[])?;
        let tls = match parts.scheme.as_str() {
            "nats" => false,
            "tls" => true,
            other => return Err(Error::invalid(format!("{other}:// is not nats:// or tls://"))),
        };
        let scheme = parts.scheme.as_str();
        if !matches!(parts.path.as_str(), "" | "/") {
            return Err(Error::invalid(format!(
                "{scheme}:// takes no path: write {scheme}://HOST[:PORT][,HOST[:PORT]…] (bucket: bucket=)"
            )));
        }
        if parts.hosts.is_empty() {
            return Err(Error::invalid(format!(
                "{scheme}:// URL has no host: write {scheme}://HOST[:PORT][,HOST[:PORT]…]"
            )));
        }
        let servers = parts
            .hosts
            .split(',')
            .map(|h| parse_host_port(scheme, h, DEFAULT_PORT))
            .collect::<Result<Vec<_>>>()?;
        let credentials = match parts.user_info.as_deref() {
            None => None,
            Some("") => return Err(Error::invalid(format!("{scheme}:// has an empty user info before @"))),
            Some(info) => match info.split_once(':') {
                Some(("", _)) => {
                    return Err(Error::invalid(format!(
                        "{scheme}:// credentials have a password but no user: write USER:PASSWORD@ or TOKEN@"
                    )));
                }
                Some((user, password)) => Some(Credentials::UserPassword {
                    user: percent_decode(user),
                    password: percent_decode(password),
                }),
                None => Some(Credentials::Token(percent_decode(info))),
            },
        };
        let mut config = NatsConfig {
            tls,
            servers,
            credentials,
            ..NatsConfig::default()
        };
        for (name, value) in &parts.params {
            config.set(name, value)?;
        }
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::raw::BackendConfig;

    #[test]
    fn a_full_url_parses() {
        let c = NatsConfig::from_url(
            "nats://alice:s%40cret@h1,h2:4333,[::1]:5000?bucket=locks&replicas=3&connect_timeout=500ms\
             &response_timeout=3s&marker_ttl=2s",
        )
        .unwrap();
        assert_eq!(c.servers, ["h1:4222", "h2:4333", "[::1]:5000"]);
        assert_eq!(
            c.credentials,
            Some(Credentials::UserPassword {
                user: "alice".into(),
                password: "s@cret".into()
            })
        );
        assert_eq!((c.bucket.as_str(), c.replicas), ("locks", 3));
        assert_eq!(c.connect_timeout, Duration::from_millis(500));
        assert_eq!(c.response_timeout, Duration::from_secs(3));
        assert_eq!(c.marker_ttl, Duration::from_secs(2));
        assert!(!c.tls);
        let dbg = format!("{c:?} {}", c.description());
        assert_eq!(c.description(), "nats://alice:***@h1:4222,h2:4333,[::1]:5000");
        assert!(!dbg.contains("s@cret") && !dbg.contains("cret"), "{dbg}");
    }

    #[test]
    fn defaults_and_tokens() {
        let c = NatsConfig::from_url("tls://tok3n@example.com?tls_ca=/etc/ca.pem").unwrap();
        assert!(c.tls);
        assert_eq!(c.servers, ["example.com:4222"]);
        assert_eq!(c.credentials, Some(Credentials::Token("tok3n".into())));
        assert_eq!(c.tls_ca, Some(PathBuf::from("/etc/ca.pem")));
        assert!(!format!("{c:?}").contains("tok3n"));
        let d = NatsConfig::from_url("nats://h").unwrap();
        assert_eq!(
            (d.bucket.as_str(), d.replicas, d.connect_timeout, d.response_timeout),
            ("verrou", 1, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT)
        );
    }

    #[test]
    fn bad_values_are_refused_with_their_range_and_no_password() {
        for (url, needle) in [
            (
                "nats://u:pw1@h?replicas=0",
                "replicas must be a whole number from 1 to 5",
            ),
            ("nats://u:pw1@h?replicas=6", "from 1 to 5"),
            ("nats://u:pw1@h?replicas=x", "replicas"),
            (
                "nats://u:pw1@h?connect_timeout=0s",
                "connect_timeout must be above zero",
            ),
            (
                "nats://u:pw1@h?response_timeout=soon",
                "response_timeout `***` is not a duration",
            ),
            (
                "nats://u:pw1@h?marker_ttl=1500ms",
                "marker_ttl must be whole seconds from 1s to 1 day",
            ),
            ("nats://u:pw1@h?marker_ttl=2d", "marker_ttl"),
            ("nats://u:pw1@h?bucket=a.b", "must be letters, digits"),
            (
                "nats://u:pw1@h?replicas=1&replicas=3",
                "given twice with different values",
            ),
            ("nats://u:pw1@h?colour=blue", "the parameters are bucket, replicas"),
            ("nats://u:pw1@h:0", "a port is a number from 1 to 65535"),
            ("nats://u:pw1@h,,k", "empty host"),
            ("nats://u:pw1@", "no host"),
            ("nats://u:pw1@h/path", "no path"),
            ("redis://h", "nats:// or tls://"),
        ] {
            let err = NatsConfig::from_url(url).unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, Error::InvalidArgument(_)), "{url}: {text}");
            assert!(text.contains(needle), "{url}: {text}");
            assert!(!text.contains("pw1"), "{url}: {text}");
        }
        // The same value twice is said once.
        assert_eq!(
            NatsConfig::from_url("nats://h?replicas=3&replicas=3").unwrap().replicas,
            3
        );
        let err = NatsConfig::from_url("nats://h?tls_ca=/x").unwrap_err();
        assert!(err.to_string().contains("tls_ca is for TLS"), "{err}");
        let c = NatsConfig {
            replicas: 9,
            ..NatsConfig::default()
        };
        assert!(c.validate().unwrap_err().to_string().contains("replicas must be"));
    }

    #[test]
    fn set_takes_one_parameter() {
        let mut c = NatsConfig::default();
        c.set("replicas", "3").unwrap();
        c.set("bucket", "b-1").unwrap();
        assert_eq!((c.replicas, c.bucket.as_str()), (3, "b-1"));
        assert!(c.set("nope", "1").is_err());
        c.validate().unwrap();
    }
}
