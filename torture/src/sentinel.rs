//! Rows through Redis Sentinel: a primary, two replicas and three sentinels
//! (lock-testkit's `SentinelGroup`: quorum 2, `down-after-milliseconds`
//! 500, `failover-timeout` 2 s); every client connects with a
//! `redis+sentinel://` (or `tair+sentinel://`) URL and finds the primary
//! through the sentinels by itself, as an application would. The faults
//! hit the primary: killed (SIGKILL), or paused (SIGSTOP) until the
//! sentinels have promoted a replica and resumed 3 × TTL later, when it
//! still believes it is the primary until the sentinels demote it. And a
//! sentinel down: one of the three SIGKILLed a second before the primary,
//! the two left (quorum 2) fail it over.
//!
//! Each row subscribes to every sentinel's events (`PSUBSCRIBE *`) and
//! keeps them on the run's clock, so that SAFETY.md's *Sentinel failovers*
//! section can give the failover's timeline next to what the clients saw.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lock_testkit::server::{RedisServer, SentinelGroup};
use tokio::task::JoinHandle;

use crate::BoxResult;
use crate::clock;
use crate::plan::{Backend, Claim, Fault, Scenario, Topology};
use crate::record::{Log, Snapshot, UpdateOutcome};
use crate::run::Params;

/// Bound on the sentinels promoting a replica, and on the group settling
/// after it (every replica following the new primary).
const CONVERGE: Duration = Duration::from_secs(30);

/// The full run's rows (also `--quick --only sentinel`).
pub fn rows() -> Vec<Scenario> {
    let row = |backend, fault, claim, why| Scenario {
        backend,
        topology: Topology::Sentinel,
        fault,
        claim,
        why,
    };
    let split = |backend, fault, claim, why| Scenario {
        topology: Topology::NetSentinel,
        ..row(backend, fault, claim, why)
    };
    [Backend::Lua, Backend::Tair]
        .into_iter()
        .flat_map(|b| {
            [
                split(b, Fault::SentinelSplitAck, Claim::Safe, ""),
                split(
                    b,
                    Fault::SentinelSplit,
                    Claim::Unsafe,
                    "split brain: Sentinel tells nobody on the minority side, so the partitioned old primary keeps \
                     acknowledging the minority client's writes (grants, renewals, increments) until the heal, when \
                     the sentinels demote it and it resyncs from the new primary, dropping them",
                ),
                split(
                    b,
                    Fault::SentinelSplitMinReplicas,
                    Claim::Unsafe,
                    "split brain with min-replicas-to-write 1: the old primary refuses writes once no replica has \
                     acknowledged it for min-replicas-max-lag (1 s, replicas acknowledge every second), so only \
                     what it acknowledged in the partition's first seconds is lost",
                ),
                row(b, Fault::SentinelKilledAck, Claim::Safe, ""),
                row(b, Fault::SentinelPausedAck, Claim::Safe, ""),
                row(b, Fault::SentinelDownAck, Claim::Safe, ""),
                row(
                    b,
                    Fault::SentinelKilled,
                    Claim::Unsafe,
                    "asynchronous replication: what the killed primary acknowledged and had not yet sent to the \
                     replica the sentinels promote (a grant, a renewal, an increment) is lost",
                ),
            ]
        })
        .collect()
}

/// Whether `fault` is one of this module's.
pub fn handles(fault: Fault) -> bool {
    matches!(
        fault,
        Fault::SentinelKilled | Fault::SentinelKilledAck | Fault::SentinelPausedAck | Fault::SentinelDownAck
    )
}

/// One message a sentinel published, on the run's clock.
#[derive(Debug, Clone)]
struct Event {
    at: i64,
    sentinel: usize,
    channel: String,
    payload: String,
}

/// How long the sentinel-down row waits between killing a sentinel and
/// killing the primary (the others deem it down after `down-after`, 500 ms).
const SENTINEL_FIRST: Duration = Duration::from_secs(1);

/// What the injection saw, on the run's clock.
#[derive(Debug, Clone, Default)]
struct Marks {
    /// When the primary was killed or paused.
    fault: Option<i64>,
    /// The sentinel-down row: when a sentinel was killed, and its index.
    sentinel_killed: Option<(i64, usize)>,
    old_port: u16,
    /// When every sentinel named the new primary (and it said `role:master`), and its port.
    promoted: Option<(i64, u16)>,
    resumed: Option<i64>,
    /// When every replica (the old primary too, if running) followed the new primary.
    settled: Option<i64>,
    /// `WAIT` calls the old primary ran from the pause to the group settling
    /// (the paused row: writes it took after it resumed, as a primary
    /// still, before the sentinels demoted it).
    old_waits: Option<u64>,
}

