//! Which scenarios run: backend × topology × fault, and what the docs
//! claim for each.

use std::fmt;

/// The backend under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// lock-memory, shared in process.
    Memory,
    /// The same bodies without any lock (the checker must see overlaps).
    Control,
    /// lock-redis-lua, fencing on.
    Lua,
    /// lock-tair (TairString module), fencing on.
    Tair,
    /// lock-redlock over five Lua nodes.
    Redlock,
    /// lock-postgres (fencing always on).
    Postgres,
    /// lock-postgres's advisory mode (session advisory locks on multiplexed
    /// sessions), fencing on; the counter on the lease mode's versioned
    /// store of the same server.
    PostgresAdvisory,
    /// lock-etcd on a three-member cluster (fencing always on: the create
    /// revision).
    Etcd,
    /// lock-nats on a three-node JetStream cluster, an R3 bucket (fencing
    /// always on: the revision).
    Nats,
}

impl Backend {
    /// Name in the table.
    pub fn label(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Control => "control (no lock)",
            Backend::Lua => "redis-lua",
            Backend::Tair => "tair",
            Backend::Redlock => "redlock",
            Backend::Postgres => "postgres",
            Backend::PostgresAdvisory => "postgres advisory",
            Backend::Etcd => "etcd",
            Backend::Nats => "nats",
        }
    }

    /// Whether its servers are Redis-family (redis-lua, Tair, Redlock's nodes).
    pub fn is_redis_family(self) -> bool {
        matches!(self, Backend::Lua | Backend::Tair | Backend::Redlock)
    }
}

