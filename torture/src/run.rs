//! One scenario: start the servers, start the clients, inject the fault,
//! wait for every client (bounded), read the counter, check.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use lock_core::{LockOptions, ReplicaAck};
use lock_memory::MemoryBackend;
use lock_testkit::server::{
    EtcdCluster, Instances, NatsCluster, PgBouncer, PostgresPair, PostgresServer, RedisServer, RedisServerBuilder,
    SyncInterval, TcpProxy,
};
use tokio::time::Instant;

use crate::BoxResult;
use crate::backends::{Spec, build};
use crate::check::{self, Bounds, Measured};
use crate::client::{self, CounterClient, LockClient, Stall};
use crate::clock;
use crate::plan::{Backend, Claim, Fault, Scenario, Topology};
use crate::record::{Log, Snapshot};
use crate::switch::Switch;

/// Sizes and durations of a run.
#[derive(Debug, Clone)]
pub struct Params {
    /// Lock TTL.
    pub ttl: Duration,
    /// Length of a scenario (clients stop starting bodies after it).
    pub duration: Duration,
    /// When the fault starts.
    pub fault_at: Duration,
    /// Lock clients.
    pub lock_clients: usize,
    /// Counter clients.
    pub counter_clients: usize,
    /// Contended keys.
    pub keys: usize,
    /// Stated scheduling slack for loss signals.
    pub slack: Duration,
    /// Bound on a client finishing after the scenario ends.
    pub hang_bound: Duration,
    /// Critical sections a row runs on for (past `duration` and the
    /// recovery time) until it has seen them, up to `max_duration`: the
    /// row's statistical power.
    pub min_sections: usize,
    /// The longest a row runs on to reach `min_sections`.
    pub max_duration: Duration,
}

impl Params {
    /// The full run.
    pub fn full() -> Self {
        Params {
            ttl: Duration::from_millis(300),
            duration: Duration::from_secs(5),
            fault_at: Duration::from_millis(1500),
            lock_clients: 4,
            counter_clients: 2,
            keys: 4,
            slack: Duration::from_millis(100),
            hang_bound: Duration::from_secs(15),
            min_sections: 500,
            max_duration: Duration::from_secs(40),
        }
    }

    /// The CI run.
    pub fn quick() -> Self {
        Params {
            ttl: Duration::from_millis(200),
            duration: Duration::from_secs(3),
            fault_at: Duration::from_millis(800),
            min_sections: 0,
            ..Params::full()
        }
    }

    /// These parameters for a backend whose TTLs have a floor (etcd leases
    /// are whole seconds, at least 1 s on the harness): the TTL raised to
    /// it, the durations scaled with it.
    pub fn for_backend(&self, backend: Backend) -> Params {
        let floor = match backend {
            Backend::Etcd | Backend::Nats => Duration::from_secs(1),
            _ => return self.clone(),
        };
        if self.ttl >= floor {
            return self.clone();
        }
        let scale = floor.as_secs_f64() / self.ttl.as_secs_f64();
        Params {
            ttl: floor,
            duration: self.duration.mul_f64(scale),
            fault_at: self.fault_at.mul_f64(scale),
            slack: self.slack.mul_f64(scale),
            hang_bound: self.hang_bound.mul_f64(scale),
            max_duration: self.max_duration.mul_f64(scale),
            ..self.clone()
        }
    }

    /// Acquisitions must resume within this after a fault heals: 20 × TTL.
    pub fn recovery_bound(&self) -> Duration {
        self.ttl * 20
    }

