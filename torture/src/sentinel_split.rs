//! Split brain through Redis Sentinel: lock-testkit's `NetSentinelGroup`
//! (a primary, two replicas and three sentinels, each on its own
//! network-namespace host, the settings of the loopback rows) with the
//! primary and client 0's host (client 0 and the last counter client, as
//! in every namespace row) partitioned from everything else. The sentinels,
//! all on the majority side, promote a replica; nobody tells the old
//! primary, which keeps taking the minority clients' writes until the
//! partition heals (3 × TTL after the promotion) and the sentinels demote
//! it (it resyncs from the new primary, dropping what it took alone).
//!
//! With `ReplicaAck(1)` every write the old primary takes alone fails its
//! `WAIT` (no replica follows it). Without, the loss is measured; and once
//! with `min-replicas-to-write 1` on the data nodes, which Sentinel's own
//! documentation offers to bound it (the old primary refuses writes once
//! no replica has acknowledged it for `min-replicas-max-lag`).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use lock_testkit::server::{NetHost, NetRedisServer, NetSentinelGroup, Network};

use crate::BoxResult;
use crate::clock;
use crate::plan::Fault;
use crate::record::{Log, Snapshot, UpdateOutcome};
use crate::run::Params;

/// Bound on the sentinels promoting a replica, and on the group settling
/// after the heal (every other node following the new primary).
const CONVERGE: Duration = Duration::from_secs(30);

/// The data nodes' extra arguments of the `min-replicas-to-write` row.
pub(crate) const MIN_REPLICAS_ARGS: [&str; 4] = ["--min-replicas-to-write", "1", "--min-replicas-max-lag", "1"];

/// Whether `fault` is one of this module's.
pub fn handles(fault: Fault) -> bool {
    matches!(
        fault,
        Fault::SentinelSplit | Fault::SentinelSplitAck | Fault::SentinelSplitMinReplicas
    )
}

/// What the injection saw, on the run's clock.
#[derive(Debug, Clone, Default)]
pub(crate) struct SplitMarks {
    fault: i64,
    old: Option<SocketAddr>,
    /// When every sentinel named the new primary (and it said `master`).
    promoted: Option<(i64, SocketAddr)>,
    healed: Option<i64>,
    /// When every other node (the old primary too) followed the new one.
    settled: Option<i64>,
    /// On the old primary, from the partition to the heal: writes applied
    /// (`rdb_changes_since_last_save`), `WAIT` calls, writes refused
    /// (`NOREPLICAS` errors).
    old_changes: Option<u64>,
    old_waits: Option<u64>,
    old_refused: Option<u64>,
}