/// The fault injected during contention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// No fault.
    None,
    /// One client's runtime stopped (a GC pause) inside a critical section, 3 × TTL.
    Stall,
    /// The server SIGSTOPped for 3 × TTL.
    Pause,
    /// The server SIGKILLed, restarted from its AOF (`appendfsync always`) a TTL later.
    KillRestart,
    /// The server SIGKILLed and restarted at once without its data.
    RestartEmpty,
    /// The server SIGKILLed and restarted at once with its data (what ends
    /// with a server's sessions, not with its data: advisory locks).
    RestartAtOnce,
    /// One client's connections blackholed by its proxy for 3 × TTL.
    Blackhole,
    /// The replica's link held for a TTL (lagging), then the primary
    /// SIGKILLed, the held data dropped, the replica promoted (`REPLICAOF NO ONE`), clients moved to it.
    Failover,
    /// The same with `ReplicaAck` (WAIT 1) on acquires and versioned writes.
    FailoverAck,
    /// The replica SIGSTOPped for 3 × TTL under `ReplicaAck` (WAIT 1):
    /// grants wait their `WAIT` out, callers give up, their clean-ups must
    /// not leave holders nobody owns.
    ReplicaPausedAck,
    /// `n` Redlock nodes SIGSTOPped for 3 × TTL.
    NodesPaused(usize),
    /// `n` Redlock nodes SIGKILLed, restarted empty after the delayed-restart wait (> TTL).
    NodesKilledDelayed(usize),
    /// `n` Redlock nodes restarted empty at once (beyond what Redlock tolerates).
    NodesRestartedEmpty(usize),
    /// `n` Redlock nodes SIGSTOPped before the clients start (they connect
    /// to the others and start), resumed at the fault time.
    NodesDownAtStart(usize),
    /// The bodies run without the lock.
    NoLock,
    /// Client 0's host partitioned from the server (and the other clients)
    /// for 3 × TTL: silent, connections stay open (network namespaces).
    ClientPartitioned,
    /// Client 0 and `n` of the 5 Redlock nodes partitioned from the rest
    /// for 3 × TTL (network namespaces).
    RedlockPartition(usize),
    /// Redis Cluster split-brain: the master of the counter's slot, client
    /// 0 and the last counter client partitioned into the minority until
    /// the majority has promoted that master's replica, then 3 × TTL more;
    /// healed (network namespaces).
    ClusterSplit,
    /// The same with `ReplicaAck` (WAIT 1) on acquires, renewals and
    /// versioned writes.
    ClusterSplitAck,
    /// Redis Cluster failover: the master of the row's slot (every key of
    /// the row shares one) SIGSTOPped until the others have promoted its
    /// replica, then 3 × TTL more; resumed, it rejoins as a replica.
    /// With `ReplicaAck` (WAIT 1).
    ClusterMasterPausedAck,
    /// PostgreSQL: the primary SIGKILLed, its synchronous standby promoted,
    /// clients moved to it.
    SyncStandbyPromoted,
    /// PostgreSQL: the asynchronous standby's link held for a TTL
    /// (lagging), the primary SIGKILLed, the standby promoted with what it
    /// had, clients moved to it.
    AsyncStandbyPromoted,
    /// The etcd leader SIGKILLed, restarted with its data a TTL later.
    LeaderKill,
    /// The etcd leader SIGSTOPped for 3 × TTL.
    LeaderPause,
    /// Client 0's only etcd member (member 0: the leader or a follower)
    /// partitioned away from the other two for 3 × TTL.
    Partition,
    /// NATS: node 0, client 0's only node, made the stream's leader, then
    /// its routes cut from the other two nodes for 3 × TTL (its client
    /// port stays reachable).
    LeaderPartitioned,
    /// Every node of the cluster SIGKILLed, all restarted with their data
    /// a TTL later (the coordinated crash of Jepsen's NATS analysis).
    ClusterRestart,
    /// Client processes: the process holding the hot key SIGKILLed inside
    /// its critical section (`crate::process`).
    ProcessKilled,
    /// Client processes: client 0's whole process stopped (SIGSTOP) inside
    /// its critical section for 3 × TTL, then resumed (SIGCONT).
    ProcessStopped,
    /// Redis Sentinel: the primary SIGKILLed; the sentinels promote a
    /// replica, the clients find it through them (`crate::sentinel`).
    SentinelKilled,
    /// The same with `ReplicaAck` (WAIT 1) on acquires, renewals and
    /// versioned writes.
    SentinelKilledAck,
    /// Redis Sentinel: the primary SIGSTOPped until the sentinels have
    /// promoted a replica, then 3 × TTL more; resumed (SIGCONT), it still
    /// believes it is the primary until the sentinels demote it (the
    /// split-brain window). With `ReplicaAck` (WAIT 1).
    SentinelPausedAck,
    /// Redis Sentinel: one of the three sentinels SIGKILLed, then (a
    /// second later) the primary; the two sentinels left (quorum 2, a
    /// majority of the three) still promote a replica. With `ReplicaAck`
    /// (WAIT 1).
    SentinelDownAck,
    /// Redis Sentinel on namespace hosts: the primary and client 0 (with
    /// the last counter client) partitioned from the replicas, the
    /// sentinels and the other clients until the sentinels have promoted a
    /// replica, then 3 × TTL more; healed, the sentinels demote the old
    /// primary (`crate::sentinel_split`). Without `ReplicaAck`.
    SentinelSplit,
    /// The same with `ReplicaAck` (WAIT 1).
    SentinelSplitAck,
    /// The same without `ReplicaAck`, the data nodes run with
    /// `min-replicas-to-write 1` and `min-replicas-max-lag 1`.
    SentinelSplitMinReplicas,
}