/// The servers of a row and the sentinels' events.
pub(crate) struct SentinelEnv {
    group: SentinelGroup,
    scheme: &'static str,
    events: Arc<Mutex<Vec<Event>>>,
    watchers: Vec<JoinHandle<()>>,
    marks: Marks,
}

impl Drop for SentinelEnv {
    fn drop(&mut self) {
        for w in &self.watchers {
            w.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl SentinelEnv {
    /// Starts the group (the Tair module on every data node for tair) and
    /// subscribes to every sentinel's events.
    pub(crate) async fn setup(sc: &Scenario) -> BoxResult<Self> {
        let group = SentinelGroup::start(crate::run::server_builder(sc.backend)).await?;
        let events = Arc::new(Mutex::new(Vec::new()));
        let mut watchers = Vec::new();
        for (i, sentinel) in group.sentinels().iter().enumerate() {
            let mut client = sentinel.client().await?;
            // The subscription waits for messages; the task is aborted with the row.
            client.set_timeout(Duration::from_secs(3600));
            client.cmd(&["PSUBSCRIBE", "*"]).await?;
            let events = events.clone();
            watchers.push(tokio::spawn(async move {
                while let Ok(msg) = client.read().await {
                    let at = clock::now();
                    let parts: Vec<String> = msg
                        .as_array()
                        .unwrap_or_default()
                        .iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect();
                    // pmessage, pattern, channel, payload
                    if let [kind, _, channel, payload] = parts.as_slice()
                        && kind == "pmessage"
                    {
                        lock(&events).push(Event {
                            at,
                            sentinel: i,
                            channel: channel.clone(),
                            payload: payload.clone(),
                        });
                    }
                }
            }));
        }
        Ok(SentinelEnv {
            group,
            scheme: if sc.backend == Backend::Tair {
                "tair+sentinel"
            } else {
                "redis+sentinel"
            },
            events,
            watchers,
            marks: Marks::default(),
        })
    }

    /// Every client's URL (and the final read's): the sentinels.
    pub(crate) fn url(&self) -> String {
        self.group.url(self.scheme)
    }

    /// The data nodes.
    pub(crate) fn nodes(&self) -> &[RedisServer] {
        self.group.nodes()
    }

    /// Injects the row's fault on the primary; returns once the group has
    /// settled and every lock client has locked again (bounded).
    pub(crate) async fn inject(&mut self, sc: &Scenario, p: &Params, log: &Log) -> BoxResult<()> {
        let old = self.group.primary().await?;
        let old_port = old.port();
        let waits_before = old.command_calls("wait").await?;
        let mut window_from = None;
        if sc.fault == Fault::SentinelDownAck {
            // The last sentinel: clients list all three, and try the next
            // when one does not answer.
            let i = self.group.sentinels().len().saturating_sub(1);
            let sentinel = self.group.sentinels().get(i).ok_or("the group has no sentinel")?;
            sentinel.kill()?;
            let at = clock::now();
            self.marks.sentinel_killed = Some((at, i));
            window_from = Some(at);
            tokio::time::sleep(SENTINEL_FIRST).await;
        }
        let from = clock::now();
        self.marks.fault = Some(from);
        self.marks.old_port = old_port;
        let healed = match sc.fault {
            Fault::SentinelKilled | Fault::SentinelKilledAck | Fault::SentinelDownAck => {
                old.kill()?;
                let new = self.group.wait_for_failover(old_port, CONVERGE).await?;
                let promoted = clock::now();
                self.marks.promoted = Some((promoted, new.port()));
                promoted
            }
            Fault::SentinelPausedAck => {
                old.pause()?;
                let new = match self.group.wait_for_failover(old_port, CONVERGE).await {
                    Ok(new) => new,
                    Err(e) => {
                        old.resume()?;
                        return Err(e.into());
                    }
                };
                self.marks.promoted = Some((clock::now(), new.port()));
                tokio::time::sleep(p.fault_len()).await;
                old.resume()?;
                let resumed = clock::now();
                self.marks.resumed = Some(resumed);
                resumed
            }
            f => return Err(format!("fault {f} does not apply to a Sentinel group").into()),
        };
        log.window(window_from.unwrap_or(from), healed);
        self.group.wait_until_settled(CONVERGE).await?;
        self.marks.settled = Some(clock::now());
        if old.is_running() {
            self.marks.old_waits = Some(old.command_calls("wait").await?.saturating_sub(waits_before));
        }
        crate::netrows::wait_for_recovery(p, log, healed).await;
        Ok(())
    }

    /// The failover's timeline and what the clients saw, for SAFETY.md.
    pub(crate) fn note(&self, s: &Snapshot) -> String {
        timeline(&self.marks, &lock(&self.events), s)
    }
}

/// Milliseconds from `t0` to `t` (µs on the run clock).
fn ms(t0: i64, t: i64) -> i64 {
    (t - t0) / 1000
}

fn timeline(m: &Marks, events: &[Event], s: &Snapshot) -> String {
    let Some(t0) = m.fault else {
        return "the fault was not injected".to_owned();
    };
    let mut events: Vec<&Event> = events.iter().filter(|e| e.at >= t0).collect();
    events.sort_by_key(|e| e.at);
    let master = |e: &&Event| e.payload.starts_with("master ");
    let first = |channel: &str| events.iter().find(|e| e.channel == channel && master(e)).map(|e| e.at);
    let mut out = String::new();
    let paused = m.resumed.is_some();
    if let Some((at, i)) = m.sentinel_killed {
        let _ = write!(
            out,
            "sentinel {} of 3 killed (SIGKILL) at {} ms, the two left still a quorum (2) and a majority; ",
            i + 1,
            ms(t0, at)
        );
    }
    let _ = write!(
        out,
        "the primary (port {}) {} at 0 ms",
        m.old_port,
        if paused { "paused (SIGSTOP)" } else { "killed (SIGKILL)" }
    );
    if let Some(t) = first("+sdown") {
        let _ = write!(out, "; first sentinel deems it down (+sdown) at {} ms", ms(t0, t));
    }
    if let Some(t) = first("+odown") {
        let _ = write!(out, ", quorum agrees (+odown) at {} ms", ms(t0, t));
    }
    let votes: Vec<&&Event> = events.iter().filter(|e| e.channel == "+vote-for-leader").collect();
    if let (Some(a), Some(b)) = (votes.first(), votes.last()) {
        let _ = write!(
            out,
            ", {} vote(s) for a leader (+vote-for-leader) at {}–{} ms",
            votes.len(),
            ms(t0, a.at),
            ms(t0, b.at)
        );
    }
    if let Some(e) = events.iter().find(|e| e.channel == "+elected-leader") {
        let _ = write!(
            out,
            ", sentinel {} elected (+elected-leader) at {} ms",
            e.sentinel + 1,
            ms(t0, e.at)
        );
    }
    if let Some(e) = events.iter().find(|e| e.channel == "+promoted-slave") {
        let _ = write!(out, ", replica promoted (+promoted-slave) at {} ms", ms(t0, e.at));
    }
    let switches: Vec<&&Event> = events.iter().filter(|e| e.channel == "+switch-master").collect();
    if let (Some(a), Some(b)) = (switches.first(), switches.last()) {
        let _ = write!(
            out,
            ", +switch-master published by {} sentinel(s) at {}–{} ms",
            switches.len(),
            ms(t0, a.at),
            ms(t0, b.at)
        );
    }
    if let Some((t, port)) = m.promoted {
        let _ = write!(out, "; every sentinel names port {port} at {} ms", ms(t0, t));
    }
    if let Some(t) = m.resumed {
        let _ = write!(out, "; the old primary resumed (SIGCONT) at {} ms", ms(t0, t));
        if let Some(e) = events.iter().find(|e| e.channel == "+convert-to-slave") {
            let _ = write!(out, ", told to replicate (+convert-to-slave) at {} ms", ms(t0, e.at));
        }
    }
    if let Some(t) = m.settled {
        let _ = write!(out, "; every replica follows it at {} ms", ms(t0, t));
    }
    if let Some(n) = m.old_waits {
        let _ = write!(
            out,
            "; the old primary ran {n} WAIT(s) after it resumed (writes sent to it before or after the pause; no \
             replica followed it any more, so none was acknowledged)"
        );
    }
    // What the clients saw.
    let switch = switches.first().map(|e| e.at).or(m.promoted.map(|(t, _)| t));
    let first_grant = s
        .bodies
        .iter()
        .filter(|b| b.start >= switch.unwrap_or(t0))
        .min_by_key(|b| b.start);
    let end = first_grant.map_or(i64::MAX, |b| b.start);
    let last_before = s.bodies.iter().filter(|b| b.start < t0).map(|b| b.start).max();
    let during = s.bodies.iter().filter(|b| b.start >= t0 && b.start < end).count();
    match first_grant {
        Some(b) => {
            let _ = write!(
                out,
                ". The clients: first grant on the new primary at {} ms (client {}, key {})",
                ms(t0, b.start),
                b.client,
                b.key
            );
        }
        None => out.push_str(". The clients: no grant after the switch"),
    }
    if let Some(t) = last_before {
        let _ = write!(out, ", the last before the fault at {} ms", ms(t0, t));
    }
    let _ = write!(out, "; {during} section(s) started between the fault and that grant");
    let held = s
        .bodies
        .iter()
        .filter(|b| b.start < t0 && b.end > t0 && !b.stalled)
        .collect::<Vec<_>>();
    let cancelled = held.iter().filter(|b| b.cancelled).count();
    let _ = write!(
        out,
        "; {} section(s) held at the fault, {cancelled} of them cancelled by a loss signal (the others ended by themselves)",
        held.len()
    );
    let window = |op: &&crate::record::UpdateOp| op.inv >= t0 && op.inv < end;
    let count = |o: fn(&UpdateOutcome) -> bool| s.updates.iter().filter(window).filter(|u| o(&u.outcome)).count();
    let _ = write!(
        out,
        "; counter increments from the fault to that grant: {} acknowledged, {} outcome unknown, {} failed",
        count(|o| matches!(o, UpdateOutcome::Ok(_))),
        count(|o| matches!(o, UpdateOutcome::Unknown)),
        count(|o| matches!(o, UpdateOutcome::Failed))
    );
    let errors: u64 = s.errors.values().sum();
    let _ = write!(
        out,
        "; {errors} client error(s) in the whole row (kinds under *Errors the clients saw*)"
    );
    out
}

/// Notes on the Sentinel rows, in the order they ran.
static NOTES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Records the note of a row that ran.
pub(crate) fn record(sc: &Scenario, env: &SentinelEnv, s: &Snapshot) {
    record_note(sc, env.note(s));
}

/// Records `note` for a row that ran (the split-brain rows' come from
/// `crate::sentinel_split`).
pub(crate) fn record_note(sc: &Scenario, note: String) {
    let row = format!("{} · {} · {}", sc.backend.label(), sc.topology.label(), sc.fault);
    lock(&NOTES).push(format!("{row}: {note}"));
}

/// The Sentinel rows' notes as a SAFETY.md section (empty when none ran).
pub fn markdown() -> String {
    let notes = lock(&NOTES);
    if notes.is_empty() {
        return String::new();
    }
    let mut md = String::from("\n## Sentinel failovers\n\n");
    md.push_str(
        "Rows on *Sentinel: primary + 2 replicas, 3 sentinels*: lock-testkit's `SentinelGroup` (quorum 2, \
         `down-after-milliseconds` 500, `failover-timeout` 2 s); every client connects with a `redis+sentinel://` \
         (`tair+sentinel://`) URL naming the three sentinels and finds the primary through them, again after a \
         dropped connection or a `READONLY` reply. The row subscribes to every sentinel's events and keeps them on \
         the run's clock; times are from the fault. Each row's failover (the first grant is the first critical \
         section that started after the first `+switch-master`). The rows on *6 hosts (netns)* run on \
         `NetSentinelGroup` (the same settings, every process on its own network-namespace host) and give the \
         partition's timeline instead, with what the old primary did meanwhile (counted on its own host):\n\n",
    );
    for n in notes.iter() {
        let _ = writeln!(md, "- {n}");
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Body, UpdateOp};

    fn body(client: usize, start: i64, end: i64, cancelled: bool) -> Body {
        Body {
            client,
            key: 0,
            start,
            end,
            deadline: end,
            fence: None,
            cancelled,
            stalled: false,
        }
    }

    fn event(at: i64, sentinel: usize, channel: &str, payload: &str) -> Event {
        Event {
            at,
            sentinel,
            channel: channel.to_owned(),
            payload: payload.to_owned(),
        }
    }

    #[test]
    fn the_timeline_orders_the_sentinels_events_and_the_clients_grants() {
        let marks = Marks {
            fault: Some(1_000_000),
            old_port: 7001,
            promoted: Some((2_900_000, 7002)),
            resumed: None,
            settled: Some(3_100_000),
            old_waits: None,
            sentinel_killed: None,
        };
        let events = [
            event(2_700_000, 1, "+switch-master", "verrou 127.0.0.1 7001 127.0.0.1 7002"),
            event(1_510_000, 0, "+sdown", "master verrou 127.0.0.1 7001"),
            event(
                1_520_000,
                2,
                "+sdown",
                "slave 127.0.0.1:7003 127.0.0.1 7003 @ verrou 127.0.0.1 7001",
            ),
            event(1_600_000, 0, "+odown", "master verrou 127.0.0.1 7001 #quorum 2/2"),
            event(1_700_000, 1, "+vote-for-leader", "abc 1"),
            event(1_710_000, 2, "+vote-for-leader", "abc 1"),
            event(1_800_000, 0, "+elected-leader", "master verrou 127.0.0.1 7001"),
            event(
                2_600_000,
                0,
                "+promoted-slave",
                "slave 127.0.0.1:7002 127.0.0.1 7002 @ verrou 127.0.0.1 7001",
            ),
            event(2_750_000, 2, "+switch-master", "verrou 127.0.0.1 7001 127.0.0.1 7002"),
        ];
        let snapshot = Snapshot {
            bodies: vec![
                body(0, 900_000, 1_200_000, true),
                body(1, 950_000, 990_000, false),
                body(2, 2_800_000, 2_810_000, false),
                body(3, 3_000_000, 3_010_000, false),
            ],
            updates: vec![
                UpdateOp {
                    inv: 1_100_000,
                    resp: 1_400_000,
                    outcome: UpdateOutcome::Unknown,
                },
                UpdateOp {
                    inv: 2_850_000,
                    resp: 2_860_000,
                    outcome: UpdateOutcome::Ok(7),
                },
            ],
            ..Snapshot::default()
        };
        let t = timeline(&marks, &events, &snapshot);
        assert!(t.starts_with("the primary (port 7001) killed (SIGKILL) at 0 ms"), "{t}");
        assert!(t.contains("(+sdown) at 510 ms"), "{t}");
        assert!(t.contains("(+odown) at 600 ms"), "{t}");
        assert!(
            t.contains("2 vote(s) for a leader (+vote-for-leader) at 700–710 ms"),
            "{t}"
        );
        assert!(t.contains("sentinel 1 elected (+elected-leader) at 800 ms"), "{t}");
        assert!(
            t.contains("+switch-master published by 2 sentinel(s) at 1700–1750 ms"),
            "{t}"
        );
        assert!(t.contains("every sentinel names port 7002 at 1900 ms"), "{t}");
        assert!(
            t.contains("first grant on the new primary at 1800 ms (client 2, key 0)"),
            "{t}"
        );
        assert!(t.contains("the last before the fault at -50 ms"), "{t}");
        assert!(
            t.contains("; 0 section(s) started between the fault and that grant"),
            "{t}"
        );
        assert!(t.contains("1 section(s) held at the fault, 1 of them cancelled"), "{t}");
        assert!(t.contains("0 acknowledged, 1 outcome unknown, 0 failed"), "{t}");
        // The sentinel-down row: the sentinel's kill comes first.
        let marks = Marks {
            sentinel_killed: Some((0, 2)),
            ..marks
        };
        let t = timeline(&marks, &events, &snapshot);
        assert!(
            t.starts_with("sentinel 3 of 3 killed (SIGKILL) at -1000 ms, the two left"),
            "{t}"
        );
        assert!(t.contains("; the primary (port 7001) killed (SIGKILL) at 0 ms"), "{t}");
    }

    #[test]
    fn every_row_is_a_sentinel_row_on_both_redis_family_backends() {
        let rows = rows();
        assert_eq!(rows.len(), 14);
        // The loopback group's rows, and the split-brain rows on namespace hosts.
        assert!(rows.iter().all(|r| {
            (r.topology == Topology::Sentinel && handles(r.fault))
                || (r.topology == Topology::NetSentinel && crate::sentinel_split::handles(r.fault))
        }));
        assert_eq!(rows.iter().filter(|r| r.topology == Topology::NetSentinel).count(), 6);
        let unsafe_faults = [
            Fault::SentinelKilled,
            Fault::SentinelSplit,
            Fault::SentinelSplitMinReplicas,
        ];
        assert!(
            rows.iter()
                .all(|r| (r.claim == Claim::Unsafe) == unsafe_faults.contains(&r.fault))
        );
        // Every topology label starts with "Sentinel": the matrix's own line.
        assert!(rows.iter().all(|r| r.topology.label().starts_with("Sentinel")));
        // `--only sentinel` picks them by their slugs.
        assert!(rows.iter().all(|r| r.fault.slug().contains("sentinel")));
    }
}
