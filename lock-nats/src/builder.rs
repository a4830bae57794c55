//! Connecting: servers, credentials, TLS, the bucket (created when missing,
//! checked when found).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use async_nats::jetstream;
use lock_core::raw::BackendConfig;
use lock_core::{Error, Result};

use crate::config::{Credentials, NatsConfig};
use crate::error::{NAME, failed};
use crate::{Inner, NatsBackend};

/// What the backend talks through: its own connection, or the caller's.
#[derive(Clone)]
enum Source {
    Config,
    Client(async_nats::Client),
    Context(jetstream::Context),
}

/// A client of the caller's for [`NatsBackend::builder_with_client`]: an
/// [`async_nats::Client`] or a [`jetstream::Context`] (its domain or
/// prefix and its timeout kept).
#[derive(Clone)]
pub struct OwnClient(Source);

impl From<async_nats::Client> for OwnClient {
    fn from(c: async_nats::Client) -> Self {
        OwnClient(Source::Client(c))
    }
}

impl From<jetstream::Context> for OwnClient {
    fn from(c: jetstream::Context) -> Self {
        OwnClient(Source::Context(c))
    }
}

/// Settings of a [`NatsBackend`]; [`NatsBuilder::build`] connects.
#[derive(Clone)]
#[must_use]
pub struct NatsBuilder {
    config: NatsConfig,
    source: Source,
}

impl std::fmt::Debug for NatsBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsBuilder")
            .field("config", &self.config)
            .field("own_client", &!matches!(self.source, Source::Config))
            .finish_non_exhaustive()
    }
}

impl NatsBuilder {
    pub(crate) fn from_config(config: NatsConfig) -> Self {
        NatsBuilder {
            config,
            source: Source::Config,
        }
    }

    pub(crate) fn with_client(client: OwnClient) -> Self {
        NatsBuilder {
            config: NatsConfig::default(),
            source: client.0,
        }
    }

    /// The key-value bucket (default `verrou`).
    pub fn bucket(mut self, bucket: impl Into<String>) -> Self {
        self.config.bucket = bucket.into();
        self
    }

    /// Replicas of the bucket when this backend creates it (default 1; 3 on
    /// a JetStream cluster, what SAFETY.md's claims need).
    pub fn replicas(mut self, replicas: usize) -> Self {
        self.config.replicas = replicas;
        self
    }

    /// Time to wait for one answer (default 2 s); the same name as on the
    /// other backends' builders.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.config.response_timeout = timeout;
        self
    }

    /// Time to connect (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// Set one parameter by its URL name ([`NatsConfig::set`]).
    ///
    /// # Errors
    /// As [`NatsConfig::set`].
    pub fn set(mut self, key: &str, value: &str) -> Result<Self> {
        self.config.set(key, value)?;
        Ok(self)
    }

    /// Connect (unless given a client), check the server (2.11 or later:
    /// per-key TTL), and open the bucket, creating it when missing (history
    /// 1, file storage, per-key TTL and delete markers on, the configured
    /// replicas).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for settings out of range, and for a
    /// bucket that exists without per-key TTL; [`Error::Unsupported`] for a
    /// server older than 2.11; [`Error::Backend`] when no server answers or
    /// credentials are refused.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future drops the half-made client (a
    /// bucket, once created, stays).
    pub async fn build(self) -> Result<NatsBackend> {
        let config = self.config;
        let bucket = config.bucket.clone();
        config.validate()?;
        let (client, js) = match self.source {
            Source::Config => {
                let client = connect(&config).await?;
                let js = jetstream::ContextBuilder::new()
                    .timeout(config.response_timeout)
                    .build(client.clone());
                (client, js)
            }
            Source::Client(client) => {
                let js = jetstream::ContextBuilder::new()
                    .timeout(config.response_timeout)
                    .build(client.clone());
                (client, js)
            }
            Source::Context(js) => (js.client(), js),
        };
        check_version(&client)?;
        let store = match js.get_key_value(bucket.as_str()).await {
            Ok(store) => store,
            Err(first) => js
                .create_key_value(jetstream::kv::Config {
                    bucket: bucket.clone(),
                    history: 1,
                    storage: jetstream::stream::StorageType::File,
                    num_replicas: config.replicas,
                    limit_markers: Some(config.marker_ttl),
                    description: "verrou locks and values".into(),
                    ..Default::default()
                })
                .await
                .map_err(|e| {
                    Error::backend(
                        NAME,
                        format!("opening bucket {bucket} ({first}), then creating it: {e}"),
                    )
                    .with_source(e)
                })?,
        };
        let info = store.stream.cached_info().config.clone();
        if !info.allow_message_ttl {
            return Err(Error::invalid(format!(
                "NATS bucket {bucket} exists without per-key TTL (allow_msg_ttl): a lock there would never \
                 expire; use another bucket, or recreate it with `nats kv add {bucket} --marker-ttl 1s`"
            )));
        }
        if info.num_replicas < config.replicas {
            return Err(Error::invalid(format!(
                "NATS bucket {bucket} exists with {} replicas, fewer than the {} asked for",
                info.num_replicas, config.replicas
            )));
        }
        let marker_ttl_secs = info
            .subject_delete_marker_ttl
            .map_or(config.marker_ttl, |d| d.max(Duration::from_secs(1)))
            .as_secs()
            .max(1);
        let atomic_batches = allow_atomic_batches(&js, &info).await;
        let stream = store.stream.clone();
        Ok(NatsBackend {
            inner: Arc::new(Inner {
                subject_prefix: store.prefix.clone(),
                client,
                js,
                stream,
                store,
                replicas: info.num_replicas,
                response_timeout: config.response_timeout,
                marker_ttl_secs,
                held: Default::default(),
                atomic_batches: AtomicBool::new(atomic_batches),
                markers: Default::default(),
                kept: Default::default(),
            }),
        })
    }
}

