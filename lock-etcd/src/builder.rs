//! Connecting: endpoints, credentials, TLS, key namespace.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use lock_core::{Error, Result};

use crate::error::NAME;
use crate::keepalive::KeepAlives;
use crate::session::Sessions;
use crate::{EtcdBackend, Inner};

/// Settings of an [`EtcdBackend`]; [`EtcdBuilder::build`] connects.
#[derive(Clone)]
#[must_use]
pub struct EtcdBuilder {
    endpoints: Vec<String>,
    user: Option<(String, String)>,
    #[cfg(feature = "tls")]
    tls: Option<etcd_client::TlsOptions>,
    namespace: String,
    response_timeout: Duration,
    connect_timeout: Duration,
    /// The application's client, used instead of connecting.
    client: Option<Client>,
}

impl std::fmt::Debug for EtcdBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBuilder")
            .field("endpoints", &self.endpoints)
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .field("namespace", &self.namespace)
            .field("response_timeout", &self.response_timeout)
            .finish_non_exhaustive()
    }
}

/// The namespace keys live under by default.
pub const DEFAULT_NAMESPACE: &str = "verrou/";

/// Default time to connect to a member: 2 s, as on every backend.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Default time to wait for the reply to one request: 2 s, as on every
/// backend (the lock manager's `op_timeout` cuts its calls at 2 s anyway).
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

impl EtcdBuilder {
    /// Members to connect to: `host:port`, `http://host:port` or
    /// `https://host:port` (with the `tls` feature).
    pub fn new<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        EtcdBuilder {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            user: None,
            #[cfg(feature = "tls")]
            tls: None,
            namespace: DEFAULT_NAMESPACE.to_owned(),
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            client: None,
        }
    }

    /// The application's own client, used as is: its endpoints,
    /// credentials, TLS and timeouts are its own (the builder's
    /// [`EtcdBuilder::response_timeout`] still bounds keepalive replies).
    pub fn client(client: Client) -> Self {
        EtcdBuilder {
            client: Some(client),
            ..EtcdBuilder::new(Vec::<String>::new())
        }
    }

    /// Authenticate as `user` (etcd's own users, `etcdctl user add`).
    pub fn user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }

    /// Connect over TLS with `tls` (roots, client identity).
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls(mut self, tls: etcd_client::TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Prefix of every key this backend writes (default `verrou/`): locks
    /// under `<namespace>lock/`, values under `<namespace>value/`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Time to wait for the reply to one request (default
    /// [`DEFAULT_RESPONSE_TIMEOUT`]); the same name as on the other
    /// backends' builders.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Time to connect (default [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Connect, and learn the server's minimum lease TTL (one lease granted
    /// for 1 s and revoked: the server answers with the TTL it sets).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] without endpoints or with one that is
    /// not `host:port` (a port from 1 to 65535); [`Error::Backend`] when
    /// no member answers or credentials are refused.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future drops the half-made client (a probe
    /// lease left behind expires by itself).
    pub async fn build(self) -> Result<EtcdBackend> {
        if let Some(client) = self.client.clone() {
            return self.finish(client).await;
        }
        if self.endpoints.is_empty() {
            return Err(Error::invalid("an etcd backend needs at least one endpoint"));
        }
        for (name, timeout) in [
            ("connect_timeout", self.connect_timeout),
            ("response_timeout", self.response_timeout),
        ] {
            if timeout.is_zero() || timeout > lock_core::raw::MAX_TIMEOUT {
                return Err(Error::invalid(format!(
                    "etcd {name} must be above zero and at most {} days, got {timeout:?}",
                    lock_core::raw::MAX_TIMEOUT.as_secs() / 86_400
                )));
            }
        }
        for endpoint in &self.endpoints {
            check_endpoint(endpoint)?;
        }
        let mut opts = ConnectOptions::new()
            .with_timeout(self.response_timeout)
            .with_connect_timeout(self.connect_timeout)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5));
        if let Some((user, password)) = &self.user {
            // A token the server dropped (idle past `--auth-token-ttl`, or a
            // JWT past its expiry) is renewed and the refused request sent
            // again, instead of every later request failing.
            opts = opts
                .with_user(user.clone(), password.clone())
                .with_auto_token_refresh(true);
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = self.tls.clone() {
            opts = opts.with_tls(tls);
        }
        let client = Client::connect(&self.endpoints, Some(opts))
            .await
            .map_err(|e| crate::error::failed("connecting", e))?;
        self.finish(client).await
    }

    /// Learns the server's minimum lease TTL on `client` and makes the
    /// backend.
    async fn finish(self, client: Client) -> Result<EtcdBackend> {
        let min_secs = probe_min_ttl(&client).await?;
        Ok(EtcdBackend {
            inner: Arc::new(Inner {
                client,
                lock_prefix: format!("{}lock/", self.namespace),
                value_prefix: format!("{}value/", self.namespace),
                min_ttl: Duration::from_secs(min_secs.unsigned_abs()),
                sessions: Sessions::default(),
                keepalives: KeepAlives::new(self.response_timeout),
                held: crate::held::HeldKeys::new(
                    format!("{}lock/", self.namespace).into_bytes(),
                    self.response_timeout,
                ),
                namespace: self.namespace.clone(),
                waiter_leases: std::sync::Mutex::default(),
            }),
        })
    }
}

/// `endpoint` is `host:port`, `http://host:port` or `https://host:port`
/// with a port from 1 to 65535 (below etcd-client, a port that does not
/// parse silently became port 80).
fn check_endpoint(endpoint: &str) -> Result<()> {
    let refuse = |why: &str| {
        Err(Error::invalid(format!(
            "etcd endpoint {endpoint:?}: {why} (expected host:port, http://host:port or https://host:port)"
        )))
    };
    let authority = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .unwrap_or(endpoint);
    let authority = authority.strip_suffix('/').unwrap_or(authority);
    if authority.contains('/') || authority.contains('@') {
        return refuse("not a host and port");
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once("]:") {
            Some(hp) => hp,
            None => return refuse("no port"),
        },
        None => match authority.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => (host, port),
            _ => return refuse("no port"),
        },
    };
    if host.is_empty() {
        return refuse("no host");
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => Ok(()),
        _ => refuse("the port is not a number from 1 to 65535"),
    }
}

/// The server's minimum lease TTL in seconds.
async fn probe_min_ttl(client: &Client) -> Result<i64> {
    let mut leases = client.lease_client();
    let granted = leases
        .grant(1, None)
        .await
        .map_err(|e| crate::error::failed("granting a probe lease", e))?;
    let _ = leases.revoke(granted.id()).await;
    if granted.ttl() < 1 {
        return Err(Error::backend(NAME, "the server granted a lease without a TTL"));
    }
    Ok(granted.ttl())
}
