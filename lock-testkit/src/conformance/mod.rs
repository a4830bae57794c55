//! The conformance suite: backend-independent cases as plain async functions,
//! and macros that expand to one `#[tokio::test]` per case.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test assertions

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use lock_core::raw::{ElectionBackend, MultiLockBackend, RwLockBackend, SemaphoreBackend};
use lock_core::{
    ElectionManager, LockBackend, LockManager, LockOptions, MultiLockManager, Renewal, RwLockManager, SemaphoreManager,
    VersionedStore,
};

pub mod election_cases;
#[cfg(feature = "harness")]
pub mod failover;
pub mod fair_cases;
mod hanging;
pub mod inspect_cases;
pub mod late_grant_cases;
pub mod lock_cases;
mod macros;
pub mod min_hold_cases;
pub mod multi_cases;
#[cfg(feature = "harness")]
pub mod paused_server;
#[cfg(feature = "harness")]
pub mod renew_many_cases;
pub mod reserved_cases;
pub mod rw_cases;
pub mod rw_inspect_cases;
pub mod semaphore_cases;
pub mod semaphore_inspect_cases;
pub mod semaphore_token_cases;
pub mod upgrade_cases;
pub mod versioned_cases;

type Connect<T> = Arc<dyn Fn() -> BoxFuture<'static, Arc<T>> + Send + Sync>;

fn random_prefix() -> String {
    let mut b = [0u8; 6];
    getrandom::fill(&mut b).expect("OS random source");
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("verrou-test:{hex}")
}

/// What both suites share: a client factory, a key namespace, and things
/// (server processes) to keep alive while the suite runs.
struct Clients<T: ?Sized> {
    connect: Connect<T>,
    prefix: String,
    keep_alive: Vec<Box<dyn Any + Send + Sync>>,
    /// The backend's reserved key prefixes ([`reserved_cases`]).
    reserved: Vec<String>,
}

impl<T: ?Sized> Clients<T> {
    fn new(connect: Connect<T>) -> Self {
        Clients {
            connect,
            prefix: random_prefix(),
            keep_alive: Vec::new(),
            reserved: Vec::new(),
        }
    }

    fn reserve<I, S>(&mut self, prefixes: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.reserved.extend(prefixes.into_iter().map(Into::into));
    }

    fn key(&self, name: &str) -> String {
        format!("{}:{name}", self.prefix)
    }
}

/// How a lock backend is reached by the suite.
pub struct LockSuite {
    clients: Clients<dyn LockBackend>,
    /// Base TTL of the cases (default 400 ms; real servers want 200–500 ms).
    pub ttl: Duration,
    /// Tasks × increments in the counter case.
    pub counter: (usize, usize),
    /// Lateness allowed for a `lost()` signal past the local deadline, on
    /// top of one base TTL (scheduling delay on a loaded machine; the
    /// deadline itself is checked exactly). Default zero.
    pub slack: Duration,
}