/// The old primary's counters: changes since the last save, `WAIT` calls,
/// `NOREPLICAS` errors.
async fn counters(node: &NetRedisServer) -> BoxResult<(u64, u64, u64)> {
    let num = |v: Option<&String>, key: &str| -> u64 {
        v.and_then(|s| {
            s.split(',')
                .find_map(|kv| kv.strip_prefix(key))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
    };
    let persistence = node.info("persistence").await?;
    let changes = persistence
        .get("rdb_changes_since_last_save")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let waits = num(node.info("commandstats").await?.get("cmdstat_wait"), "calls=");
    let refused = num(node.info("errorstats").await?.get("errorstat_NOREPLICAS"), "count=");
    Ok((changes, waits, refused))
}

/// Partitions the primary and `minority` from the rest until the sentinels
/// have promoted a replica, then 3 × TTL more; heals, waits (bounded) for
/// the group to settle and every lock client to lock again.
pub(crate) async fn inject(
    net: &Network,
    group: &NetSentinelGroup,
    minority: &NetHost,
    p: &Params,
    log: &Log,
) -> BoxResult<SplitMarks> {
    let old = group.primary().await?;
    let before = counters(old).await?;
    let mut m = SplitMarks {
        fault: clock::now(),
        old: Some(old.addr()),
        ..SplitMarks::default()
    };
    net.partition(&[old.host(), minority])?;
    let new = match group.wait_for_failover(old, CONVERGE).await {
        Ok(new) => new,
        Err(e) => {
            net.heal()?;
            return Err(e.into());
        }
    };
    m.promoted = Some((clock::now(), new.addr()));
    tokio::time::sleep(p.fault_len()).await;
    // Read on the old primary's own host (no partition cuts it off), before
    // the heal: the resync from the new primary resets the changes.
    let during = counters(old).await?;
    net.heal()?;
    let healed = clock::now();
    m.healed = Some(healed);
    m.old_changes = Some(during.0.saturating_sub(before.0));
    m.old_waits = Some(during.1.saturating_sub(before.1));
    m.old_refused = Some(during.2.saturating_sub(before.2));
    log.window(m.fault, healed);
    group.wait_until_settled(CONVERGE).await?;
    m.settled = Some(clock::now());
    crate::netrows::wait_for_recovery(p, log, healed).await;
    Ok(m)
}

/// Milliseconds from `t0` to `t` (µs on the run clock).
fn ms(t0: i64, t: i64) -> i64 {
    (t - t0) / 1000
}

/// The split's timeline and what the clients saw, for SAFETY.md.
pub(crate) fn note(m: &SplitMarks, s: &Snapshot) -> String {
    let t0 = m.fault;
    let mut out = String::new();
    let _ = write!(
        out,
        "the primary ({}) and client 0's host (client 0 and the last counter client) partitioned from the replicas, \
         the sentinels and the other clients at 0 ms",
        m.old.map(|a| a.to_string()).unwrap_or_default()
    );
    if let Some((t, addr)) = m.promoted {
        let _ = write!(out, "; every sentinel names {addr} (role master) at {} ms", ms(t0, t));
    }
    let end = m.healed.unwrap_or(i64::MAX);
    if let Some(t) = m.healed {
        let _ = write!(out, "; healed at {} ms", ms(t0, t));
    }
    if let Some(t) = m.settled {
        let _ = write!(
            out,
            "; every other node, the old primary demoted, follows the new one at {} ms",
            ms(t0, t)
        );
    }
    if let (Some(c), Some(w), Some(r)) = (m.old_changes, m.old_waits, m.old_refused) {
        let _ = write!(
            out,
            ". The old primary, from the partition to the heal: {c} change(s) applied (`rdb_changes_since_last_save`, \
             key expirations included), {w} WAIT(s) (none acknowledged: no replica followed it), {r} write(s) \
             refused (NOREPLICAS)"
        );
    }
    let during = |b: &&crate::record::Body| b.start >= t0 && b.start < end;
    let minority = s.bodies.iter().filter(during).filter(|b| b.client == 0).count();
    let majority = s.bodies.iter().filter(during).filter(|b| b.client != 0).count();
    let _ = write!(
        out,
        ". The clients: during the partition client 0 started {minority} critical section(s), the others {majority}"
    );
    let window = |op: &&crate::record::UpdateOp| op.inv >= t0 && op.inv < end;
    let count = |o: fn(&UpdateOutcome) -> bool| s.updates.iter().filter(window).filter(|u| o(&u.outcome)).count();
    let _ = write!(
        out,
        "; counter increments invoked during it: {} acknowledged, {} outcome unknown, {} failed",
        count(|o| matches!(o, UpdateOutcome::Ok(_))),
        count(|o| matches!(o, UpdateOutcome::Unknown)),
        count(|o| matches!(o, UpdateOutcome::Failed))
    );
    if let Some(b) = s
        .bodies
        .iter()
        .filter(|b| b.client == 0 && b.start >= end)
        .min_by_key(|b| b.start)
    {
        let _ = write!(
            out,
            "; client 0's first section after the heal at {} ms",
            ms(t0, b.start)
        );
    }
    let errors: u64 = s.errors.values().sum();
    let _ = write!(
        out,
        "; {errors} client error(s) in the whole row (kinds under *Errors the clients saw*)"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Body, UpdateOp};

    #[test]
    fn the_note_counts_each_sides_sections_and_the_old_primarys_writes() {
        let m = SplitMarks {
            fault: 1_000_000,
            old: "10.1.0.2:7000".parse().ok(),
            promoted: Some((2_000_000, "10.1.0.3:7000".parse().unwrap())),
            healed: Some(3_000_000),
            settled: Some(4_500_000),
            old_changes: Some(12),
            old_waits: Some(3),
            old_refused: Some(0),
        };
        let s = Snapshot {
            bodies: vec![
                Body::short(0, 900_000),
                Body::short(0, 1_500_000),
                Body::short(1, 2_500_000),
                Body::short(0, 3_200_000),
            ],
            updates: vec![UpdateOp {
                inv: 1_200_000,
                resp: 1_300_000,
                outcome: UpdateOutcome::Ok(4),
            }],
            ..Snapshot::default()
        };
        let n = note(&m, &s);
        assert!(n.starts_with("the primary (10.1.0.2:7000) and client 0's host"), "{n}");
        assert!(
            n.contains("every sentinel names 10.1.0.3:7000 (role master) at 1000 ms"),
            "{n}"
        );
        assert!(n.contains("; healed at 2000 ms"), "{n}");
        assert!(n.contains("follows the new one at 3500 ms"), "{n}");
        assert!(n.contains("12 change(s) applied"), "{n}");
        assert!(n.contains("3 WAIT(s)"), "{n}");
        assert!(
            n.contains("client 0 started 1 critical section(s), the others 1"),
            "{n}"
        );
        assert!(n.contains("1 acknowledged, 0 outcome unknown, 0 failed"), "{n}");
        assert!(n.contains("client 0's first section after the heal at 2200 ms"), "{n}");
    }
}
