//! The configuration of one `redis-server` process ([`RedisServerBuilder`])
//! and what it resolves to when a server starts.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use super::error::{HarnessError, HarnessResult};
use super::paths::{redis_sentinel_binary, redis_server_binary, tair_module_path};
use super::process::{DEFAULT_START_TIMEOUT, NODES_FILE, RedisServer};

/// Configures and starts a [`RedisServer`].
///
/// The server listens on 127.0.0.1 only, on a free port, runs in a fresh
/// temporary directory, and has persistence off (`--save '' --appendonly
/// no`) unless [`persistence(true)`](Self::persistence). Arguments given with
/// [`arg`](Self::arg) come last, so they override the harness defaults.
///
/// The builder is reusable: [`start`](Self::start) takes `&self`, and the
/// topologies ([`ReplicatedPair`](super::ReplicatedPair),
/// [`Instances`](super::Instances), [`RedisCluster`](super::RedisCluster))
/// start every node from the same builder.
#[derive(Clone, Debug)]
pub struct RedisServerBuilder {
    binary: Option<PathBuf>,
    modules: Vec<(ModuleSource, Vec<OsString>)>,
    args: Vec<OsString>,
    persistence: bool,
    start_timeout: Duration,
    cluster: bool,
    tls: Option<TlsFiles>,
    sentinel: Option<String>,
}

/// PEM files of a TLS-only server ([`RedisServerBuilder::tls`]).
#[derive(Clone, Debug)]
pub(super) struct TlsFiles {
    pub(super) cert: PathBuf,
    pub(super) key: PathBuf,
    pub(super) ca: PathBuf,
}

#[derive(Clone, Debug)]
enum ModuleSource {
    Path(PathBuf),
    Tair,
}

impl Default for RedisServerBuilder {
    fn default() -> Self {
        RedisServerBuilder {
            binary: None,
            modules: Vec::new(),
            args: Vec::new(),
            persistence: false,
            start_timeout: DEFAULT_START_TIMEOUT,
            cluster: false,
            tls: None,
            sentinel: None,
        }
    }
}

impl RedisServerBuilder {
    /// A builder with the defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs this binary instead of [`redis_server_binary`](super::redis_server_binary)'s.
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Loads a module (`--loadmodule path`).
    pub fn module(self, path: impl Into<PathBuf>) -> Self {
        self.module_with_args(path, std::iter::empty::<OsString>())
    }

    /// Loads a module with arguments (`--loadmodule path arg...`).
    pub fn module_with_args<I, A>(mut self, path: impl Into<PathBuf>, args: I) -> Self
    where
        I: IntoIterator<Item = A>,
        A: Into<OsString>,
    {
        self.modules.push((
            ModuleSource::Path(path.into()),
            args.into_iter().map(Into::into).collect(),
        ));
        self
    }

    /// Loads this workspace's Tair module, located by
    /// [`tair_module_path`](super::tair_module_path) when the server starts
    /// (so a missing module is a start error saying how to build it).
    pub fn tair_module(mut self) -> Self {
        self.modules.push((ModuleSource::Tair, Vec::new()));
        self
    }

    /// Adds one command-line argument, e.g. `.arg("--maxmemory").arg("10mb")`.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Adds several command-line arguments.
    pub fn args<I, A>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = A>,
        A: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Turns persistence on: an append-only file (`--appendonly yes`), so
    /// that every acknowledged write survives [`RedisServer::kill`] and a
    /// later [`RedisServer::restart_keeping_data`]. Off by default.
    pub fn persistence(mut self, on: bool) -> Self {
        self.persistence = on;
        self
    }

