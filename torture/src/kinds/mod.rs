//! Rows for the lock kinds beyond the mutex: semaphore, read-write,
//! multi-key and leader election. Each row runs independent clients of one
//! kind (each on its own runtime, with its own backend and manager) under
//! one fault, and its checker checks the kind's own claim:
//!
//! - semaphore: permits in use ≤ N at every instant (validity windows), and
//!   waiters asking for several permits complete under single-permit churn;
//! - read-write: no reader inside a writer's window, no two writers at once,
//!   writers' stale writes rejected by their fencing tokens, and writers
//!   complete under a continuous reader load (a row where writers never
//!   complete, or do not resume after the fault, fails like a stuck row);
//! - upgradeable read-write: the read-write claims, plus no writer inside an
//!   upgrader's read and no two upgradeable holders at once, and upgrades
//!   complete under the reader load;
//! - multi-key: all keys or none (per-key exclusion against other sets and
//!   against plain mutex holders of single keys), and a stalled holder's
//!   writes rejected by its per-key fencing token;
//! - election: one leader at a time, one leader per term, terms grow, a
//!   deposed leader's writes rejected by its term.
//!
//! A backend gets every kind's rows with one line in [`full`] (it needs an
//! arm in [`client::build_kinds`] if it is new to this module).

mod check;
mod client;

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use lock_core::{LockOptions, ReplicaAck};
use tokio::time::Instant;

use crate::BoxResult;
use crate::check::Measured;
use crate::client::Stall;
use crate::clock;
use crate::plan::{Backend, Claim, Fault, Scenario, Topology};
use crate::record::{Log, Snapshot};
use crate::run::{self, Params};

pub use check::KindMeasured;
use client::{Holds, KindClient, Role};

/// A lock kind under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Leased semaphore of [`SEMAPHORE_SIZE`] permits.
    Semaphore,
    /// Read-write lock, default writer preference.
    ReadWrite,
    /// Read-write lock with upgradeable readers that upgrade.
    Upgradeable,
    /// Multi-key lock over a few keys, beside plain mutex holders.
    MultiKey,
    /// Leader election.
    Election,
}

/// Permits of the semaphore under test.
pub const SEMAPHORE_SIZE: u32 = 3;

/// Keys the multi-key rows lock (two or three at a time).
const MULTI_KEYS: usize = 3;

impl Kind {
    /// Every kind, in table order.
    pub const ALL: [Kind; 5] = [
        Kind::Semaphore,
        Kind::ReadWrite,
        Kind::Upgradeable,
        Kind::MultiKey,
        Kind::Election,
    ];

    /// Name in the table and in `--only`.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Semaphore => "semaphore",
            Kind::ReadWrite => "read-write",
            Kind::Upgradeable => "upgradeable rw",
            Kind::MultiKey => "multi-key",
            Kind::Election => "election",
        }
    }

    /// The clients of one row, by role.
    fn roles(self) -> Vec<Role> {
        match self {
            // Two clients ask for two permits each among single-permit
            // churn. Client 0, the stalled one, is one of them: larger
            // requests leave reservations that refuse newcomers, so a
            // single-permit client can wait through many of their holds
            // (the row reports the fewest holds of one client), and the
            // stall must land within the recovery bound.
            Kind::Semaphore => vec![
                Role::Permits(2),
                Role::Permits(2),
                Role::Permits(1),
                Role::Permits(1),
                Role::Permits(1),
                Role::Permits(1),
            ],
            // Two writers (client 0, the stalled one, among them) against
            // four readers that keep the lock read-held without a gap.
            Kind::ReadWrite => vec![
                Role::Writer,
                Role::Writer,
                Role::Reader,
                Role::Reader,
                Role::Reader,
                Role::Reader,
            ],
            // Two upgraders (client 0, the stalled one, among them) and a
            // plain writer against three readers.
            Kind::Upgradeable => vec![
                Role::Upgrader,
                Role::Upgrader,
                Role::Writer,
                Role::Reader,
                Role::Reader,
                Role::Reader,
            ],
            Kind::MultiKey => vec![Role::Set, Role::Set, Role::Set, Role::Set, Role::Mutex],
            Kind::Election => vec![Role::Candidate; 4],
        }
    }

    /// Whether a stalled holder's writes can be fenced (the kind issues one
    /// token per exclusive hold).
    fn fenced(self) -> bool {
        !matches!(self, Kind::Semaphore)
    }
}