impl Fault {
    /// Short name, also the SVG file stem.
    pub fn slug(self) -> String {
        match self {
            Fault::None => "none".into(),
            Fault::Stall => "client-stall".into(),
            Fault::Pause => "server-pause".into(),
            Fault::KillRestart => "kill-restart-aof".into(),
            Fault::RestartEmpty => "restart-empty".into(),
            Fault::RestartAtOnce => "kill-restart-at-once".into(),
            Fault::Blackhole => "blackhole".into(),
            Fault::Failover => "failover".into(),
            Fault::FailoverAck => "failover-replica-ack".into(),
            Fault::ReplicaPausedAck => "replica-paused-replica-ack".into(),
            Fault::NodesPaused(n) => format!("redlock-{n}-paused"),
            Fault::NodesKilledDelayed(n) => format!("redlock-{n}-killed-delayed-restart"),
            Fault::NodesRestartedEmpty(n) => format!("redlock-{n}-restarted-empty"),
            Fault::NodesDownAtStart(n) => format!("redlock-{n}-down-at-start"),
            Fault::NoLock => "no-lock".into(),
            Fault::ClientPartitioned => "netns-client-partitioned".into(),
            Fault::RedlockPartition(n) => format!("netns-redlock-client-and-{n}-nodes-partitioned"),
            Fault::ClusterSplit => "netns-cluster-split-brain".into(),
            Fault::ClusterSplitAck => "netns-cluster-split-brain-replica-ack".into(),
            Fault::ClusterMasterPausedAck => "netns-cluster-master-paused-replica-ack".into(),
            Fault::SyncStandbyPromoted => "failover-sync-standby".into(),
            Fault::AsyncStandbyPromoted => "failover-async-standby".into(),
            Fault::LeaderKill => "leader-kill-restart".into(),
            Fault::LeaderPause => "leader-pause".into(),
            Fault::Partition => "member-partitioned".into(),
            Fault::LeaderPartitioned => "leader-partitioned".into(),
            Fault::ClusterRestart => "cluster-killed-restarted".into(),
            Fault::ProcessKilled => "process-holder-killed".into(),
            Fault::ProcessStopped => "process-holder-stopped".into(),
            Fault::SentinelKilled => "sentinel-primary-killed".into(),
            Fault::SentinelKilledAck => "sentinel-primary-killed-replica-ack".into(),
            Fault::SentinelPausedAck => "sentinel-primary-paused-replica-ack".into(),
            Fault::SentinelDownAck => "sentinel-one-sentinel-and-primary-killed-replica-ack".into(),
            Fault::SentinelSplit => "netns-sentinel-split-brain".into(),
            Fault::SentinelSplitAck => "netns-sentinel-split-brain-replica-ack".into(),
            Fault::SentinelSplitMinReplicas => "netns-sentinel-split-brain-min-replicas-to-write".into(),
        }
    }

    /// Whether anything is injected.
    pub fn injects(self) -> bool {
        !matches!(self, Fault::None | Fault::NoLock)
    }
}