    /// How long the server gets to answer `PING` (default 10 s).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// TLS only: the server listens with TLS on its port (`--tls-port`,
    /// `--port 0`), presenting `cert` / `key` (PEM) and not asking clients
    /// for certificates. Clients connect with `rediss://127.0.0.1:port`;
    /// the harness's own plain-text helpers ([`RedisServer::cmd`], ...) do
    /// not work on it, and readiness is a TCP connect, not `PING`.
    pub fn tls(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>, ca: impl Into<PathBuf>) -> Self {
        self.tls = Some(TlsFiles {
            cert: cert.into(),
            key: key.into(),
            ca: ca.into(),
        });
        self
    }

    /// Cluster mode (`--cluster-enabled yes`); used by
    /// [`RedisCluster`](super::RedisCluster).
    pub(crate) fn cluster_mode(mut self) -> Self {
        self.cluster = true;
        self
    }

    /// Sentinel mode: the process runs [`redis_sentinel_binary`] (unless
    /// [`binary`](Self::binary) names another) with `--sentinel` and a
    /// configuration file of its own holding `config` (a sentinel rewrites
    /// its file at run time; a restart keeps the rewritten file). Used by
    /// [`SentinelGroup`](super::SentinelGroup).
    pub(crate) fn sentinel_mode(mut self, config: String) -> Self {
        self.sentinel = Some(config);
        self
    }

    /// Starts a server on a free port and waits until it answers `PING`.
    /// A port taken in the meantime is retried with another port.
    ///
    /// # Errors
    /// [`HarnessError::NotFound`] for a missing binary or module;
    /// [`HarnessError::StartFailed`] / [`HarnessError::StartTimeout`], with
    /// the server's log tail, when it does not come up.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills a process it has already spawned (the
    /// server under construction kills it on drop) and removes its directory.
    pub async fn start(&self) -> HarnessResult<RedisServer> {
        RedisServer::start_from(self.resolve()?, self.cluster).await
    }

    fn resolve(&self) -> HarnessResult<Launch> {
        let binary = match (&self.binary, &self.sentinel) {
            (Some(b), _) => b.clone(),
            (None, Some(_)) => redis_sentinel_binary()?,
            (None, None) => redis_server_binary()?,
        };
        let mut args: Vec<OsString> = Vec::new();
        let mut push = |a: &[&str]| args.extend(a.iter().map(OsString::from));
        push(&["--bind", "127.0.0.1", "--protected-mode", "no", "--daemonize", "no"]);
        push(&["--logfile", "", "--dbfilename", "dump.rdb"]);
        // Diskless sync waits 5 s by default for more replicas to come.
        push(&["--repl-diskless-sync-delay", "0"]);
        if self.persistence {
            push(&["--save", "", "--appendonly", "yes"]);
        } else {
            push(&["--save", "", "--appendonly", "no"]);
        }
        if self.cluster {
            push(&["--cluster-enabled", "yes", "--cluster-config-file", NODES_FILE]);
            push(&["--cluster-node-timeout", "2000"]);
        }
        for (source, module_args) in &self.modules {
            let path = match source {
                ModuleSource::Tair => tair_module_path()?,
                ModuleSource::Path(p) => {
                    if !p.is_file() {
                        return Err(HarnessError::NotFound {
                            what: format!("module {}", p.display()),
                            hint: "build the module, or pass the path of an existing file".into(),
                        });
                    }
                    p.canonicalize().unwrap_or_else(|_| p.clone())
                }
            };
            args.push("--loadmodule".into());
            args.push(path.into_os_string());
            args.extend(module_args.iter().cloned());
        }
        args.extend(self.args.iter().cloned());
        Ok(Launch {
            binary,
            args,
            start_timeout: self.start_timeout,
            tls: self.tls.clone(),
            sentinel: self.sentinel.clone(),
        })
    }
}

#[derive(Clone, Debug)]
pub(super) struct Launch {
    pub(super) binary: PathBuf,
    pub(super) args: Vec<OsString>,
    pub(super) start_timeout: Duration,
    pub(super) tls: Option<TlsFiles>,
    /// A sentinel's initial configuration file ([`RedisServerBuilder::sentinel_mode`]).
    pub(super) sentinel: Option<String>,
}
