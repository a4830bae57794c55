//! The kinds' checkers: each kind's claim on its holds, plus the mutex
//! rows' checks (exclusion of exclusive holds inside validity windows,
//! fencing, loss signals, recovery) run on holds mapped to bodies.

use std::fmt::Write as _;

use super::client::{Hold, Role};
use super::{Kind, KindOutcome, KindRow, SEMAPHORE_SIZE};
use crate::check::{Bounds, Measured};
use crate::plan::{Claim, Fault};
use crate::record::{Body, Snapshot};

/// What the kind's own checker measured.
#[derive(Debug, Clone, Default)]
pub struct KindMeasured {
    /// Holds (completed or cancelled).
    pub holds: usize,
    /// Semaphore: most permits in use at one instant (validity windows).
    pub max_permits: u32,
    /// Semaphore: holds of more than one permit.
    pub multi_permit_holds: usize,
    /// Semaphore: holds of single-permit requests.
    pub single_permit_holds: usize,
    /// Semaphore: fewest holds of one client.
    pub fewest_client_holds: usize,
    /// Semaphore: fewest holds of one client asking for more than one permit.
    pub fewest_multi_client_holds: usize,
    /// Upgradeable: writer (or upgraded) holds inside an upgrader's read, both in their windows.
    pub writer_upgrader_overlaps: usize,
    /// Upgradeable: pairs of upgradeable holds (read or upgraded write) of
    /// two clients inside both windows at once.
    pub upgrader_overlaps: usize,
    /// Upgradeable: upgraded writes.
    pub upgrades: usize,
    /// Read-write: reader/writer pairs inside both windows at once.
    pub reader_writer_overlaps: usize,
    /// Read-write: writer holds.
    pub writer_holds: usize,
    /// Read-write: reader holds.
    pub reader_holds: usize,
    /// Read-write: share of the run (first hold to last) with a reader inside.
    pub reader_presence: f64,
    /// Read-write: writer holds whose writer asked while a reader was inside.
    pub writes_among_readers: usize,
    /// Read-write: longest time from a writer's request to its grant, µs.
    pub max_writer_wait_us: i64,
    /// Read-write: time from the fault healing to the next writer's grant, µs.
    pub writer_recovery_us: Option<i64>,
    /// Read-write: writers never completed, or did not resume within the
    /// recovery bound after the fault healed.
    pub writers_stuck: bool,
    /// Election: terms held by more than one leader.
    pub terms_shared: usize,
    /// Election: leaders whose term was not above the previous leader's.
    pub terms_backwards: usize,
    /// Election: distinct terms seen.
    pub terms: usize,
}

/// The body of a hold under `key` (the shared checks' shape).
fn body(h: &Hold, key: usize) -> Body {
    Body {
        client: h.client,
        key,
        start: h.start,
        end: h.end,
        deadline: h.deadline,
        fence: h.fence,
        cancelled: h.cancelled,
        stalled: h.stalled,
    }
}

/// A key of its own per client: never shared, so never an overlap.
const OWN_KEY: usize = 1_000;

/// Run the shared checks and the kind's own on a row's records.
pub fn measure(
    kind: Kind,
    holds: &[Hold],
    snapshot: Snapshot,
    b: Bounds,
    fault_planned: bool,
    hangs: usize,
    span: (i64, i64),
) -> (Measured, KindMeasured) {
    // Loss signals and recovery: one body per hold (no shared key).
    let per_hold = Snapshot {
        bodies: holds.iter().map(|h| body(h, OWN_KEY + h.client)).collect(),
        writes: Vec::new(),
        ..snapshot.clone()
    };
    let mut m = crate::check::measure(&per_hold, b, fault_planned, None, hangs);
    // Exclusion and fencing: the exclusive holds, one body per key held.
    let exclusive: Vec<Body> = holds
        .iter()
        .flat_map(|h| match h.role {
            Role::Permits(_) | Role::Reader | Role::Upgrader => Vec::new(),
            _ => h.keys.iter().map(|&k| body(h, k)).collect(),
        })
        .collect();
    let excl = crate::check::measure(
        &Snapshot {
            bodies: exclusive,
            ..snapshot
        },
        b,
        false,
        None,
        0,
    );
    m.overlaps = excl.overlaps;
    m.max_overlap_us = excl.max_overlap_us;
    m.body_overlaps = excl.body_overlaps;
    m.stale_accepted = excl.stale_accepted;
    m.stale_rejected = excl.stale_rejected;
    m.fresh_rejected = excl.fresh_rejected;
    m.fenced = excl.fenced;
    let mut k = KindMeasured {
        holds: holds.len(),
        ..KindMeasured::default()
    };
    match kind {
        Kind::Semaphore => semaphore(holds, &mut k),
        Kind::ReadWrite => rw(holds, &per_hold, b, span, &mut k),
        Kind::Upgradeable => {
            rw(holds, &per_hold, b, span, &mut k);
            upgradeable(holds, &mut k);
        }
        Kind::MultiKey => {}
        Kind::Election => election(holds, &mut k),
    }
    (m, k)
}