async fn connect(config: &NatsConfig) -> Result<async_nats::Client> {
    let mut opts = async_nats::ConnectOptions::new()
        .name("verrou")
        .connection_timeout(config.connect_timeout)
        .request_timeout(Some(config.response_timeout));
    match &config.credentials {
        Some(Credentials::UserPassword { user, password }) => {
            opts = opts.user_and_password(user.clone(), password.clone());
        }
        Some(Credentials::Token(token)) => opts = opts.token(token.clone()),
        None => {}
    }
    if config.tls {
        opts = opts.require_tls(true);
        if let Some(ca) = &config.tls_ca {
            opts = opts.add_root_certificates(ca.clone());
        }
    }
    let servers: Vec<async_nats::ServerAddr> = config
        .servers
        .iter()
        .map(|s| {
            let scheme = if config.tls { "tls" } else { "nats" };
            format!("{scheme}://{s}")
                .parse::<async_nats::ServerAddr>()
                .map_err(|e| Error::invalid(format!("NATS server `{s}`: {e}")))
        })
        .collect::<Result<_>>()?;
    let connecting = opts.connect(servers);
    // The client tries each server once per round, each within the
    // connect timeout: bound the whole.
    let budget = config
        .connect_timeout
        .saturating_mul(u32::try_from(config.servers.len()).unwrap_or(u32::MAX));
    match tokio::time::timeout(budget, connecting).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(failed(&format!("connecting to {}", config.description()), e)),
        Err(_) => Err(Error::backend(
            NAME,
            format!(
                "connecting to {}: no server answered within {budget:?}",
                config.description()
            ),
        )),
    }
}

/// Per-key TTL (`Nats-TTL`) came with nats-server 2.11.
fn check_version(client: &async_nats::Client) -> Result<()> {
    let version = client.server_info().version;
    let mut parts = version.trim_start_matches('v').split('.');
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    if (major, minor) < (2, 11) {
        return Err(Error::unsupported(
            NAME,
            format!("nats-server {version}: locks need per-key TTL (nats-server 2.11 or later)"),
        ));
    }
    Ok(())
}

/// Whether the bucket's stream takes atomic batches (the renewer's batched
/// renewals), turning them on if it does not yet (`allow_atomic`, server
/// 2.12 and later). A server that keeps it off (older, or a user without
/// the right to update the stream) leaves renewals one publish each.
async fn allow_atomic_batches(js: &jetstream::Context, config: &jetstream::stream::Config) -> bool {
    if config.allow_atomic_publish {
        return true;
    }
    let mut wanted = config.clone();
    wanted.allow_atomic_publish = true;
    match js.update_stream(&wanted).await {
        Ok(info) => info.config.allow_atomic_publish,
        Err(e) => {
            tracing::debug!(error = %e, stream = %config.name, "atomic batches stay off: renewals are one publish each");
            false
        }
    }
}
