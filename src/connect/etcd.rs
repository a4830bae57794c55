//! `etcd://[user:password@]host[:port][,host[:port]…][?params]` and
//! `etcds://…` (TLS): the etcd backend ([`crate::etcd`]), features `etcd`
//! and `etcd-tls`. The port defaults to 2379; parameters: `connect_timeout`,
//! `response_timeout` (durations), `namespace` (key prefix, default
//! `verrou/`) and `tls_ca` (a PEM file of trusted CA certificates, `etcds://`
//! only; the platform's roots otherwise). The user name and password are
//! etcd's own (`etcdctl user add`), percent-encoded in the URL.

use std::path::PathBuf;
use std::time::Duration;

use lock_core::{Error, Result};

use super::url::{Features, Target, duration, host_port, percent_decode, require};

/// The etcd client port used when a host names none.
pub const ETCD_DEFAULT_PORT: u16 = 2379;

/// The query parameters of `etcd://` and `etcds://`.
pub const ETCD_PARAMS: &str = "connect_timeout, response_timeout, namespace, tls_ca";

/// A parsed `etcd://` or `etcds://` URL.
#[derive(Clone)]
pub(crate) struct EtcdTarget {
    pub tls: bool,
    /// `host:port`, at least one.
    pub hosts: Vec<String>,
    /// Decoded user name and password; the password is never printed.
    pub user: Option<(String, String)>,
    pub connect_timeout: Option<Duration>,
    pub response_timeout: Option<Duration>,
    pub namespace: Option<String>,
    pub tls_ca: Option<PathBuf>,
}

impl std::fmt::Debug for EtcdTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl EtcdTarget {
    /// The URL without its password.
    pub(crate) fn describe(&self) -> String {
        let scheme = if self.tls { "etcds" } else { "etcd" };
        let user = self.user.as_ref().map(|(u, _)| format!("{u}:***@")).unwrap_or_default();
        format!("{scheme}://{user}{}", self.hosts.join(","))
    }
}

/// Parse what follows `etcd://` or `etcds://`.
pub(crate) fn parse_etcd(
    tls: bool,
    before_query: &str,
    params: &[(String, String)],
    features: &Features,
) -> Result<Target> {
    let scheme = if tls { "etcds" } else { "etcd" };
    if tls {
        require(features.etcd_tls, "etcds://", "etcd-tls")?;
    } else {
        require(features.etcd, "etcd://", "etcd")?;
    }
    let authority = before_query.strip_suffix('/').unwrap_or(before_query);
    if authority.contains('/') {
        return Err(Error::invalid(format!(
            "{scheme}:// takes no path: write {scheme}://HOST[:PORT][,HOST[:PORT]…] (key prefix: namespace=)"
        )));
    }
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    if hosts.is_empty() {
        return Err(Error::invalid(format!(
            "{scheme}:// URL has no host: write {scheme}://HOST[:PORT][,HOST[:PORT]…]"
        )));
    }
    let hosts = hosts
        .split(',')
        .map(|h| host_port(scheme, &with_default_port(h)))
        .collect::<Result<Vec<_>>>()?;
    let user = match userinfo {
        None => None,
        Some(info) => match info.split_once(':') {
            Some((user, password)) if !user.is_empty() => Some((percent_decode(user), percent_decode(password))),
            _ => {
                return Err(Error::invalid(format!(
                    "{scheme}:// credentials must be USER:PASSWORD@ (etcd has no password-only login)"
                )));
            }
        },
    };
    let mut target = EtcdTarget {
        tls,
        hosts,
        user,
        connect_timeout: None,
        response_timeout: None,
        namespace: None,
        tls_ca: None,
    };
    for (name, value) in params {
        match name.as_str() {
            "connect_timeout" => target.connect_timeout = Some(duration(name, value)?),
            "response_timeout" => target.response_timeout = Some(duration(name, value)?),
            "namespace" => target.namespace = Some(value.clone()),
            "tls_ca" if tls => target.tls_ca = Some(PathBuf::from(value)),
            "tls_ca" => return Err(Error::invalid("tls_ca is for TLS URLs: use etcds:// (or drop tls_ca)")),
            other => {
                return Err(Error::invalid(format!(
                    "unknown parameter `{other}` for {scheme}://: the parameters are {ETCD_PARAMS}"
                )));
            }
        }
    }
    Ok(Target::Etcd(target))
}

/// `host` with etcd's client port when it names none.
fn with_default_port(host: &str) -> String {
    let has_port = match host.rfind(']') {
        Some(close) => host[close..].contains(':'),
        None => host.contains(':'),
    };
    if has_port || host.is_empty() {
        host.to_owned()
    } else {
        format!("{host}:{ETCD_DEFAULT_PORT}")
    }
}

/// Connect the etcd backend `target` names.
#[cfg(feature = "etcd")]
pub(crate) async fn build_etcd(target: EtcdTarget) -> Result<super::Backend> {
    let description = target.describe();
    let scheme = if target.tls { "https" } else { "http" };
    let endpoints: Vec<String> = target.hosts.iter().map(|h| format!("{scheme}://{h}")).collect();
    let mut b = lock_etcd::EtcdBackend::builder(endpoints);
    if let Some((user, password)) = &target.user {
        b = b.user(user.clone(), password.clone());
    }
    if let Some(t) = target.connect_timeout {
        b = b.connect_timeout(t);
    }
    if let Some(t) = target.response_timeout {
        b = b.response_timeout(t);
    }
    if let Some(ns) = &target.namespace {
        b = b.namespace(ns.clone());
    }
    #[cfg(feature = "etcd-tls")]
    if target.tls {
        let mut tls = lock_etcd::TlsOptions::new().with_native_roots();
        if let Some(path) = &target.tls_ca {
            let pem = std::fs::read(path).map_err(|e| {
                Error::invalid(format!(
                    "cannot read tls_ca file {}: {e}: point tls_ca at a PEM file of CA certificates",
                    path.display()
                ))
            })?;
            tls = tls.ca_certificate(lock_etcd::Certificate::from_pem(pem));
        }
        b = b.tls(tls);
    }
    let backend = std::sync::Arc::new(b.build().await.map_err(|e| super::in_context(e, &description))?);
    Ok(super::Backend {
        locks: backend.clone(),
        kinds: super::kinds::Kinds::of(&backend),
        store: Some(backend),
        description,
        in_process: false,
    })
}