fn semaphore(holds: &[Hold], k: &mut KindMeasured) {
    // +permits at a start, -permits at a valid end; ends first at a tie.
    let mut events: Vec<(i64, i64)> = Vec::new();
    for h in holds {
        let Role::Permits(n) = h.role else { continue };
        if n > 1 {
            k.multi_permit_holds += 1;
        } else {
            k.single_permit_holds += 1;
        }
        if h.valid_end() > h.start {
            events.push((h.start, i64::from(n)));
            events.push((h.valid_end(), -i64::from(n)));
        }
    }
    let clients = holds.iter().map(|h| h.client).max().map_or(0, |c| c + 1);
    let per_client = |c: usize| holds.iter().filter(|h| h.client == c).count();
    k.fewest_client_holds = (0..clients).map(per_client).min().unwrap_or(0);
    k.fewest_multi_client_holds = (0..clients)
        .filter(|&c| {
            holds
                .iter()
                .any(|h| h.client == c && matches!(h.role, Role::Permits(n) if n > 1))
        })
        .map(per_client)
        .min()
        .unwrap_or(0);
    events.sort_unstable();
    let mut in_use: i64 = 0;
    for (_, d) in events {
        in_use += d;
        k.max_permits = k.max_permits.max(u32::try_from(in_use).unwrap_or(0));
    }
}

/// Whether two holds are both inside their validity windows at some instant.
fn overlap(a: &Hold, b: &Hold) -> bool {
    a.start.max(b.start) < a.valid_end().min(b.valid_end())
}

/// The upgradeable rows' own claims: no writer (plain or upgraded) inside
/// an upgrader's read, no two clients' upgradeable holds at once.
fn upgradeable(holds: &[Hold], k: &mut KindMeasured) {
    let reads: Vec<&Hold> = holds.iter().filter(|h| h.role == Role::Upgrader).collect();
    let upgraded: Vec<&Hold> = holds.iter().filter(|h| h.role == Role::Upgraded).collect();
    k.upgrades = upgraded.len();
    for w in holds.iter().filter(|h| matches!(h.role, Role::Writer | Role::Upgraded)) {
        k.writer_upgrader_overlaps += reads.iter().filter(|r| r.client != w.client && overlap(w, r)).count();
    }
    let ups: Vec<&Hold> = reads.iter().chain(upgraded.iter()).copied().collect();
    for (i, a) in ups.iter().enumerate() {
        k.upgrader_overlaps += ups[i + 1..]
            .iter()
            .filter(|b| b.client != a.client && overlap(a, b))
            .count();
    }
}

fn rw(holds: &[Hold], per_hold: &Snapshot, b: Bounds, span: (i64, i64), k: &mut KindMeasured) {
    let writers: Vec<&Hold> = holds
        .iter()
        .filter(|h| matches!(h.role, Role::Writer | Role::Upgraded))
        .collect();
    let readers: Vec<&Hold> = holds.iter().filter(|h| h.role == Role::Reader).collect();
    k.writer_holds = writers.len();
    k.reader_holds = readers.len();
    for w in &writers {
        for r in &readers {
            if w.start.max(r.start) < w.valid_end().min(r.valid_end()) {
                k.reader_writer_overlaps += 1;
            }
        }
        if readers.iter().any(|r| r.start <= w.asked && w.asked < r.end) {
            k.writes_among_readers += 1;
        }
        k.max_writer_wait_us = k.max_writer_wait_us.max(w.start - w.asked);
    }
    // Reader presence over the span from the first hold to the last end.
    let from = holds.iter().map(|h| h.start).min().unwrap_or(span.0);
    let to = holds.iter().map(|h| h.end).max().unwrap_or(span.1);
    let mut intervals: Vec<(i64, i64)> = readers.iter().map(|r| (r.start, r.end)).collect();
    intervals.sort_unstable();
    let (mut covered, mut reach) = (0i64, i64::MIN);
    for (s, e) in intervals {
        let s = s.max(reach);
        if e > s {
            covered += e - s;
        }
        reach = reach.max(e);
    }
    if to > from {
        k.reader_presence = covered as f64 / (to - from) as f64;
    }
    // Liveness, counted like recovery: a writer must get in after the fault
    // healed (or at all, without a fault) within the bound.
    match per_hold.windows.iter().map(|w| w.to).min() {
        Some(healed) => {
            k.writer_recovery_us = writers
                .iter()
                .map(|w| w.start)
                .filter(|&t| t >= healed)
                .min()
                .map(|t| t - healed);
            k.writers_stuck = k.writer_recovery_us.is_none_or(|r| r > b.recovery_us);
        }
        None => k.writers_stuck = writers.is_empty(),
    }
}