    /// Keeps a row running (moves `stop` later) until `count()` reaches
    /// `min_sections` or the row has run `max_duration` from `begin`.
    pub(crate) async fn run_on_for_power(&self, begin: Instant, stop: &AtomicI64, count: impl Fn() -> usize) {
        let until = begin + self.max_duration;
        let ahead = i64::try_from(self.ttl.as_micros()).unwrap_or(i64::MAX);
        loop {
            let stop_at = stop.load(Ordering::SeqCst);
            if count() >= self.min_sections || Instant::now() >= until {
                return;
            }
            if clock::now().saturating_add(ahead) > stop_at {
                stop.fetch_max(clock::now().saturating_add(ahead), Ordering::SeqCst);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The end of a row, once its fault is injected: while a requested
    /// stall has not landed (the stalled client performs it in its next
    /// body, which on a loaded machine can come late) the clients run on,
    /// the stop moving later, up to the recovery bound past the planned end;
    /// only then is a request not yet started withdrawn (the fault could
    /// not be injected), while one in progress is waited for (it ends
    /// within its duration). Then the clients run on 6 × TTL past the heal,
    /// so that recovery is seen, and on for power (`count` critical
    /// sections). Returns the clients that did not finish within the hang
    /// bound of the stop.
    #[allow(clippy::too_many_arguments)] // one row's clock and clients
    pub(crate) async fn finish_row(
        &self,
        log: &Log,
        stall: Option<&Stall>,
        stop: &AtomicI64,
        begin: Instant,
        span_start: i64,
        planned_stop: Instant,
        count: impl Fn() -> usize,
        done: Vec<tokio::sync::oneshot::Receiver<()>>,
    ) -> usize {
        if let Some(st) = stall {
            let withdraw_at = planned_stop + self.recovery_bound();
            let give_up = withdraw_at + self.fault_len() * 2;
            let ahead = i64::try_from(self.ttl.as_micros()).unwrap_or(i64::MAX);
            while log.healed_at().is_none() && Instant::now() < give_up {
                if st.is_requested() {
                    if Instant::now() >= withdraw_at && st.withdraw() {
                        break;
                    }
                    stop.fetch_max(clock::now().saturating_add(ahead), Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        if let Some(healed) = log.healed_at() {
            let after = i64::try_from((self.ttl * 6).as_micros()).unwrap_or(i64::MAX);
            stop.fetch_max(healed.saturating_add(after), Ordering::SeqCst);
        }
        self.run_on_for_power(begin, stop, count).await;
        let stop_at =
            begin + Duration::from_micros(u64::try_from(stop.load(Ordering::SeqCst) - span_start).unwrap_or(0));
        tokio::time::sleep_until(stop_at).await;
        let mut hangs = 0;
        for rx in done {
            if tokio::time::timeout_at(stop_at + self.hang_bound, rx).await.is_err() {
                hangs += 1;
            }
        }
        hangs
    }

    pub(crate) fn fault_len(&self) -> Duration {
        self.ttl * 3
    }

    pub(crate) fn bounds(&self) -> Bounds {
        let us = |d: Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        Bounds {
            slack_us: us(self.slack),
            recovery_us: us(self.recovery_bound()),
        }
    }
}

/// The user's deployment (`--url`).
#[derive(Debug, Clone)]
pub struct External {
    /// Their URL.
    pub url: String,
    /// Its address, resolved.
    pub addr: SocketAddr,
}

/// The result of one scenario.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// What ran.
    pub scenario: Scenario,
    /// Its seed.
    pub seed: u64,
    /// What was measured.
    pub measured: Measured,
    /// Broken claims (empty: the row holds).
    pub violations: Vec<String>,
    /// The records (for the timeline).
    pub snapshot: Snapshot,
    /// Scenario start and end on the run clock, µs.
    pub span: (i64, i64),
}

pub(crate) enum Env {
    Memory(MemoryBackend),
    Single {
        server: Box<RedisServer>,
        proxies: Vec<TcpProxy>,
    },
    Pair {
        primary: Box<RedisServer>,
        replica: Box<RedisServer>,
        /// The replication link runs through this proxy, so that it can lag.
        link: TcpProxy,
        switches: Vec<Switch>,
        promoted: bool,
        _new_replica: Option<Box<RedisServer>>,
    },
    Five(Instances),
    /// A three-member etcd cluster, its peer traffic through proxies
    /// (for the partition).
    Etcd(Box<EtcdCluster>),
    /// A three-node JetStream cluster (the bucket `torture`, R3).
    Nats(Box<NatsCluster>),
    /// One PostgreSQL server (fsync on), one proxy per client.
    Pg {
        server: Box<PostgresServer>,
        proxies: Vec<TcpProxy>,
    },
    External {
        url: String,
        proxies: Vec<TcpProxy>,
    },
    /// Servers and clients on network-namespace hosts.
    Net(Box<crate::netrows::NetEnv>),
    /// A Sentinel group: primary, 2 replicas, 3 sentinels.
    Sentinel(Box<crate::sentinel::SentinelEnv>),
    /// One PostgreSQL server behind PgBouncer (transaction mode), one proxy
    /// per client in front of PgBouncer.
    PgBouncer {
        server: Box<PostgresServer>,
        bouncer: Box<PgBouncer>,
        proxies: Vec<TcpProxy>,
    },
    /// A PostgreSQL primary and its standby, clients through switches that
    /// move to the standby when it is promoted.
    PgPair {
        pair: Box<PostgresPair>,
        /// The asynchronous standby's replication link runs through this
        /// proxy, so that it can lag.
        link: Option<TcpProxy>,
        switches: Vec<Switch>,
        promoted: bool,
    },
}

pub(crate) fn server_builder(backend: Backend) -> RedisServerBuilder {
    let b = RedisServer::builder();
    if backend == Backend::Tair { b.tair_module() } else { b }
}

pub(crate) async fn setup(sc: &Scenario, clients: usize, ext: Option<&External>) -> BoxResult<Env> {
    Ok(match sc.topology {
        Topology::InProcess => Env::Memory(MemoryBackend::new()),
        Topology::Single | Topology::PgAsyncCommit | Topology::PgRepeatableRead
            if matches!(sc.backend, Backend::Postgres | Backend::PostgresAdvisory) =>
        {
            let server = match sc.topology {
                // A crash loses every commit of the last 10 s the backend
                // did not make durable itself.
                Topology::PgAsyncCommit => PostgresServer::builder()
                    .setting("synchronous_commit", "off")
                    .setting("wal_writer_delay", "10000ms"),
                Topology::PgRepeatableRead => {
                    PostgresServer::builder().setting("default_transaction_isolation", "repeatable read")
                }
                _ => PostgresServer::builder(),
            }
            .start()
            .await?;
            let mut proxies = Vec::with_capacity(clients);
            for _ in 0..clients {
                proxies.push(TcpProxy::start(server.addr()).await?);
            }
            Env::Pg {
                server: Box::new(server),
                proxies,
            }
        }
        Topology::PgBouncer => {
            let server = PostgresServer::start().await?;
            let bouncer = PgBouncer::start(&server).await?;
            let mut proxies = Vec::with_capacity(clients);
            for _ in 0..clients {
                proxies.push(TcpProxy::start(bouncer.addr()).await?);
            }
            Env::PgBouncer {
                server: Box::new(server),
                bouncer: Box::new(bouncer),
                proxies,
            }
        }
        Topology::Pair if sc.backend == Backend::Postgres => {
            let synchronous = sc.fault != Fault::AsyncStandbyPromoted;
            let pair = PostgresPair::start(PostgresServer::builder(), synchronous).await?;
            let link = if synchronous {
                None
            } else {
                Some(lagging_link(&pair).await?)
            };
            let mut switches = Vec::with_capacity(clients);
            for _ in 0..clients {
                switches.push(Switch::start(pair.primary().addr()).await?);
            }
            Env::PgPair {
                pair: Box::new(pair),
                link,
                switches,
                promoted: false,
            }
        }
        Topology::Single => {
            let mut b = server_builder(sc.backend);
            if sc.fault == Fault::KillRestart {
                b = b.persistence(true).args(["--appendfsync", "always"]);
            }
            let server = b.start().await?;
            let mut proxies = Vec::with_capacity(clients);
            for _ in 0..clients {
                proxies.push(TcpProxy::start(server.addr()).await?);
            }
            Env::Single {
                server: Box::new(server),
                proxies,
            }
        }
        Topology::Pair => {
            let builder = server_builder(sc.backend);
            let primary = builder.start().await?;
            let link = TcpProxy::start(primary.addr()).await?;
            let replica = builder
                .clone()
                .args(["--replicaof", "127.0.0.1"])
                .arg(link.port().to_string())
                .start()
                .await?;
            wait_for_link(&replica).await?;
            let mut switches = Vec::with_capacity(clients);
            for _ in 0..clients {
                switches.push(Switch::start(primary.addr()).await?);
            }
            Env::Pair {
                primary: Box::new(primary),
                replica: Box::new(replica),
                link,
                switches,
                promoted: false,
                _new_replica: None,
            }
        }
        Topology::PgAsyncCommit | Topology::PgRepeatableRead => {
            return Err(format!("{} is a PostgreSQL topology", sc.topology.label()).into());
        }
        Topology::NetSingle | Topology::NetFive | Topology::NetCluster | Topology::NetSentinel => {
            Env::Net(Box::new(crate::netrows::NetEnv::setup(sc, clients).await?))
        }
        Topology::Five => Env::Five(Instances::start(5, RedisServer::builder()).await?),
        Topology::Sentinel => Env::Sentinel(Box::new(crate::sentinel::SentinelEnv::setup(sc).await?)),
        Topology::Three => Env::Etcd(Box::new(EtcdCluster::partitionable(3).await?)),
        // The partition needs the routes through proxies (an extra hop the
        // other rows go without).
        Topology::NatsR3 if sc.fault == Fault::LeaderPartitioned => {
            Env::Nats(Box::new(NatsCluster::partitionable(3).await?))
        }
        Topology::NatsR3 => Env::Nats(Box::new(NatsCluster::start(3, SyncInterval::Always).await?)),
        Topology::NatsR3DefaultSync => Env::Nats(Box::new(NatsCluster::start(3, SyncInterval::Default).await?)),
        Topology::External => {
            let ext = ext.ok_or("an external scenario needs --url")?;
            let mut proxies = Vec::with_capacity(clients);
            for _ in 0..clients {
                proxies.push(TcpProxy::start(ext.addr).await?);
            }
            Env::External {
                url: ext.url.clone(),
                proxies,
            }
        }
    })
}

/// Route the standby's replication connection through a proxy (so that a
/// fault can hold it: a lagging standby) and wait until it streams through it.
async fn lagging_link(pair: &PostgresPair) -> BoxResult<TcpProxy> {
    let link = TcpProxy::start(pair.primary().addr()).await?;
    let standby = pair.standby();
    standby
        .psql(&format!(
            "ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port={} user={}'",
            link.port(),
            lock_testkit::server::PG_USER
        ))
        .await?;
    standby.psql("SELECT pg_reload_conf()").await?;
    let give_up = Instant::now() + lock_testkit::server::CONVERGE_TIMEOUT;
    let want = link.port().to_string();
    loop {
        let port = standby
            .psql("SELECT sender_port FROM pg_stat_wal_receiver WHERE status = 'streaming'")
            .await?;
        if port.trim() == want {
            return Ok(link);
        }
        if Instant::now() >= give_up {
            return Err(format!("the standby did not stream through its link (sender port {port:?})").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `url` with its `host:port` replaced by `addr` (credentials and db kept).
pub fn with_addr(url: &str, addr: SocketAddr) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let (auth, hostpath) = match rest.rsplit_once('@') {
        Some((a, h)) => (format!("{a}@"), h),
        None => (String::new(), rest),
    };
    let path = hostpath.find('/').map_or("", |i| &hostpath[i..]);
    Some(format!("{scheme}://{auth}{addr}{path}"))
}

/// The `host:port` of a URL (port 6379 when absent).
pub fn host_port(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let hostpath = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let host = hostpath.split('/').next()?;
    if host.is_empty() {
        return None;
    }
    Some(if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:6379")
    })
}

impl Env {
    /// The servers to sample (none in process or for `--url`).
    pub(crate) fn servers(&self) -> Vec<&RedisServer> {
        match self {
            // The soak samples Redis-family servers only (INFO, DBSIZE).
            Env::Memory(_)
            | Env::External { .. }
            | Env::Pg { .. }
            | Env::PgBouncer { .. }
            | Env::PgPair { .. }
            | Env::Net(_)
            | Env::Etcd(_)
            | Env::Nats(_) => Vec::new(),
            Env::Single { server, .. } => vec![server],
            Env::Pair { primary, replica, .. } => vec![primary, replica],
            Env::Five(nodes) => nodes.servers().iter().collect(),
            Env::Sentinel(s) => s.nodes().iter().collect(),
        }
    }

    pub(crate) fn url(&self, client: usize) -> String {
        match self {
            Env::Memory(_) | Env::Five(_) => String::new(),
            Env::Net(_) => crate::netrows::NetEnv::url(client),
            // Client 0 talks to member 0 only (the partition cuts it off);
            // the others to every member.
            Env::Etcd(cluster) if client == 0 => cluster.endpoint(0),
            Env::Etcd(cluster) => cluster.endpoints().join(","),
            // Likewise client 0 to node 0 only on a partitionable cluster.
            Env::Nats(cluster) if client == 0 && cluster.is_partitionable() => {
                format!("nats://{}?bucket={NATS_BUCKET}&replicas=3", cluster.addr(0))
            }
            Env::Nats(cluster) => nats_url(cluster),
            Env::Sentinel(s) => s.url(),
            Env::Single { proxies, .. } => proxies[client].url(),
            Env::Pg { server, proxies } => with_addr(&server.url(), proxies[client].addr()).unwrap_or_default(),
            Env::Pair { switches, .. } => switches[client].url(),
            Env::PgBouncer { bouncer, proxies, .. } => {
                with_addr(&bouncer.url(), proxies[client].addr()).unwrap_or_default()
            }
            Env::PgPair { pair, switches, .. } => {
                with_addr(&pair.primary().url(), switches[client].addr()).unwrap_or_default()
            }
            Env::External { url, proxies } => with_addr(url, proxies[client].addr()).unwrap_or_else(|| url.clone()),
        }
    }

    pub(crate) fn direct_url(&self) -> String {
        match self {
            Env::Memory(_) | Env::Five(_) => String::new(),
            Env::Net(_) => crate::netrows::NetEnv::direct_url(),
            Env::Etcd(cluster) => cluster.endpoints().join(","),
            Env::Nats(cluster) => nats_url(cluster),
            Env::Sentinel(s) => s.url(),
            Env::Single { server, .. } => server.url(),
            Env::Pg { server, .. } | Env::PgBouncer { server, .. } => server.url(),
            Env::PgPair { pair, promoted, .. } => {
                if *promoted {
                    pair.standby().url()
                } else {
                    pair.primary().url()
                }
            }
            Env::Pair {
                primary,
                replica,
                promoted,
                ..
            } => {
                if *promoted {
                    replica.url()
                } else {
                    primary.url()
                }
            }
            Env::External { url, .. } => url.clone(),
        }
    }

    pub(crate) fn spec(&self, backend: Backend, url: String, ack: Option<ReplicaAck>) -> Spec {
        match (self, backend) {
            (Env::Memory(m), _) => Spec::Memory(m.clone()),
            (Env::Net(n), _) => n.spec(&url, ack),
            (Env::Five(nodes), _) => Spec::Redlock { urls: nodes.urls() },
            (_, Backend::Tair) => Spec::Tair { url, ack },
            (_, Backend::Postgres) => Spec::Postgres { url, advisory: false },
            (_, Backend::PostgresAdvisory) => Spec::Postgres { url, advisory: true },
            (_, Backend::Etcd) => Spec::Etcd { endpoints: url },
            (_, Backend::Nats) => Spec::Nats { url },
            _ => Spec::Lua { url, ack },
        }
    }
}

/// Inject `fault`; returns once it healed. Windows are recorded in `log`
/// (the stall by the stalled client itself).
pub(crate) async fn inject(
    env: &mut Env,
    sc: &Scenario,
    p: &Params,
    log: &Log,
    stall: Option<&Arc<Stall>>,
    down_since: i64,
) -> BoxResult<()> {
    let len = p.fault_len();
    let from = clock::now();
    match (sc.fault, env) {
        (Fault::Stall, _) => {
            if let Some(s) = stall {
                s.request();
            }
            return Ok(());
        }
        (Fault::Pause, Env::Single { server, .. }) => {
            server.pause()?;
            tokio::time::sleep(len).await;
            server.resume()?;
        }
        (Fault::KillRestart, Env::Single { server, .. }) => {
            server.kill()?;
            tokio::time::sleep(p.ttl).await;
            server.restart_keeping_data().await?;
        }
        (Fault::RestartEmpty, Env::Single { server, .. }) => server.restart_empty().await?,
        (Fault::ReplicaPausedAck, Env::Pair { replica, .. }) => {
            replica.pause()?;
            tokio::time::sleep(len).await;
            replica.resume()?;
        }
        (Fault::Pause, Env::Pg { server, .. }) => {
            server.pause()?;
            tokio::time::sleep(len).await;
            server.resume()?;
        }
        (Fault::KillRestart, Env::Pg { server, .. }) => {
            server.kill()?;
            tokio::time::sleep(p.ttl).await;
            server.restart().await?;
        }
        (Fault::RestartAtOnce, Env::Pg { server, .. }) => {
            server.kill()?;
            server.restart().await?;
        }
        (Fault::Blackhole, Env::Single { proxies, .. } | Env::External { proxies, .. } | Env::Pg { proxies, .. }) => {
            proxies[0].set_blackhole(true);
            tokio::time::sleep(len).await;
            proxies[0].set_blackhole(false);
            proxies[0].cut_all();
        }
        (
            Fault::Failover | Fault::FailoverAck,
            Env::Pair {
                primary,
                replica,
                link,
                switches,
                promoted,
                _new_replica,
            },
        ) => {
            // A lagging replica: its link held (as a slow or partitioned
            // replica's would be) while the primary keeps granting and
            // renewing; then the primary dies, what was held back is
            // dropped, and the replica is promoted with what it had.
            link.set_blackhole(true);
            tokio::time::sleep(p.ttl).await;
            primary.kill()?;
            link.cut_all();
            let reply = replica.cmd(&["REPLICAOF", "NO", "ONE"]).await?;
            if !reply.is_ok() {
                return Err(format!("REPLICAOF NO ONE answered {reply:?}").into());
            }
            for s in switches.iter() {
                s.retarget(replica.addr());
            }
            *promoted = true;
            log.window(from, clock::now());
            // A fresh replica for the new primary, so that WAIT can be
            // satisfied again (liveness with ReplicaAck).
            let port = replica.port().to_string();
            let replica = server_builder(sc.backend)
                .args(["--replicaof", "127.0.0.1", port.as_str()])
                .start()
                .await?;
            *_new_replica = Some(Box::new(replica));
            return Ok(());
        }
        (
            Fault::SyncStandbyPromoted | Fault::AsyncStandbyPromoted,
            Env::PgPair {
                pair,
                link,
                switches,
                promoted,
            },
        ) => {
            // Asynchronous: the standby's link held (a lagging standby)
            // while the primary keeps granting and renewing; then the
            // primary dies, what was held back is dropped, and the standby
            // is promoted with what it had. Synchronous: the primary dies
            // and its standby, which had every confirmed commit, is promoted.
            if let Some(link) = link.as_ref() {
                link.set_blackhole(true);
                tokio::time::sleep(p.ttl).await;
            }
            pair.primary().kill()?;
            if let Some(link) = link.as_ref() {
                link.cut_all();
            }
            pair.fail_over().await?;
            for s in switches.iter() {
                s.retarget(pair.standby().addr());
            }
            *promoted = true;
        }
        (Fault::NodesPaused(n), Env::Five(nodes)) => {
            for s in &nodes.servers()[..n] {
                s.pause()?;
            }
            tokio::time::sleep(len).await;
            for s in &nodes.servers()[..n] {
                s.resume()?;
            }
        }
        (Fault::NodesKilledDelayed(n), Env::Five(nodes)) => {
            for s in &nodes.servers()[..n] {
                s.kill()?;
            }
            // The delayed restart: longer than any lease the nodes granted.
            tokio::time::sleep(p.ttl + p.ttl / 2).await;
            futures::future::try_join_all(nodes.servers()[..n].iter().map(RedisServer::restart_empty)).await?;
        }
        (Fault::NodesRestartedEmpty(n), Env::Five(nodes)) => {
            futures::future::try_join_all(nodes.servers()[..n].iter().map(RedisServer::restart_empty)).await?;
        }
        // Paused before the clients started (see `run`): the fault heals here.
        (Fault::NodesDownAtStart(n), Env::Five(nodes)) => {
            for s in &nodes.servers()[..n] {
                s.resume()?;
            }
            log.window(down_since, clock::now());
            return Ok(());
        }
        (
            Fault::ClientPartitioned
            | Fault::RedlockPartition(_)
            | Fault::ClusterSplit
            | Fault::ClusterSplitAck
            | Fault::ClusterMasterPausedAck
            | Fault::SentinelSplit
            | Fault::SentinelSplitAck
            | Fault::SentinelSplitMinReplicas,
            Env::Net(n),
        ) => {
            return n.inject(sc, p, log).await;
        }
        (Fault::LeaderKill, Env::Etcd(cluster)) => {
            let leader = cluster.leader(p.recovery_bound()).await?;
            cluster.kill(leader)?;
            tokio::time::sleep(p.ttl).await;
            cluster.restart(leader).await?;
        }
        (Fault::LeaderPause, Env::Etcd(cluster)) => {
            let leader = cluster.leader(p.recovery_bound()).await?;
            cluster.pause(leader)?;
            tokio::time::sleep(len).await;
            cluster.resume(leader)?;
        }
        (Fault::LeaderKill, Env::Nats(cluster)) => {
            let leader = cluster.stream_leader(NATS_STREAM, p.recovery_bound()).await?;
            cluster.kill(leader)?;
            tokio::time::sleep(p.ttl).await;
            cluster.restart(leader).await?;
        }
        (Fault::LeaderPause, Env::Nats(cluster)) => {
            let leader = cluster.stream_leader(NATS_STREAM, p.recovery_bound()).await?;
            cluster.pause(leader)?;
            tokio::time::sleep(len).await;
            cluster.resume(leader)?;
        }
        (Fault::ClusterRestart, Env::Nats(cluster)) => {
            for i in 0..cluster.len() {
                cluster.kill(i)?;
            }
            tokio::time::sleep(p.ttl).await;
            cluster.restart_all().await?;
        }
        (Fault::LeaderPartitioned, Env::Nats(cluster)) => {
            // Node 0 (client 0's only node) leads the bucket's stream when
            // the cut starts: a leader on the minority side.
            cluster.move_stream_leader(NATS_STREAM, 0, p.recovery_bound()).await?;
            let from = clock::now();
            cluster.partition(&[0])?;
            tokio::time::sleep(len).await;
            cluster.heal()?;
            log.window(from, clock::now());
            return Ok(());
        }
        (Fault::Partition, Env::Etcd(cluster)) => {
            cluster.partition(&[0])?;
            tokio::time::sleep(len).await;
            cluster.heal()?;
        }
        (f, Env::Sentinel(s)) if crate::sentinel::handles(f) => return s.inject(sc, p, log).await,
        (Fault::None | Fault::NoLock, _) => return Ok(()),
        (f, _) => return Err(format!("fault {f} does not apply to this topology").into()),
    }
    log.window(from, clock::now());
    Ok(())
}

/// The bucket of the NATS rows, and its stream.
const NATS_BUCKET: &str = "torture";
const NATS_STREAM: &str = "KV_torture";

/// Every client reaches every node of the cluster; the bucket has three
/// replicas.
fn nats_url(cluster: &NatsCluster) -> String {
    format!("{}?bucket={NATS_BUCKET}&replicas=3", cluster.url())
}

/// Wait (bounded) until the replica's link to its primary is up.
async fn wait_for_link(replica: &RedisServer) -> BoxResult<()> {
    let give_up = Instant::now() + lock_testkit::server::CONVERGE_TIMEOUT;
    loop {
        let info = replica.info("replication").await?;
        if info.get("master_link_status").map(String::as_str) == Some("up") {
            return Ok(());
        }
        if Instant::now() >= give_up {
            return Err("the replica did not sync with its primary".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) async fn read_counter(spec: &Spec, key: &str, ttl: Duration, log: &Log) -> Option<u64> {
    let give_up = Instant::now() + Duration::from_secs(5);
    let mut last = String::new();
    while Instant::now() < give_up {
        match build(spec, ttl * 2).await {
            Ok(built) => match built.store {
                Some(store) => match store.get(key).await {
                    Ok(v) => return client::parse(v.as_ref().map(|v| v.value.as_slice())),
                    Err(e) => last = e.to_string(),
                },
                None => return None,
            },
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    log.error(format!(
        "final read of the counter failed: {}",
        last.chars().take(80).collect::<String>()
    ));
    None
}

/// Run one scenario.
///
/// # Errors
/// Setting up its servers or clients failed.
pub async fn run(sc: Scenario, idx: usize, seed: u64, p: &Params, ext: Option<&External>) -> BoxResult<Outcome> {
    if crate::process::handles(sc.fault) {
        return crate::process::run(sc, idx, seed, p).await;
    }
    let scaled = p.for_backend(sc.backend);
    let p = &scaled;
    let log = Arc::new(Log::default());
    let clients = p.lock_clients + p.counter_clients;
    let mut env = setup(&sc, clients, ext).await?;
    let prefix = format!("verrou-torture:{seed:016x}:{idx}");
    // On a cluster every key of the row shares one slot (a hash tag), so
    // that a fault on that slot's master meets every holder and the counter.
    let prefix = if sc.topology == Topology::NetCluster {
        format!("{{{prefix}}}")
    } else {
        prefix
    };
    let keys = Arc::new((0..p.keys).map(|k| format!("{prefix}:lock{k}")).collect::<Vec<_>>());
    let counter = format!("{prefix}:counter");
    let ack = matches!(
        sc.fault,
        Fault::FailoverAck
            | Fault::ReplicaPausedAck
            | Fault::ClusterSplitAck
            | Fault::ClusterMasterPausedAck
            | Fault::SentinelKilledAck
            | Fault::SentinelPausedAck
            | Fault::SentinelDownAck
            | Fault::SentinelSplitAck
    )
    .then(|| ReplicaAck::new(1, p.ttl / 2));
    let options = LockOptions::with_ttl(p.ttl)
        .acquire_timeout(p.ttl * 6)
        .op_timeout(p.ttl / 2);
    let stall = (sc.fault == Fault::Stall).then(|| Stall::new(p.fault_len()));
    // Starting during a fault: these nodes are down before any client connects.
    let down_since = clock::now();
    if let (Fault::NodesDownAtStart(n), Env::Five(nodes)) = (sc.fault, &env) {
        for s in &nodes.servers()[..n] {
            s.pause()?;
        }
    }
    let begin = Instant::now();
    let span_start = clock::at(begin);
    let planned_stop = begin + p.duration;
    let stop = Arc::new(AtomicI64::new(clock::at(planned_stop)));
    let mut done = Vec::with_capacity(clients);
    let first_in_body = Arc::new(AtomicBool::new(false));
    for i in 0..p.lock_clients {
        let c = LockClient {
            id: i,
            spec: env.spec(sc.backend, env.url(i), ack),
            keys: keys.clone(),
            options: options.clone(),
            seed: seed ^ (0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(i as u64 + 1)),
            stop: stop.clone(),
            stall: if i == 0 { stall.clone() } else { None },
            control: sc.backend == Backend::Control,
            long_until: clock::at(begin + p.fault_at + p.ttl * 2 + p.ttl * 3),
            in_body: if i == 0 {
                first_in_body.clone()
            } else {
                Arc::new(AtomicBool::new(false))
            },
            log: log.clone(),
        };
        done.push(client::spawn(format!("lock-client-{i}"), move || c.run())?);
    }
    let has_store = matches!(
        sc.backend,
        Backend::Memory
            | Backend::Lua
            | Backend::Tair
            | Backend::Postgres
            | Backend::PostgresAdvisory
            | Backend::Etcd
            | Backend::Nats
    );
    if has_store {
        for j in 0..p.counter_clients {
            let i = p.lock_clients + j;
            let c = CounterClient {
                spec: env.spec(sc.backend, env.url(i), ack),
                key: counter.clone(),
                op_bound: p.ttl * 4,
                seed: seed ^ (0xbf58_476d_1ce4_e5b9_u64.wrapping_mul(i as u64 + 1)),
                stop: stop.clone(),
                log: log.clone(),
            };
            done.push(client::spawn(format!("counter-client-{j}"), move || c.run())?);
        }
    }
    tokio::time::sleep_until(begin + p.fault_at).await;
    // Start the fault while client 0 holds a lock (bounded wait), so that
    // it hits a holder; the stall waits for a body by itself.
    let wait_for_holder = Instant::now() + p.ttl * 2;
    while sc.fault != Fault::Stall && !first_in_body.load(Ordering::SeqCst) && Instant::now() < wait_for_holder {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // A fault that lasts past the planned end (a cluster failover) keeps
    // the clients running until it heals: the recovery after it is seen.
    let keep_running = async {
        let ahead = i64::try_from(p.ttl.as_micros()).unwrap_or(i64::MAX);
        loop {
            stop.fetch_max(clock::now().saturating_add(ahead), Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let injected = tokio::select! {
        r = inject(&mut env, &sc, p, &log, stall.as_ref(), down_since) => r,
        () = keep_running => Ok(()),
    };
    if let Err(e) = injected {
        log.error(format!("fault injection failed: {e}"));
    }
    let hangs = p
        .finish_row(
            &log,
            stall.as_deref(),
            &stop,
            begin,
            span_start,
            planned_stop,
            || log.bodies(),
            done,
        )
        .await;
    let span_end = clock::now();
    let final_value = if has_store {
        let spec = env.spec(sc.backend, env.direct_url(), None);
        if let Env::Single { server, .. } = &env
            && !server.is_running()
        {
            log.error(format!(
                "server not running after the fault; log: {}",
                server.log_tail(3)
            ));
        }
        Some(read_counter(&spec, &counter, p.ttl, &log).await)
    } else {
        None
    };
    let snapshot = log.snapshot();
    let measured = check::measure(&snapshot, p.bounds(), sc.fault.injects(), final_value, hangs);
    let mut violations = judge(&sc, &measured);
    if let Env::Net(_) | Env::Sentinel(_) = &env {
        violations.extend(crate::netrows::recovery_violations(&snapshot, p));
    }
    if let Env::Sentinel(s) = &env {
        crate::sentinel::record(&sc, s, &snapshot);
    }
    if let Env::Net(n) = &env
        && let Some(note) = n.sentinel_note(&snapshot)
    {
        crate::sentinel::record_note(&sc, note);
    }
    if let Fault::NodesDownAtStart(_) = sc.fault {
        // The point of the row: clients start and take locks while nodes are down.
        let healed = snapshot.windows.iter().map(|w| w.to).max().unwrap_or(i64::MIN);
        if !snapshot.bodies.iter().any(|b| b.start < healed) {
            violations.push("no lock was taken while the nodes were down: the clients did not start".into());
        }
    }
    Ok(Outcome {
        scenario: sc,
        seed,
        measured,
        violations,
        snapshot,
        span: (span_start, span_end),
    })
}

/// The claims a row breaks.
pub fn judge(sc: &Scenario, m: &Measured) -> Vec<String> {
    let mut v = Vec::new();
    if m.hangs > 0 {
        v.push(format!("{} client task(s) did not finish within the bound", m.hangs));
    }
    match sc.claim {
        Claim::Unsafe => {}
        Claim::Control => {
            if m.overlaps == 0 {
                v.push("the control run (no lock) showed no overlap: the checker cannot see one".into());
            }
        }
        Claim::Safe | Claim::Fenced => {
            if m.acquisitions == 0 {
                v.push("no acquisitions".into());
            }
            if m.fault_missing {
                v.push("the fault was not injected".into());
            }
            if m.stuck {
                v.push("acquisitions did not resume within 20 × TTL of the fault healing".into());
            }
            if m.overlaps > 0 {
                v.push(format!("{} overlaps inside validity windows", m.overlaps));
            }
            if m.stale_accepted > 0 {
                v.push(format!("{} stale writes accepted", m.stale_accepted));
            }
            if m.late_losses > 0 {
                v.push(format!("{} loss signals later than deadline + slack", m.late_losses));
            }
            if let Some(l) = &m.linear {
                if let Some(why) = &l.violation {
                    v.push(format!("counter history not linearizable: {why}"));
                }
                if l.final_value.is_none() {
                    v.push("the counter could not be read after the run".into());
                }
            }
        }
    }
    v
}