/// The Sentinel split-brain rows' fault, before their setting.
const SPLIT: &str = "primary and one client partitioned from the rest until the sentinels promoted a replica, then \
                     3×TTL more; healed, the old primary is demoted";

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::None => write!(f, "none"),
            Fault::Stall => write!(f, "client runtime stalled 3×TTL (GC pause)"),
            Fault::Pause => write!(f, "server paused 3×TTL"),
            Fault::KillRestart => write!(f, "server killed, restarted with data (AOF always)"),
            Fault::RestartEmpty => write!(f, "server killed, restarted without data"),
            Fault::RestartAtOnce => write!(f, "server killed, restarted at once with its data"),
            Fault::Blackhole => write!(f, "one client's network blackholed 3×TTL"),
            Fault::Failover => write!(f, "replica lagging 1×TTL, primary killed, replica promoted"),
            Fault::FailoverAck => write!(
                f,
                "replica lagging 1×TTL, primary killed, replica promoted; ReplicaAck(1)"
            ),
            Fault::ReplicaPausedAck => write!(f, "replica paused 3×TTL; ReplicaAck(1)"),
            Fault::NodesPaused(n) => write!(f, "{n} of 5 nodes paused 3×TTL"),
            Fault::NodesKilledDelayed(n) => write!(f, "{n} of 5 nodes killed, restarted empty after TTL"),
            Fault::NodesRestartedEmpty(n) => write!(f, "{n} of 5 nodes restarted empty at once"),
            Fault::NodesDownAtStart(n) => write!(f, "{n} of 5 nodes paused as the clients start, resumed mid-row"),
            Fault::NoLock => write!(f, "bodies run without the lock"),
            Fault::ClientPartitioned => write!(f, "one client's host partitioned from the server 3×TTL (netns)"),
            Fault::RedlockPartition(n) => write!(
                f,
                "one client with {n} of 5 nodes partitioned from the rest 3×TTL (netns)"
            ),
            Fault::ClusterSplit => write!(
                f,
                "a master and two clients in the minority until its replica is promoted (netns)"
            ),
            Fault::ClusterSplitAck => write!(
                f,
                "a master and two clients in the minority until its replica is promoted; ReplicaAck(1) (netns)"
            ),
            Fault::ClusterMasterPausedAck => write!(
                f,
                "the keys' master paused until its replica is promoted, then resumed; ReplicaAck(1) (netns)"
            ),
            Fault::SyncStandbyPromoted => write!(f, "primary killed, synchronous standby promoted"),
            Fault::AsyncStandbyPromoted => write!(
                f,
                "standby lagging 1×TTL, primary killed, asynchronous standby promoted"
            ),
            Fault::LeaderKill => write!(f, "leader killed, restarted with its data a TTL later"),
            Fault::LeaderPause => write!(f, "leader paused 3×TTL"),
            Fault::Partition => write!(f, "client 0's member partitioned from the other two 3×TTL"),
            Fault::LeaderPartitioned => write!(
                f,
                "client 0's node, made the stream leader, partitioned from the other two 3×TTL"
            ),
            Fault::ClusterRestart => write!(
                f,
                "every node killed (SIGKILL), all restarted with their data a TTL later"
            ),
            Fault::ProcessKilled => write!(
                f,
                "client processes: the hot key's holder killed (kill -9) inside its critical section"
            ),
            Fault::ProcessStopped => write!(
                f,
                "client processes: the holder's whole process stopped (SIGSTOP) 3×TTL, then SIGCONT"
            ),
            // The matrix files these under *failover* ("promoted"): no
            // "kill -9" or "SIGSTOP" in them (the client-process columns).
            Fault::SentinelKilled => write!(f, "primary killed (SIGKILL), a replica promoted by the sentinels"),
            Fault::SentinelKilledAck => write!(
                f,
                "primary killed (SIGKILL), a replica promoted by the sentinels; ReplicaAck(1)"
            ),
            Fault::SentinelPausedAck => write!(
                f,
                "primary paused until the sentinels promoted a replica, then 3×TTL more; resumed, it is demoted; ReplicaAck(1)"
            ),
            Fault::SentinelDownAck => write!(
                f,
                "one sentinel killed (SIGKILL), then the primary; the two sentinels left promoted a replica; ReplicaAck(1)"
            ),
            Fault::SentinelSplit => write!(f, "{SPLIT}"),
            Fault::SentinelSplitAck => write!(f, "{SPLIT}; ReplicaAck(1)"),
            Fault::SentinelSplitMinReplicas => write!(
                f,
                "{SPLIT}; min-replicas-to-write 1, min-replicas-max-lag 1 on the data nodes"
            ),
        }
    }
}

/// What the docs claim about a row (SAFETY.md's claim column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// No overlap, no stale write accepted, loss signalled by the deadline,
    /// linearizable, live.
    Safe,
    /// A stalled holder runs past its deadline (it cannot be told), so its
    /// body overlaps the next holder's: fencing must reject every stale
    /// write; the rest as `Safe`.
    Fenced,
    /// Documented unsafe: measured, not required.
    Unsafe,
    /// The checker's control: must show overlaps.
    Control,
}

impl Claim {
    /// Words in the table.
    pub fn label(self) -> &'static str {
        match self {
            Claim::Safe => "claimed safe",
            Claim::Fenced => "claimed safe with fencing",
            Claim::Unsafe => "documented unsafe",
            Claim::Control => "control: must overlap",
        }
    }
}