fn election(holds: &[Hold], k: &mut KindMeasured) {
    let mut leaders: Vec<&Hold> = holds.iter().filter(|h| h.role == Role::Candidate).collect();
    leaders.sort_by_key(|h| h.start);
    let mut terms: Vec<u64> = leaders.iter().filter_map(|h| h.fence).collect();
    let mut last: Option<u64> = None;
    for h in &leaders {
        let Some(t) = h.fence else {
            k.terms_backwards += 1;
            continue;
        };
        if last.is_some_and(|l| t <= l) {
            k.terms_backwards += 1;
        }
        last = Some(t);
    }
    terms.sort_unstable();
    let before = terms.len();
    terms.dedup();
    k.terms = terms.len();
    k.terms_shared = before - terms.len();
}

/// The claims a kind row breaks.
pub fn judge(row: &KindRow, m: &Measured, k: &KindMeasured) -> Vec<String> {
    let mut v = crate::run::judge(&row.scenario, m);
    if !matches!(row.scenario.claim, Claim::Safe | Claim::Fenced) {
        // A server that lost its data forgets the leader, not the order of
        // terms: they must keep growing.
        if row.kind == Kind::Election && row.scenario.fault == Fault::RestartEmpty && k.terms_backwards > 0 {
            v.push(format!(
                "{} leaders with a term not above the previous leader's after the server lost its data",
                k.terms_backwards
            ));
        }
        return v;
    }
    match row.kind {
        Kind::Semaphore => {
            if k.max_permits > SEMAPHORE_SIZE {
                v.push(format!(
                    "{} permits in use at once inside validity windows (size {SEMAPHORE_SIZE})",
                    k.max_permits
                ));
            }
            if k.multi_permit_holds == 0 {
                v.push("no 2-permit request completed under single-permit churn".into());
            }
        }
        Kind::ReadWrite => {
            if k.reader_writer_overlaps > 0 {
                v.push(format!(
                    "{} reader/writer overlaps inside validity windows",
                    k.reader_writer_overlaps
                ));
            }
            if k.writers_stuck {
                v.push("writers did not complete under the reader load (within 20 × TTL of the fault healing)".into());
            }
        }
        Kind::Upgradeable => {
            for (n, what) in [
                (k.reader_writer_overlaps, "reader/writer overlaps"),
                (k.writer_upgrader_overlaps, "writers inside an upgrader's read"),
                (k.upgrader_overlaps, "overlaps of two upgradeable holds"),
            ] {
                if n > 0 {
                    v.push(format!("{n} {what} inside validity windows"));
                }
            }
            if k.upgrades == 0 {
                v.push("no upgrade completed under the reader load".into());
            }
            if k.writers_stuck {
                v.push("writes did not resume within 20 × TTL of the fault healing".into());
            }
        }
        Kind::MultiKey => {}
        Kind::Election => {
            if k.terms_shared > 0 {
                v.push(format!("{} terms held by more than one leader", k.terms_shared));
            }
            if k.terms_backwards > 0 {
                v.push(format!(
                    "{} leaders with a term not above the previous leader's",
                    k.terms_backwards
                ));
            }
        }
    }
    v
}

fn ms(us: i64) -> String {
    format!("{:.0} ms", us as f64 / 1000.0)
}