impl LockSuite {
    /// `connect` returns a new client of the same backend each call (a
    /// "second client" for cases that need one). For in-process backends,
    /// return clones that share state.
    pub fn new<F, Fut, B>(connect: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = B> + Send + 'static,
        B: LockBackend,
    {
        let connect = Arc::new(connect);
        LockSuite {
            clients: Clients::new(Arc::new(move || {
                let fut = connect();
                Box::pin(async move { Arc::new(fut.await) as Arc<dyn LockBackend> })
            })),
            ttl: Duration::from_millis(400),
            counter: (4, 10),
            slack: Duration::ZERO,
        }
    }

    /// Keep `thing` (a server process, say) alive as long as the suite.
    #[must_use]
    pub fn keep_alive(mut self, thing: impl Any + Send + Sync) -> Self {
        self.clients.keep_alive.push(Box::new(thing));
        self
    }

    /// Set the base TTL.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Declare the backend's reserved key prefixes: the reserved-names case
    /// ([`reserved_cases`]) checks that every key under them is refused
    /// with `InvalidArgument`. None by default.
    #[must_use]
    pub fn reserved_prefixes<I, S>(mut self, prefixes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.clients.reserve(prefixes);
        self
    }

    /// Set the counter case's size.
    #[must_use]
    pub fn counter(mut self, tasks: usize, increments: usize) -> Self {
        self.counter = (tasks, increments);
        self
    }

    /// A new client.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the half-made client.
    pub async fn client(&self) -> Arc<dyn LockBackend> {
        (self.clients.connect)().await
    }

    /// A namespaced key for this run.
    pub fn key(&self, name: &str) -> String {
        self.clients.key(name)
    }

    /// Options with the base TTL and automatic renewal.
    pub fn options(&self) -> LockOptions {
        LockOptions::with_ttl(self.ttl).acquire_timeout(self.ttl * 4)
    }

    /// Options with the base TTL and no renewal.
    pub fn manual(&self) -> LockOptions {
        self.options().renewal(Renewal::Manual)
    }

    /// A manager over a new client.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the half-made client.
    pub async fn manager(&self, options: LockOptions) -> LockManager {
        LockManager::from_arc(self.client().await, options).expect("valid options")
    }
}

/// A suite for one lock kind: how its backend is reached, the base TTL,
/// the contention case's hold time and the loss slack.
macro_rules! kind_suite {
    ($(#[$doc:meta])* $suite:ident, $backend:ident, $manager:ident) => {
        $(#[$doc])*
        pub struct $suite {
            clients: Clients<dyn $backend>,
            /// Base TTL of the cases (default 400 ms).
            pub ttl: Duration,
            /// How long each holder of the contention case holds.
            pub hold: Duration,
            /// Slack allowed between a lost() signal and the local deadline
            /// (real time only; default 2 × the default TTL, as a loaded
            /// runner fires timers late).
            pub slack: Duration,
        }

        impl $suite {
            /// See [`LockSuite::new`].
            pub fn new<F, Fut, B>(connect: F) -> Self
            where
                F: Fn() -> Fut + Send + Sync + 'static,
                Fut: Future<Output = B> + Send + 'static,
                B: $backend,
            {
                let connect = Arc::new(connect);
                $suite {
                    clients: Clients::new(Arc::new(move || {
                        let fut = connect();
                        Box::pin(async move { Arc::new(fut.await) as Arc<dyn $backend> })
                    })),
                    ttl: Duration::from_millis(400),
                    hold: Duration::from_millis(10),
                    slack: Duration::from_millis(800),
                }
            }

            /// Keep `thing` (a server process, say) alive as long as the suite.
            #[must_use]
            pub fn keep_alive(mut self, thing: impl Any + Send + Sync) -> Self {
                self.clients.keep_alive.push(Box::new(thing));
                self
            }

            /// Set the base TTL.
            #[must_use]
            pub fn ttl(mut self, ttl: Duration) -> Self {
                self.ttl = ttl;
                self
            }

            /// Declare the backend's reserved key prefixes (see
            /// [`LockSuite::reserved_prefixes`]).
            #[must_use]
            pub fn reserved_prefixes<I, S>(mut self, prefixes: I) -> Self
            where
                I: IntoIterator<Item = S>,
                S: Into<String>,
            {
                self.clients.reserve(prefixes);
                self
            }

            /// A new client.
            ///
            /// # Cancel safety
            ///
            /// Cancel safe: dropping the future drops the half-made client.
            pub async fn client(&self) -> Arc<dyn $backend> {
                (self.clients.connect)().await
            }

            /// A namespaced name for this run.
            pub fn key(&self, name: &str) -> String {
                self.clients.key(name)
            }

            /// Options with the base TTL and automatic renewal.
            pub fn options(&self) -> LockOptions {
                LockOptions::with_ttl(self.ttl).acquire_timeout(self.ttl * 4)
            }

            /// Options with the base TTL and no renewal.
            pub fn manual(&self) -> LockOptions {
                self.options().renewal(Renewal::Manual)
            }

            /// A manager over a new client.
            ///
            /// # Cancel safety
            ///
            /// Cancel safe: dropping the future drops the half-made client.
            pub async fn manager(&self, options: LockOptions) -> $manager {
                $manager::with_options(self.client().await, options).expect("valid options")
            }
        }
    };
}

kind_suite!(
    /// How a semaphore backend is reached by the suite.
    SemaphoreSuite, SemaphoreBackend, SemaphoreManager
);
kind_suite!(
    /// How a multi-key lock backend is reached by the suite.
    MultiSuite, MultiLockBackend, MultiLockManager
);
kind_suite!(
    /// How a read-write lock backend is reached by the suite.
    RwSuite, RwLockBackend, RwLockManager
);
kind_suite!(
    /// How an election backend is reached by the suite.
    ElectionSuite, ElectionBackend, ElectionManager
);

impl MultiSuite {
    /// `n` keys of this run sharing one hash tag (one cluster slot).
    pub fn keys(&self, name: &str, n: usize) -> Vec<String> {
        let tag = self.clients.key(name);
        (0..n).map(|i| format!("{{{tag}}}:{i}")).collect()
    }
}

/// What a [`RenewManySuite`] case connects its backend to.
#[cfg(feature = "harness")]
#[derive(Debug)]
pub enum RenewManyTarget {
    /// One server.
    Server {
        /// Its `redis://` URL.
        url: String,
        /// The client's response timeout, if the case needs one (else the
        /// backend's test default).
        response_timeout: Option<Duration>,
    },
    /// A cluster (the one [`RenewManySuite::cluster`] gave).
    Cluster(Arc<crate::server::RedisCluster>),
}

#[cfg(feature = "harness")]
impl RenewManyTarget {
    /// `server`, with the backend's default response timeout.
    pub fn server(server: &crate::server::RedisServer) -> Self {
        RenewManyTarget::Server {
            url: server.url(),
            response_timeout: None,
        }
    }

    /// Set the response timeout (single server only).
    #[must_use]
    pub fn response_timeout(self, timeout: Duration) -> Self {
        match self {
            RenewManyTarget::Server { url, .. } => RenewManyTarget::Server {
                url,
                response_timeout: Some(timeout),
            },
            cluster @ RenewManyTarget::Cluster(_) => cluster,
        }
    }
}

/// How a script-based Redis lock backend's batched renewal is checked on
/// real servers (the [`renew_many_conformance!`](crate::renew_many_conformance) cases): where servers come
/// from, how the backend connects to them, and what the script runs per key.
#[cfg(feature = "harness")]
pub struct RenewManySuite {
    server: Arc<dyn Fn() -> BoxFuture<'static, crate::server::RedisServer> + Send + Sync>,
    cluster: Arc<dyn Fn() -> BoxFuture<'static, Arc<crate::server::RedisCluster>> + Send + Sync>,
    connect: Arc<dyn Fn(RenewManyTarget) -> BoxFuture<'static, Arc<dyn LockBackend>> + Send + Sync>,
    /// The command (as named in `INFO commandstats`) the batch script runs
    /// once per renewed key: `pexpire`, `cas`.
    pub per_key_command: &'static str,
}

#[cfg(feature = "harness")]
impl RenewManySuite {
    /// `server` starts a fresh server, `cluster` gives a 3-master cluster
    /// (fresh or shared: the cases use fixed key names, so one cluster case
    /// per test binary), `connect` connects a new client to a target.
    pub fn new<S, SFut, C, CFut, K, KFut, B>(per_key_command: &'static str, server: S, cluster: C, connect: K) -> Self
    where
        S: Fn() -> SFut + Send + Sync + 'static,
        SFut: Future<Output = crate::server::RedisServer> + Send + 'static,
        C: Fn() -> CFut + Send + Sync + 'static,
        CFut: Future<Output = Arc<crate::server::RedisCluster>> + Send + 'static,
        K: Fn(RenewManyTarget) -> KFut + Send + Sync + 'static,
        KFut: Future<Output = B> + Send + 'static,
        B: LockBackend,
    {
        RenewManySuite {
            server: Arc::new(move || Box::pin(server())),
            cluster: Arc::new(move || Box::pin(cluster())),
            connect: Arc::new(move |target| {
                let fut = connect(target);
                Box::pin(async move { Arc::new(fut.await) as Arc<dyn LockBackend> })
            }),
            per_key_command,
        }
    }

    /// A fresh server.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the half-started server.
    pub async fn server(&self) -> crate::server::RedisServer {
        (self.server)().await
    }

    /// A 3-master cluster.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe if the caller's cluster factory is.
    pub async fn cluster(&self) -> Arc<crate::server::RedisCluster> {
        (self.cluster)().await
    }

    /// A new client of `target`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the half-made client.
    pub async fn connect(&self, target: RenewManyTarget) -> Arc<dyn LockBackend> {
        (self.connect)(target).await
    }
}

/// How a versioned store is reached by the suite.
pub struct VersionedSuite {
    clients: Clients<dyn VersionedStore>,
    /// Base TTL for the expiry cases.
    pub ttl: Duration,
    /// Tasks × increments of the `update` case (default 8 × 100).
    pub updates: (usize, usize),
}

impl VersionedSuite {
    /// See [`LockSuite::new`].
    pub fn new<F, Fut, S>(connect: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = S> + Send + 'static,
        S: VersionedStore,
    {
        let connect = Arc::new(connect);
        VersionedSuite {
            clients: Clients::new(Arc::new(move || {
                let fut = connect();
                Box::pin(async move { Arc::new(fut.await) as Arc<dyn VersionedStore> })
            })),
            ttl: Duration::from_millis(300),
            updates: (8, 100),
        }
    }

    /// Keep `thing` alive as long as the suite.
    #[must_use]
    pub fn keep_alive(mut self, thing: impl Any + Send + Sync) -> Self {
        self.clients.keep_alive.push(Box::new(thing));
        self
    }

    /// Set the base TTL.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// A new client.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the half-made client.
    pub async fn client(&self) -> Arc<dyn VersionedStore> {
        (self.clients.connect)().await
    }

    /// A namespaced key for this run.
    pub fn key(&self, name: &str) -> String {
        self.clients.key(name)
    }
}