/// Where the servers are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// In process.
    InProcess,
    /// One server.
    Single,
    /// Primary + replica.
    Pair,
    /// Five independent servers.
    Five,
    /// A three-member Raft cluster.
    Three,
    /// A three-node JetStream cluster, an R3 bucket, `sync_interval: always`.
    NatsR3,
    /// The same with the server's default `sync_interval` (fsync every two
    /// minutes).
    NatsR3DefaultSync,
    /// The user's deployment (`--url`).
    External,
    /// One server; clients on other hosts (network namespaces).
    NetSingle,
    /// Five independent servers, each on its own host (network namespaces).
    NetFive,
    /// Redis Cluster, 3 masters + 1 replica each, every node on its own
    /// host (network namespaces).
    NetCluster,
    /// Redis Sentinel: a primary, 2 replicas and 3 sentinels (quorum 2);
    /// clients find the primary through the sentinels.
    Sentinel,
    /// The same, every process on its own host (network namespaces).
    NetSentinel,
    /// One PostgreSQL server behind PgBouncer in transaction mode.
    PgBouncer,
    /// One PostgreSQL server with `synchronous_commit = off` (and a WAL
    /// writer that waits 10 s, so a crash loses what it did not flush).
    PgAsyncCommit,
    /// One PostgreSQL server whose default isolation is REPEATABLE READ.
    PgRepeatableRead,
}

impl Topology {
    /// Words in the table.
    pub fn label(self) -> &'static str {
        match self {
            Topology::InProcess => "in-process",
            Topology::Single => "1 server",
            Topology::Pair => "primary + replica",
            Topology::Five => "5 servers",
            Topology::Three => "3-member cluster",
            Topology::NatsR3 => "3-node JetStream cluster, R3, sync_interval: always",
            Topology::NatsR3DefaultSync => "3-node JetStream cluster, R3, default sync_interval (2 min)",
            Topology::External => "your deployment",
            Topology::NetSingle => "1 server, clients on other hosts (netns)",
            Topology::NetFive => "5 servers on 5 hosts (netns)",
            Topology::NetCluster => "cluster, 3 masters + 1 replica each, 6 hosts (netns)",
            Topology::Sentinel => "Sentinel: primary + 2 replicas, 3 sentinels",
            Topology::NetSentinel => "Sentinel: primary + 2 replicas, 3 sentinels, 6 hosts (netns)",
            Topology::PgBouncer => "1 server behind PgBouncer (transaction mode)",
            Topology::PgAsyncCommit => "1 server, synchronous_commit = off",
            Topology::PgRepeatableRead => "1 server, default isolation REPEATABLE READ",
        }
    }
}

/// One row of the run.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    /// Backend.
    pub backend: Backend,
    /// Topology.
    pub topology: Topology,
    /// Fault.
    pub fault: Fault,
    /// The docs' claim.
    pub claim: Claim,
    /// Why it is documented unsafe (for `Claim::Unsafe`).
    pub why: &'static str,
}

fn row(backend: Backend, topology: Topology, fault: Fault, claim: Claim, why: &'static str) -> Scenario {
    Scenario {
        backend,
        topology,
        fault,
        claim,
        why,
    }
}

fn single_server(backend: Backend) -> Vec<Scenario> {
    use Claim::*;
    use Fault::*;
    let t = Topology::Single;
    vec![
        row(backend, t, None, Safe, ""),
        row(backend, t, Pause, Safe, ""),
        row(backend, t, KillRestart, Safe, ""),
        row(
            backend,
            t,
            RestartEmpty,
            Unsafe,
            "one server that loses its data forgets every lock and counter",
        ),
        row(backend, t, Blackhole, Safe, ""),
        row(backend, t, Stall, Fenced, ""),
        row(
            backend,
            Topology::Pair,
            Failover,
            Unsafe,
            "asynchronous replication: a failover can lose a just-granted lock or write",
        ),
        row(backend, Topology::Pair, FailoverAck, Safe, ""),
    ]
}