/// Cells of one kind row.
pub struct Cells {
    /// Holds.
    pub holds: String,
    /// The kind's own check.
    pub kind_check: String,
    /// Exclusive holds overlapping inside their windows.
    pub overlaps: String,
    /// Stale writes accepted / rejected.
    pub stale: String,
    /// Late loss signals.
    pub late: String,
    /// The kind's liveness measure.
    pub liveness: String,
    /// Recovery after the fault.
    pub recovery: String,
    /// Claim.
    pub claim: String,
    /// Result.
    pub result: String,
}

/// Format one outcome.
pub fn cells(o: &KindOutcome) -> Cells {
    let (m, k) = (&o.measured, &o.kind);
    let kind_check = match o.row.kind {
        Kind::Semaphore => format!("max {} of {SEMAPHORE_SIZE} permits in use", k.max_permits),
        Kind::ReadWrite => format!(
            "{} reader/writer overlaps; {} writes ({} asked among readers, longest wait {}), {} reads; readers \
             inside {:.0}% of the time",
            k.reader_writer_overlaps,
            k.writer_holds,
            k.writes_among_readers,
            ms(k.max_writer_wait_us),
            k.reader_holds,
            k.reader_presence * 100.0
        ),
        Kind::Upgradeable => format!(
            "{} writer/upgrader overlaps, {} upgrader/upgrader, {} reader/writer; {} upgrades, {} plain writes, {} \
             reads",
            k.writer_upgrader_overlaps,
            k.upgrader_overlaps,
            k.reader_writer_overlaps,
            k.upgrades,
            k.writer_holds - k.upgrades,
            k.reader_holds
        ),
        Kind::MultiKey => "per-key exclusion (sets and mutex holders)".to_owned(),
        Kind::Election => format!(
            "{} terms; shared {}, not increasing {}",
            k.terms, k.terms_shared, k.terms_backwards
        ),
    };
    let overlaps = if m.overlaps == 0 {
        "0".to_owned()
    } else {
        format!("**{}** (max {})", m.overlaps, ms(m.max_overlap_us))
    };
    let stale = if o.row.kind == Kind::Semaphore {
        "— (shared permits)".to_owned()
    } else if m.fresh_rejected > 0 {
        format!(
            "{} / {}; {} current-holder writes rejected",
            m.stale_accepted, m.stale_rejected, m.fresh_rejected
        )
    } else {
        format!("{} / {}", m.stale_accepted, m.stale_rejected)
    };
    let mut late = if m.late_losses == 0 {
        "0".to_owned()
    } else {
        format!("**{}** (max {})", m.late_losses, ms(m.max_late_us))
    };
    if m.stalled_late > 0 {
        let _ = write!(late, "; stalled holder: {}", m.stalled_late);
    }
    if m.excused > 0 {
        let _ = write!(late, "; {} excused", m.excused);
    }
    let liveness = match o.row.kind {
        Kind::Semaphore => format!(
            "{} 2-permit holds, {} 1-permit; fewest per client {} (per 2-permit client {})",
            k.multi_permit_holds, k.single_permit_holds, k.fewest_client_holds, k.fewest_multi_client_holds
        ),
        Kind::ReadWrite | Kind::Upgradeable => match k.writer_recovery_us {
            Some(r) => format!("writers back {} after the fault", ms(r)),
            None if k.writers_stuck => "**writers stuck**".to_owned(),
            None => format!("{} writes", k.writer_holds),
        },
        Kind::MultiKey | Kind::Election => "—".to_owned(),
    };
    let recovery = match m.recovery_us {
        Some(r) => ms(r),
        None if m.stuck => "**none**".to_owned(),
        None => "—".to_owned(),
    };
    let mut claim = o.row.scenario.claim.label().to_owned();
    if !o.row.scenario.why.is_empty() {
        let _ = write!(claim, " ({})", o.row.scenario.why);
    }
    let result = if o.violations.is_empty() {
        match o.row.scenario.claim {
            Claim::Unsafe => "measured".to_owned(),
            _ => "holds".to_owned(),
        }
    } else if o.row.scenario.claim == Claim::Unsafe {
        format!("measured: {}", o.violations.join("; "))
    } else {
        format!("**VIOLATED**: {}", o.violations.join("; "))
    };
    Cells {
        holds: k.holds.to_string(),
        kind_check,
        overlaps,
        stale,
        late,
        liveness,
        recovery,
        claim,
        result,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(client: usize, role: Role, start: i64, end: i64, fence: Option<u64>) -> Hold {
        Hold {
            client,
            role,
            keys: vec![0],
            asked: start,
            start,
            end,
            deadline: end + 100,
            fence,
            cancelled: false,
            stalled: false,
        }
    }

    const B: Bounds = Bounds {
        slack_us: 10,
        recovery_us: 1_000,
    };

    #[test]
    fn permits_in_use_are_summed_inside_windows() {
        let holds = vec![
            hold(0, Role::Permits(2), 0, 100, None),
            hold(1, Role::Permits(1), 50, 150, None),
            hold(2, Role::Permits(1), 100, 200, None),
        ];
        let (_, k) = measure(Kind::Semaphore, &holds, Snapshot::default(), B, false, 0, (0, 200));
        assert_eq!((k.max_permits, k.multi_permit_holds), (3, 1));
        assert_eq!((k.fewest_client_holds, k.fewest_multi_client_holds), (1, 1));
        let mut past = holds.clone();
        past.push(hold(3, Role::Permits(1), 60, 90, None));
        let (_, k) = measure(Kind::Semaphore, &past, Snapshot::default(), B, false, 0, (0, 200));
        assert_eq!(k.max_permits, 4, "one permit too many");
    }

    #[test]
    fn a_reader_inside_a_writers_window_is_counted_and_writers_must_complete() {
        let holds = vec![
            hold(0, Role::Writer, 0, 100, Some(1)),
            hold(1, Role::Reader, 150, 300, None),
            hold(2, Role::Reader, 90, 200, None),
        ];
        let (_, k) = measure(Kind::ReadWrite, &holds, Snapshot::default(), B, false, 0, (0, 300));
        assert_eq!((k.reader_writer_overlaps, k.writer_holds, k.reader_holds), (1, 1, 2));
        assert!(!k.writers_stuck);
        let readers_only = &holds[1..];
        let (_, k) = measure(
            Kind::ReadWrite,
            readers_only,
            Snapshot::default(),
            B,
            false,
            0,
            (0, 300),
        );
        assert!(k.writers_stuck, "no writer ever got in");
    }

    #[test]
    fn a_writer_inside_an_upgraders_read_and_two_upgraders_are_counted() {
        let holds = vec![
            hold(0, Role::Upgrader, 0, 100, None),
            hold(0, Role::Upgraded, 150, 250, Some(2)),
            hold(1, Role::Reader, 0, 120, None),
            hold(2, Role::Writer, 300, 400, Some(3)),
        ];
        let (m, k) = measure(Kind::Upgradeable, &holds, Snapshot::default(), B, false, 0, (0, 400));
        assert_eq!(
            (
                k.writer_upgrader_overlaps,
                k.upgrader_overlaps,
                k.reader_writer_overlaps
            ),
            (0, 0, 0)
        );
        assert_eq!((k.upgrades, k.writer_holds, m.overlaps), (1, 2, 0));
        let mut bad = holds.clone();
        bad.push(hold(2, Role::Writer, 50, 90, Some(1)));
        bad.push(hold(1, Role::Upgrader, 200, 260, None));
        let (_, k) = measure(Kind::Upgradeable, &bad, Snapshot::default(), B, false, 0, (0, 400));
        assert_eq!(
            k.writer_upgrader_overlaps, 2,
            "a writer in a read; the upgraded write in another's"
        );
        assert_eq!(k.upgrader_overlaps, 1, "two clients' upgradeable holds at once");
    }

    #[test]
    fn one_leader_per_term_and_growing_terms() {
        let holds = vec![
            hold(0, Role::Candidate, 0, 100, Some(5)),
            hold(1, Role::Candidate, 100, 200, Some(5)),
            hold(2, Role::Candidate, 200, 300, Some(4)),
        ];
        let (_, k) = measure(Kind::Election, &holds, Snapshot::default(), B, false, 0, (0, 300));
        assert_eq!((k.terms, k.terms_shared, k.terms_backwards), (2, 1, 2));
    }

    #[test]
    fn a_key_held_by_a_set_and_a_mutex_holder_at_once_overlaps() {
        let mut set = hold(0, Role::Set, 0, 100, Some(1));
        set.keys = vec![0, 2];
        let mut single = hold(1, Role::Mutex, 50, 150, Some(2));
        single.keys = vec![2];
        let (m, _) = measure(
            Kind::MultiKey,
            &[set, single],
            Snapshot::default(),
            B,
            false,
            0,
            (0, 150),
        );
        assert_eq!(m.overlaps, 1);
    }
}