/// One row: a kind under one scenario.
#[derive(Debug, Clone, Copy)]
pub struct KindRow {
    /// The kind.
    pub kind: Kind,
    /// Backend, topology, fault, claim.
    pub scenario: Scenario,
}

impl KindRow {
    /// What `--only` matches: `kinds/<kind> <backend> <fault>`.
    pub fn filter_text(&self) -> String {
        format!(
            "kinds/{} {} {}",
            self.kind.label(),
            self.scenario.backend.label(),
            self.scenario.fault.slug()
        )
    }

    /// The row's name on the console.
    pub fn label(&self) -> String {
        let sc = &self.scenario;
        format!(
            "{} · {} · {} · {}",
            self.kind.label(),
            sc.backend.label(),
            sc.topology.label(),
            sc.fault
        )
    }
}

/// Every kind on `backend` (`topology`) under each of `faults`; a stalled
/// client is claimed fenced where the kind issues tokens, a failover
/// without `ReplicaAck` documented unsafe, everything else claimed safe.
pub fn rows(backend: Backend, topology: Topology, faults: &[Fault]) -> Vec<KindRow> {
    let mut out = Vec::new();
    for &fault in faults {
        for kind in Kind::ALL {
            let (claim, why) = match fault {
                Fault::Failover => (
                    Claim::Unsafe,
                    "asynchronous replication: a failover can lose a just-granted hold",
                ),
                Fault::Stall if kind.fenced() => (Claim::Fenced, ""),
                // Holds are forgotten; the election's terms must still grow
                // (`check::judge` checks them on this row).
                Fault::RestartEmpty => (
                    Claim::Unsafe,
                    "one server that loses its data forgets every hold (terms must still grow)",
                ),
                _ => (Claim::Safe, ""),
            };
            out.push(KindRow {
                kind,
                scenario: Scenario {
                    backend,
                    topology,
                    fault,
                    claim,
                    why,
                },
            });
        }
    }
    out
}

/// The full run's kind rows: one line per backend and topology.
pub fn full() -> Vec<KindRow> {
    use Fault::*;
    let mut plan = rows(Backend::Memory, Topology::InProcess, &[None, Stall]);
    plan.extend(rows(Backend::Lua, Topology::Single, &[None, Pause, Stall]));
    plan.extend(rows(Backend::Tair, Topology::Single, &[None, Pause, Stall]));
    plan.extend(rows(Backend::Postgres, Topology::Single, &[None, Pause, Stall]));
    plan.extend(rows(Backend::Lua, Topology::Pair, &[FailoverAck, Failover]));
    plan.extend(rows(Backend::Tair, Topology::Pair, &[FailoverAck]));
    plan.extend(rows(Backend::Lua, Topology::Pair, &[ReplicaPausedAck]));
    plan.extend(rows(Backend::Tair, Topology::Pair, &[ReplicaPausedAck]));
    for backend in [Backend::Lua, Backend::Tair] {
        let elections = rows(backend, Topology::Single, &[RestartEmpty]);
        plan.extend(elections.into_iter().filter(|r| r.kind == Kind::Election));
    }
    plan.extend(rows(Backend::Etcd, Topology::Three, &[None, LeaderPause, Stall]));
    plan
}

/// The CI subset: each kind's claim once, with the read-write liveness row,
/// the fenced stalls and a failover with `ReplicaAck`.
pub fn quick() -> Vec<KindRow> {
    let pick = |kind: Kind, backend, topology, fault| {
        rows(backend, topology, &[fault])
            .into_iter()
            .filter(move |r| r.kind == kind)
    };
    let mut plan = Vec::new();
    plan.extend(pick(Kind::ReadWrite, Backend::Memory, Topology::InProcess, Fault::None));
    plan.extend(pick(
        Kind::Upgradeable,
        Backend::Memory,
        Topology::InProcess,
        Fault::Stall,
    ));
    plan.extend(pick(Kind::Semaphore, Backend::Lua, Topology::Single, Fault::Pause));
    plan.extend(pick(Kind::MultiKey, Backend::Lua, Topology::Single, Fault::Stall));
    plan.extend(pick(Kind::Election, Backend::Tair, Topology::Single, Fault::Stall));
    plan.extend(pick(Kind::ReadWrite, Backend::Tair, Topology::Single, Fault::Pause));
    plan.extend(pick(Kind::ReadWrite, Backend::Lua, Topology::Pair, Fault::FailoverAck));
    plan
}