/// Every scenario of the full run.
pub fn full() -> Vec<Scenario> {
    use Claim::*;
    use Fault::*;
    let mut plan = vec![
        row(Backend::Control, Topology::InProcess, NoLock, Control, ""),
        row(Backend::Memory, Topology::InProcess, None, Safe, ""),
        row(Backend::Memory, Topology::InProcess, Stall, Fenced, ""),
    ];
    plan.extend(single_server(Backend::Lua));
    plan.extend(single_server(Backend::Tair));
    plan.extend(postgres_rows());
    plan.extend(postgres_advisory_rows());
    plan.extend(crate::netrows::rows());
    plan.extend(etcd_rows());
    plan.extend(nats_rows());
    plan.extend(crate::sentinel::rows());
    let r = Backend::Redlock;
    let t = Topology::Five;
    plan.extend([
        row(r, t, None, Safe, ""),
        row(r, t, NodesPaused(1), Safe, ""),
        row(r, t, NodesPaused(2), Safe, ""),
        row(r, t, NodesKilledDelayed(1), Safe, ""),
        row(r, t, NodesKilledDelayed(2), Safe, ""),
        row(r, t, NodesDownAtStart(1), Safe, ""),
        row(r, t, NodesDownAtStart(2), Safe, ""),
        row(
            r,
            t,
            NodesRestartedEmpty(3),
            Unsafe,
            "a majority of nodes forgetting the key at once is beyond Redlock's guarantee",
        ),
        row(
            r,
            t,
            Stall,
            Unsafe,
            "Redlock issues no fencing token: a stalled holder's writes reach the resource",
        ),
    ]);
    plan.extend(crate::process::rows());
    plan
}

/// The CI subset: claimed-safe rows that cover each mechanism once.
pub fn quick() -> Vec<Scenario> {
    use Claim::*;
    use Fault::*;
    vec![
        row(Backend::Control, Topology::InProcess, NoLock, Control, ""),
        row(Backend::Memory, Topology::InProcess, Stall, Fenced, ""),
        row(Backend::Lua, Topology::Single, Pause, Safe, ""),
        row(Backend::Lua, Topology::Single, Blackhole, Safe, ""),
        row(Backend::Lua, Topology::Single, Stall, Fenced, ""),
        row(Backend::Tair, Topology::Single, KillRestart, Safe, ""),
        row(Backend::Tair, Topology::Single, Stall, Fenced, ""),
        row(Backend::Redlock, Topology::Five, NodesKilledDelayed(1), Safe, ""),
        row(Backend::Redlock, Topology::Five, NodesDownAtStart(2), Safe, ""),
        row(Backend::Postgres, Topology::Single, KillRestart, Safe, ""),
        row(Backend::Postgres, Topology::PgAsyncCommit, KillRestart, Safe, ""),
        row(Backend::Postgres, Topology::PgRepeatableRead, None, Safe, ""),
        row(Backend::Postgres, Topology::PgBouncer, None, Safe, ""),
        row(Backend::Postgres, Topology::Pair, SyncStandbyPromoted, Safe, ""),
        row(Backend::PostgresAdvisory, Topology::Single, Pause, Safe, ""),
    ]
    .into_iter()
    .chain(crate::netrows::quick_rows())
    .chain(crate::process::quick_rows())
    .collect()
}

/// The faults the PostgreSQL harness injects on one server (fsync on),
/// the same rows for both lock shapes.
fn one_postgres_server_rows(b: Backend) -> Vec<Scenario> {
    use Claim::*;
    use Fault::*;
    let t = Topology::Single;
    vec![
        row(b, t, None, Safe, ""),
        row(b, t, Pause, Safe, ""),
        row(b, t, KillRestart, Safe, ""),
        row(b, t, Blackhole, Safe, ""),
        row(b, t, Stall, Fenced, ""),
    ]
}

/// PostgreSQL on one server (fsync on): the faults its harness injects.
fn postgres_rows() -> Vec<Scenario> {
    use Claim::*;
    use Fault::*;
    let b = Backend::Postgres;
    let mut rows = one_postgres_server_rows(b);
    rows.extend([
        row(b, Topology::PgAsyncCommit, KillRestart, Safe, ""),
        row(b, Topology::PgRepeatableRead, None, Safe, ""),
        row(b, Topology::PgBouncer, None, Safe, ""),
        row(b, Topology::Pair, SyncStandbyPromoted, Safe, ""),
        row(
            b,
            Topology::Pair,
            AsyncStandbyPromoted,
            Unsafe,
            "asynchronous standby: a promotion loses the commits it had not received (a just-granted lock, a write)",
        ),
    ]);
    rows
}

/// PostgreSQL's advisory mode on one server: a lock lives as long as its
/// session, so a server that comes back at once (its sessions gone) frees
/// every lock before the holders' next liveness check: documented unsafe,
/// measured. A restart a TTL later comes after every holder's deadline.
fn postgres_advisory_rows() -> Vec<Scenario> {
    use Claim::*;
    use Fault::*;
    let (b, t) = (Backend::PostgresAdvisory, Topology::Single);
    let mut rows = one_postgres_server_rows(b);
    rows.push(row(
        b,
        t,
        RestartAtOnce,
        Unsafe,
        "a lock lives as long as its session, not a TTL: a server restarted at once frees every lock, and a holder learns at its next liveness check (a third of the TTL later at most), while another may already hold the lock",
    ));
    rows
}

/// etcd on a three-member cluster: the faults its harness injects, all
/// claimed safe (the stalled holder's stale writes refused by fencing).
fn etcd_rows() -> Vec<Scenario> {
    use Claim::*;
    use Fault::*;
    let (b, t) = (Backend::Etcd, Topology::Three);
    vec![
        row(b, t, None, Safe, ""),
        row(b, t, LeaderKill, Safe, ""),
        row(b, t, LeaderPause, Safe, ""),
        row(b, t, Partition, Safe, ""),
        row(b, t, Stall, Fenced, ""),
    ]
}

/// NATS on a three-node JetStream cluster with an R3 bucket: claimed safe
/// with `sync_interval: always` (the stalled holder's stale writes refused
/// by fencing); the whole-cluster crash measured with the default sync
/// interval too, documented unsafe (Jepsen's NATS 2.12.1 analysis). And a
/// client's host partitioned from one server (network namespaces).
fn nats_rows() -> Vec<Scenario> {
    use Claim::*;
    use Fault::*;
    let (b, t) = (Backend::Nats, Topology::NatsR3);
    vec![
        row(b, t, None, Safe, ""),
        row(b, t, LeaderKill, Safe, ""),
        row(b, t, LeaderPause, Safe, ""),
        row(b, t, LeaderPartitioned, Safe, ""),
        row(b, Topology::NetSingle, ClientPartitioned, Safe, ""),
        row(b, t, Stall, Fenced, ""),
        row(b, t, ClusterRestart, Safe, ""),
        row(
            b,
            Topology::NatsR3DefaultSync,
            ClusterRestart,
            Unsafe,
            "the default sync_interval fsyncs every two minutes: a crash of every node loses acknowledged writes (a grant, a renewal, an increment)",
        ),
    ]
}

/// Rows the quick run adds only when `--only` asks for them (`--quick
/// --only etcd`, `--quick --only nats`, `--quick --only sentinel`): each
/// etcd and NATS fault once (TTL 1 s, longer rows) and the Sentinel rows
/// (each waits out a failover of several seconds): not in CI.
pub fn quick_on_request() -> Vec<Scenario> {
    let mut plan = etcd_rows();
    plan.extend(nats_rows());
    plan.extend(crate::sentinel::rows());
    plan.extend(crate::process::quick_on_request());
    plan
}

/// Client-side faults against the user's deployment.
pub fn external(backend: Backend) -> Vec<Scenario> {
    use Claim::*;
    use Fault::*;
    let t = Topology::External;
    vec![
        row(backend, t, None, Safe, ""),
        row(backend, t, Blackhole, Safe, ""),
        row(backend, t, Stall, Fenced, ""),
    ]
}