/// The result of one kind row.
#[derive(Debug, Clone)]
pub struct KindOutcome {
    /// What ran.
    pub row: KindRow,
    /// The shared measurements (overlaps on exclusive holds, fencing, loss
    /// signals, recovery).
    pub measured: Measured,
    /// The kind's own.
    pub kind: KindMeasured,
    /// Broken claims (empty: the row holds).
    pub violations: Vec<String>,
}

/// Run one kind row.
///
/// # Errors
/// Setting up its servers or clients failed.
pub async fn run_row(row: KindRow, idx: usize, seed: u64, p: &Params) -> BoxResult<KindOutcome> {
    let sc = row.scenario;
    let scaled = p.for_backend(sc.backend);
    let p = &scaled;
    let log = Arc::new(Log::default());
    let holds = Arc::new(Holds::default());
    let roles = row.kind.roles();
    let mut env = run::setup(&sc, roles.len(), None).await?;
    let prefix = format!("verrou-torture:{seed:016x}:k{idx}");
    let keys = Arc::new(
        (0..MULTI_KEYS)
            .map(|k| format!("{{{prefix}}}:key{k}"))
            .collect::<Vec<_>>(),
    );
    let ack = matches!(sc.fault, Fault::FailoverAck | Fault::ReplicaPausedAck).then(|| ReplicaAck::new(1, p.ttl / 2));
    let options = LockOptions::with_ttl(p.ttl)
        .acquire_timeout(p.ttl * 6)
        .op_timeout(p.ttl / 2);
    let fault_len = p.ttl * 3;
    let stall = (sc.fault == Fault::Stall).then(|| Stall::new(fault_len));
    let begin = Instant::now();
    let span_start = clock::at(begin);
    let planned_stop = begin + p.duration;
    let stop = Arc::new(AtomicI64::new(clock::at(planned_stop)));
    let first_in_body = Arc::new(AtomicBool::new(false));
    let mut done = Vec::with_capacity(roles.len());
    for (i, role) in roles.iter().enumerate() {
        let c = KindClient {
            id: i,
            role: *role,
            spec: env.spec(sc.backend, env.url(i), ack),
            name: format!("{prefix}:{}", row.kind.label()),
            keys: keys.clone(),
            options: options.clone(),
            seed: seed ^ (0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(i as u64 + 1)),
            stop: stop.clone(),
            stall: if i == 0 { stall.clone() } else { None },
            long_until: clock::at(begin + p.fault_at + p.ttl * 2 + p.ttl * 3),
            in_body: if i == 0 {
                first_in_body.clone()
            } else {
                Arc::new(AtomicBool::new(false))
            },
            log: log.clone(),
            holds: holds.clone(),
        };
        done.push(crate::client::spawn(format!("kind-client-{i}"), move || c.run())?);
    }
    tokio::time::sleep_until(begin + p.fault_at).await;
    // As for the mutex rows: start the fault while client 0 holds.
    let wait_for_holder = Instant::now() + p.ttl * 2;
    while sc.fault != Fault::Stall && !first_in_body.load(Ordering::SeqCst) && Instant::now() < wait_for_holder {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    if let Err(e) = run::inject(&mut env, &sc, p, &log, stall.as_ref(), clock::now()).await {
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
            || holds.count(),
            done,
        )
        .await;
    let span_end = clock::now();
    drop(env);
    let snapshot: Snapshot = log.snapshot();
    let holds = holds.snapshot();
    let bounds = crate::check::Bounds {
        slack_us: us(p.slack),
        recovery_us: us(p.recovery_bound()),
    };
    let (measured, kind) = check::measure(
        row.kind,
        &holds,
        snapshot,
        bounds,
        sc.fault.injects(),
        hangs,
        (span_start, span_end),
    );
    let violations = check::judge(&row, &measured, &kind);
    Ok(KindOutcome {
        row,
        measured,
        kind,
        violations,
    })
}

fn us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// One console line.
pub fn console_line(o: &KindOutcome) -> String {
    let c = check::cells(o);
    format!(
        "{}: {} holds, {}, overlaps {}, stale acc/rej {}, late {}, liveness {}, recovery {} -> {}",
        o.row.label(),
        c.holds,
        c.kind_check,
        c.overlaps,
        c.stale,
        c.late,
        c.liveness,
        c.recovery,
        c.result
    )
}

/// The kinds' section of SAFETY.md.
pub fn markdown(outcomes: &[KindOutcome], p: &Params) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "\n## Lock kinds\n");
    let _ = writeln!(
        md,
        "Each row: five or six clients of one kind, each with its own runtime, backend and manager, TTL {} ms \
         (etcd's rows: raised to its 1 s floor, their durations scaled with it), for {:.1} s plus recovery, then on until the row has seen {} holds (at most {:.0} s in all); the fault as \
         in the table above. Client 0 is the one the faults aim at: until the fault is over it holds for 0.1–2.5 × \
         TTL (a writer: 0.1–0.5 × TTL, back after 1–2 TTL); the others, and client 0 after the fault, hold mostly \
         for 2–30 ms, one hold in twenty for 1–2.5 × TTL (a reader: one in ten for 0.5–1.5 × TTL; renewed). The checker \
         checks the kind's own claim:\n",
        p.ttl.as_millis(),
        p.duration.as_secs_f64(),
        p.min_sections,
        p.max_duration.as_secs_f64()
    );
    let _ = writeln!(
        md,
        "- **semaphore** ({SEMAPHORE_SIZE} permits; two clients ask for 2, four for 1): permits in use inside \
         validity windows never above {SEMAPHORE_SIZE}; liveness: 2-permit requests complete under the \
         single-permit churn (a refused waiting request reserves its permits, so smaller requests cannot \
         starve it): the row reports the fewest holds of one client, and of one 2-permit client.\n\
         - **read-write** (2 writers, 4 readers holding without a gap): no reader inside a writer's window, no \
         two writers at once, stale writer writes rejected by the writer's fencing token; liveness: writers \
         complete while readers are continuously present, and resume within 20 × TTL of the fault healing \
         (a row where writers never complete fails).\n\
         - **upgradeable rw** (2 upgraders, 1 writer, 3 readers): an upgrader takes the upgradeable read, reads \
         for half its hold, upgrades and writes for the other half with the upgraded write's fencing token. \
         The read-write checks (upgraded writes count as writes), plus: no writer (plain or upgraded) inside \
         an upgrader's read, and no two clients' upgradeable holds (read or upgraded write) at once, inside \
         validity windows; liveness: upgrades complete under the reader load.\n\
         - **multi-key** (4 clients locking 2 or 3 of {MULTI_KEYS} keys, 1 client locking single keys with the \
         mutex): all keys or none — no key held by two holders inside their windows — and a stalled holder's \
         writes, with its per-key fencing token, rejected.\n\
         - **election** (4 candidates): one leader at a time, one leader per term, terms strictly increasing \
         in the order leaders took office, a deposed leader's writes (term as the token) rejected.\n"
    );
    let _ = writeln!(
        md,
        "| Kind | Backend | Topology | Fault | Holds | Kind's check | Overlaps in windows | Stale writes accepted / \
         rejected | Late loss signals | Liveness | Recovery | Claim | Result |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for o in outcomes {
        let c = check::cells(o);
        let sc = &o.row.scenario;
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            o.row.kind.label(),
            sc.backend.label(),
            sc.topology.label(),
            sc.fault,
            c.holds,
            c.kind_check,
            c.overlaps,
            c.stale,
            c.late,
            c.liveness,
            c.recovery,
            c.claim,
            c.result
        );
    }
    if let Some(fewest) = outcomes
        .iter()
        .filter(|o| matches!(o.row.scenario.claim, Claim::Safe | Claim::Fenced))
        .min_by_key(|o| o.kind.holds)
    {
        let _ = writeln!(
            md,
            "\nFewest holds in a claimed-safe row: {} ({}).",
            fewest.kind.holds,
            fewest.row.label()
        );
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_backend_line_gives_every_kind_under_every_fault() {
        let r = rows(Backend::Lua, Topology::Single, &[Fault::None, Fault::Stall]);
        assert_eq!(r.len(), 10);
        assert!(
            r.iter().any(|r| r.kind == Kind::Semaphore
                && r.scenario.claim == Claim::Safe
                && r.scenario.fault == Fault::Stall)
        );
        assert!(
            r.iter()
                .any(|r| r.kind == Kind::MultiKey && r.scenario.claim == Claim::Fenced)
        );
        assert!(full().iter().all(|r| r.scenario.claim != Claim::Control));
        assert!(
            quick()
                .iter()
                .all(|r| matches!(r.scenario.claim, Claim::Safe | Claim::Fenced))
        );
        assert!(quick().iter().any(|r| r.filter_text().contains("kinds/read-write")));
    }
}
