//! The targets of issues 7 and 15, checked against one run's numbers.

use crate::lab::Backend;
use crate::results::{HotRow, Kind, Library, OpRow, RAW_FRED_SCRIPTED, RAW_REDIS_RS, RSLOCK, Results, Shape};

/// Uncontended: Lua backend ≥ this × rslock.
pub const LUA_VS_RSLOCK: f64 = 1.3;
/// Uncontended: backend ≥ this × the raw client of its library.
pub const VS_RAW: f64 = 0.95;
/// verrou's postgres advisory mode / raw advisory locks on a held
/// connection, uncontended throughput (issue 44).
pub const ADVISORY_VS_RAW: f64 = 0.9;
/// Client CPU per pair ≤ this × the raw client's.
pub const CPU_VS_RAW: f64 = 1.05;
/// Sequential pair p50 ≤ this × the raw client's pair p50 (same commands).
pub const LATENCY_VS_RAW: f64 = 1.05;
/// Hot key: waiters' wait p99 ≤ this (ms).
pub const HOT_WAIT_P99_MS: f64 = 25.0;
/// Hot key: acquisitions/s ≥ this × rslock's (one server).
pub const HOT_RATE_VS_RSLOCK: f64 = 1.0;
/// Hot key: Redlock's acquisitions/s ≥ this × rslock's.
pub const HOT_REDLOCK_RATE_VS_RSLOCK: f64 = 0.5;
/// Hot key, fair mode: waiters' wait p99 ≤ this (ms).
pub const FAIR_WAIT_P99_MS: f64 = 10.0;
/// Hot key, fair mode: no contender below this share of its fair share.
pub const FAIR_MIN_SHARE: f64 = 0.8;
/// Hot key, fair mode: at least this share of acquisitions change holder.
pub const FAIR_HOLDER_CHANGES: f64 = 0.9;
/// Hot key, fair mode: hand-off p50 ≤ this × PING p50.
pub const FAIR_HANDOFF_VS_PING: f64 = 2.0;
/// Hot key: no contender below this share of its fair share.
pub const HOT_MIN_SHARE: f64 = 0.5;
/// EXCAS server commands per increment ≤ this × the EXGET+EXSET loop's.
pub const EXCAS_VS_EXGET: f64 = 0.6;
/// Redlock ×5 pair p50 ≤ this × single instance.
pub const REDLOCK_RATIO: f64 = 1.5;
/// Redlock ×5: server commands per pair ≤ this (5 × SET + 5 × a
/// compare-and-delete script of two commands, plus a tenth of a slack).
pub const REDLOCK_COMMANDS: f64 = 20.1;
/// Memory pair ≤ this × tokio's mutex.
pub const MEMORY_RATIO: f64 = 5.0;
/// Many held locks: client CPU ≤ this share of one core.
pub const RENEW_CORE_SHARE: f64 = 0.02;
/// etcd (issue 26): verrou's pairs/s against etcd's server-side Lock API.
pub const ETCD_VS_LOCK_API: f64 = 1.0;
/// etcd: a sequential pair's p50 against this many single-key read round
/// trips of the same client.
pub const ETCD_PAIR_VS_READS: f64 = 2.0;
/// NATS (issue 45): a sequential pair's p50 against this many key-value
/// `get` round trips of the same client.
pub const NATS_PAIR_VS_READ: f64 = 2.2;
/// Redis Sentinel (issue 46): uncontended pairs through the sentinels ≥
/// this × the same backend connected directly to the primary.
pub const SENTINEL_VS_DIRECT: f64 = 0.97;

/// One checked target.
#[derive(Debug, Clone)]
pub struct Check {
    /// The target, in words.
    pub target: String,
    /// What was measured, in words.
    pub measured: String,
    /// Met, missed, or not measured in this run.
    pub met: Option<bool>,
}

fn row<'a>(rows: &'a [OpRow], label: &str) -> Option<&'a OpRow> {
    rows.iter().find(|r| r.label == label)
}

fn at_least(target: String, value: f64, limit: f64, measured: String) -> Check {
    Check {
        target,
        measured,
        met: Some(value >= limit),
    }
}

fn at_most(target: String, value: f64, limit: f64, measured: String) -> Check {
    Check {
        target,
        measured,
        met: Some(value <= limit),
    }
}

fn missing(target: String, why: &str) -> Check {
    Check {
        target,
        measured: why.to_owned(),
        met: None,
    }
}

fn us(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Every target, in the order.
pub fn evaluate(r: &Results) -> Vec<Check> {
    let mut out = Vec::new();
    uncontended(r, &mut out);
    latency(r, &mut out);
    hot_key(r, &mut out);
    updates(r, &mut out);
    redlock(r, &mut out);
    memory(r, &mut out);
    renewals(r, &mut out);
    postgres(r, &mut out);
    etcd(r, &mut out);
    nats(r, &mut out);
    sentinel(r, &mut out);
    out
}

fn uncontended(r: &Results, out: &mut Vec<Check>) {
    let rows = r.uncontended.as_ref().map(|u| u.rows.as_slice()).unwrap_or(&[]);
    let lua = row(rows, Backend::RedisLua.label());
    let tair = row(rows, Backend::Tair.label());
    let (rslock, raw_rs, raw_fred) = (row(rows, RSLOCK), row(rows, RAW_REDIS_RS), row(rows, RAW_FRED_SCRIPTED));
    let rate = |a: &OpRow, b: &OpRow, limit: f64, what: &str| {
        let ratio = a.m.rate() / b.m.rate().max(1e-9);
        at_least(
            format!("uncontended: {} ≥ {limit}× {what}", a.label),
            ratio,
            limit,
            format!("{ratio:.2}× ({:.0} vs {:.0} pairs/s)", a.m.rate(), b.m.rate()),
        )
    };
    let cpu = |a: &OpRow, b: &OpRow| {
        let ratio = us(a.m.client_cpu_per_op()) / us(b.m.client_cpu_per_op()).max(1e-9);
        at_most(
            format!(
                "uncontended: {} client CPU per pair ≤ {CPU_VS_RAW}× {}",
                a.label, b.label
            ),
            ratio,
            CPU_VS_RAW,
            format!(
                "{ratio:.2}× ({:.1} vs {:.1} µs)",
                us(a.m.client_cpu_per_op()),
                us(b.m.client_cpu_per_op())
            ),
        )
    };
    let lua_rslock = format!("uncontended: {} ≥ {LUA_VS_RSLOCK}× rslock", Backend::RedisLua.label());
    let lua_raw = format!("uncontended: {} ≥ {VS_RAW}× raw redis-rs", Backend::RedisLua.label());
    let lua_cpu = format!(
        "uncontended: {} client CPU ≤ {CPU_VS_RAW}× raw redis-rs",
        Backend::RedisLua.label()
    );
    let tair_raw = format!("uncontended: {} ≥ {VS_RAW}× raw fred", Backend::Tair.label());
    let tair_cpu = format!(
        "uncontended: {} client CPU ≤ {CPU_VS_RAW}× raw fred",
        Backend::Tair.label()
    );
    out.push(match (lua, rslock) {
        (Some(a), Some(b)) => rate(a, b, LUA_VS_RSLOCK, "rslock"),
        _ => missing(lua_rslock, "row not measured"),
    });
    out.push(match (lua, raw_rs) {
        (Some(a), Some(b)) => rate(a, b, VS_RAW, "raw redis-rs"),
        _ => missing(lua_raw, "row not measured"),
    });
    out.push(match (tair, raw_fred) {
        (Some(a), Some(b)) => rate(a, b, VS_RAW, "raw fred"),
        _ => missing(tair_raw, "row not measured"),
    });
    out.push(match (lua, raw_rs) {
        (Some(a), Some(b)) => cpu(a, b),
        _ => missing(lua_cpu, "row not measured"),
    });
    out.push(match (tair, raw_fred) {
        (Some(a), Some(b)) => cpu(a, b),
        _ => missing(tair_cpu, "row not measured"),
    });
}

fn latency(r: &Results, out: &mut Vec<Check>) {
    for (backend, raw) in [(Backend::RedisLua, RAW_REDIS_RS), (Backend::Tair, RAW_FRED_SCRIPTED)] {
        let target = format!(
            "sequential (current-thread runtime): {} pair p50 ≤ {LATENCY_VS_RAW}× {raw}",
            backend.label()
        );
        let found = r.latency.as_ref().and_then(|l| {
            let find = |label: &str| l.rows.iter().find(|(_, row)| row.label == label).map(|(_, row)| row);
            Some((find(backend.label())?, find(raw)?))
        });
        out.push(match found {
            Some((row, raw_row)) => {
                let ratio = us(row.m.latencies.p50()) / us(raw_row.m.latencies.p50()).max(1e-9);
                at_most(
                    target,
                    ratio,
                    LATENCY_VS_RAW,
                    format!(
                        "{ratio:.2}× ({:.1} vs {:.1} µs)",
                        us(row.m.latencies.p50()),
                        us(raw_row.m.latencies.p50()),
                    ),
                )
            }
            None => missing(target, "row not measured"),
        });
    }
}

fn hot_key(r: &Results, out: &mut Vec<Check>) {
    let Some(h) = &r.hot_keys else {
        out.push(missing("hot key: all targets".to_owned(), "scenario not run"));
        return;
    };
    // The postgres, etcd and NATS rows have their own targets (`postgres`,
    // `etcd` and `nats` below).
    for row in h.rows.iter().filter(|row| {
        row.kind == Kind::Verrou
            && !crate::pg::is_pg(&row.label)
            && !crate::etcd::is_etcd(&row.label)
            && !crate::nats::is_nats(&row.label)
    }) {
        let name = format!("{} ({})", row.label, row.shape.name());
        let p99 = row.r.waits.p99().as_secs_f64() * 1e3;
        if row.fair {
            fair_hot_key(r, row, &name, out);
            continue;
        }
        out.push(at_most(
            format!("hot key: {name} wait p99 ≤ {HOT_WAIT_P99_MS} ms"),
            p99,
            HOT_WAIT_P99_MS,
            format!(
                "{p99:.2} ms (p50 {:.2}, max {:.2})",
                row.r.waits.p50().as_secs_f64() * 1e3,
                row.r.waits.max().as_secs_f64() * 1e3
            ),
        ));
        let peer = h.rows.iter().find(|p| p.kind == Kind::Peer && p.shape == row.shape);
        let limit = if row.label.contains("redlock") {
            HOT_REDLOCK_RATE_VS_RSLOCK
        } else {
            HOT_RATE_VS_RSLOCK
        };
        let target = format!(
            "hot key: {name} acquisitions/s ≥ {limit}× rslock ({})",
            row.shape.name()
        );
        out.push(match peer {
            Some(p) => {
                let ratio = row.r.rate() / p.r.rate().max(1e-9);
                at_least(
                    target,
                    ratio,
                    limit,
                    format!("{ratio:.1}× ({:.0} vs {:.0}/s)", row.r.rate(), p.r.rate()),
                )
            }
            None => missing(target, "rslock row not measured"),
        });
        out.push(at_least(
            format!("hot key: {name} no contender below {HOT_MIN_SHARE} of its fair share"),
            row.r.min_share(),
            HOT_MIN_SHARE,
            format!(
                "min {:.2}, max {:.2} of fair share",
                row.r.min_share(),
                row.r.max_share()
            ),
        ));
    }
    let _ = Shape::Shared;
}

/// The fair-mode targets of one row: wait p99, least-served share, holder
/// changes, and hand-off p50 against the PING p50 of the backend's client
/// library (scenario 2; none for the memory backend).
fn fair_hot_key(r: &Results, row: &HotRow, name: &str, out: &mut Vec<Check>) {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let p99 = ms(row.r.waits.p99());
    out.push(at_most(
        format!("hot key: {name} wait p99 ≤ {FAIR_WAIT_P99_MS} ms"),
        p99,
        FAIR_WAIT_P99_MS,
        format!(
            "{p99:.2} ms (p50 {:.2}, max {:.2})",
            ms(row.r.waits.p50()),
            ms(row.r.waits.max())
        ),
    ));
    out.push(at_least(
        format!("hot key: {name} no contender below {FAIR_MIN_SHARE} of its fair share"),
        row.r.min_share(),
        FAIR_MIN_SHARE,
        format!(
            "min {:.2}, max {:.2} of fair share",
            row.r.min_share(),
            row.r.max_share()
        ),
    ));
    let changes = row.r.holder_changes();
    out.push(at_least(
        format!("hot key: {name} holder changed ≥ {:.0}%", FAIR_HOLDER_CHANGES * 100.0),
        changes,
        FAIR_HOLDER_CHANGES,
        format!("{:.0}%", changes * 100.0),
    ));
    let library = if row.label.contains("tair") {
        Library::Fred
    } else if row.label.contains("memory") {
        return;
    } else {
        Library::RedisRs
    };
    let target = format!("hot key: {name} hand-off p50 ≤ {FAIR_HANDOFF_VS_PING} × PING p50");
    let ping = r
        .latency_multi
        .as_ref()
        .or(r.latency.as_ref())
        .and_then(|l| l.ping_p50(library));
    out.push(match ping {
        Some(ping) => {
            let ratio = row.r.handoffs.p50().as_secs_f64() / ping.as_secs_f64().max(1e-9);
            at_most(
                target,
                ratio,
                FAIR_HANDOFF_VS_PING,
                format!(
                    "{ratio:.1}× ({:.3} ms vs PING {:.3} ms)",
                    ms(row.r.handoffs.p50()),
                    ms(ping)
                ),
            )
        }
        None => missing(target, "PING not measured (scenario 2)"),
    });
}

fn updates(r: &Results, out: &mut Vec<Check>) {
    let target = format!("optimistic: Tair EXCAS server commands per increment ≤ {EXCAS_VS_EXGET}× EXGET+EXSET loop");
    let rows = r.updates.as_ref().map(|u| u.rows.as_slice()).unwrap_or(&[]);
    let excas = rows.iter().find(|row| row.label.contains("EXCAS"));
    let exget = rows.iter().find(|row| row.label.contains("EXGET"));
    out.push(match (excas, exget) {
        (Some(a), Some(b)) => {
            let ratio = a.commands_per_increment() / b.commands_per_increment().max(1e-9);
            at_most(
                target,
                ratio,
                EXCAS_VS_EXGET,
                format!(
                    "{ratio:.2}× ({:.2} vs {:.2} commands)",
                    a.commands_per_increment(),
                    b.commands_per_increment()
                ),
            )
        }
        _ => missing(target, "row not measured"),
    });
}

fn redlock(r: &Results, out: &mut Vec<Check>) {
    let target = format!("redlock (current-thread runtime): ×5 pair p50 ≤ {REDLOCK_RATIO}× single instance");
    let pair = r
        .redlock
        .as_ref()
        .and_then(|rl| rl.pairs.iter().find(|(one, _)| one.kind == Kind::Verrou));
    out.push(match pair {
        Some((one, five)) => {
            let ratio = us(five.m.latencies.p50()) / us(one.m.latencies.p50()).max(1e-9);
            at_most(
                target,
                ratio,
                REDLOCK_RATIO,
                format!(
                    "{ratio:.2}× ({:.1} vs {:.1} µs)",
                    us(five.m.latencies.p50()),
                    us(one.m.latencies.p50())
                ),
            )
        }
        None => missing(target, "row not measured"),
    });
    let target = format!("redlock (current-thread runtime): ×5 server commands per pair ≤ {REDLOCK_COMMANDS}");
    out.push(match pair {
        Some((_, five)) => {
            let commands = five.m.commands_per_op();
            at_most(target, commands, REDLOCK_COMMANDS, format!("{commands:.2}"))
        }
        None => missing(target, "row not measured"),
    });
}

fn memory(r: &Results, out: &mut Vec<Check>) {
    let target = format!("memory: pair ≤ {MEMORY_RATIO}× tokio::sync::Mutex lock/unlock");
    let pair = r
        .memory
        .as_ref()
        .and_then(|m| Some((m.verrou.as_ref()?, m.tokio.as_ref()?)));
    out.push(match pair {
        Some((v, t)) => {
            let (vn, tn) = (v.time_per_op().as_secs_f64() * 1e9, t.time_per_op().as_secs_f64() * 1e9);
            let ratio = vn / tn.max(1e-9);
            at_most(
                target,
                ratio,
                MEMORY_RATIO,
                format!("{ratio:.0}× ({vn:.0} vs {tn:.0} ns)"),
            )
        }
        None => missing(target, "row not measured"),
    });
}

fn renewals(r: &Results, out: &mut Vec<Check>) {
    let rows = r.renewals.as_ref().map(|rn| rn.rows.as_slice()).unwrap_or(&[]);
    if rows.is_empty() {
        out.push(missing(
            format!(
                "many held locks: client CPU ≤ {}% of one core",
                RENEW_CORE_SHARE * 100.0
            ),
            "not measured",
        ));
    }
    for row in rows {
        out.push(at_most(
            format!(
                "many held locks: {} × {} client CPU ≤ {}% of one core",
                row.locks,
                row.label,
                RENEW_CORE_SHARE * 100.0
            ),
            row.client_core_share(),
            RENEW_CORE_SHARE,
            format!(
                "{:.2}% ({:.1} µs per renewal)",
                row.client_core_share() * 100.0,
                us(row.cpu_per_renewal())
            ),
        ));
    }
}

/// Postgres (issue 25): the default backend against raw tokio-postgres
/// sending the same statements over the same pool (throughput and
/// sequential p50), and its hot-key waits, default and fair mode. Its
/// renewals are checked with every backend's in [`renewals`].
fn postgres(r: &Results, out: &mut Vec<Check>) {
    use crate::pg::{ADVISORY, RAW_TOKIO_PG, VERROU_PG, VERROU_PG_ADVISORY};
    let rows = r.uncontended.as_ref().map(|u| u.rows.as_slice()).unwrap_or(&[]);
    let target = format!("uncontended: {VERROU_PG} ≥ {VS_RAW}× {RAW_TOKIO_PG}");
    out.push(match (row(rows, VERROU_PG), row(rows, RAW_TOKIO_PG)) {
        (Some(a), Some(b)) => {
            let ratio = a.m.rate() / b.m.rate().max(1e-9);
            at_least(
                target,
                ratio,
                VS_RAW,
                format!("{ratio:.2}× ({:.0} vs {:.0} pairs/s)", a.m.rate(), b.m.rate()),
            )
        }
        _ => missing(target, "row not measured"),
    });
    let target = format!("uncontended: {VERROU_PG_ADVISORY} ≥ {ADVISORY_VS_RAW}× {ADVISORY}");
    out.push(match (row(rows, VERROU_PG_ADVISORY), row(rows, ADVISORY)) {
        (Some(a), Some(b)) => {
            let ratio = a.m.rate() / b.m.rate().max(1e-9);
            at_least(
                target,
                ratio,
                ADVISORY_VS_RAW,
                format!("{ratio:.2}× ({:.0} vs {:.0} pairs/s)", a.m.rate(), b.m.rate()),
            )
        }
        _ => missing(target, "row not measured"),
    });
    let target =
        format!("sequential (current-thread runtime): {VERROU_PG} pair p50 ≤ {LATENCY_VS_RAW}× {RAW_TOKIO_PG}");
    let found = r.latency.as_ref().and_then(|l| {
        let find = |label: &str| l.rows.iter().find(|(_, row)| row.label == label).map(|(_, row)| row);
        Some((find(VERROU_PG)?, find(RAW_TOKIO_PG)?))
    });
    out.push(match found {
        Some((a, b)) => {
            let ratio = us(a.m.latencies.p50()) / us(b.m.latencies.p50()).max(1e-9);
            at_most(
                target,
                ratio,
                LATENCY_VS_RAW,
                format!(
                    "{ratio:.2}× ({:.1} vs {:.1} µs)",
                    us(a.m.latencies.p50()),
                    us(b.m.latencies.p50())
                ),
            )
        }
        None => missing(target, "row not measured"),
    });
    let hot: Vec<&HotRow> = r
        .hot_keys
        .iter()
        .flat_map(|h| &h.rows)
        .filter(|row| row.kind == Kind::Verrou && crate::pg::is_pg(&row.label))
        .collect();
    if hot.is_empty() {
        out.push(missing(
            format!("hot key: {VERROU_PG} wait p99 ≤ {HOT_WAIT_P99_MS} ms"),
            "row not measured",
        ));
    }
    for row in hot {
        let name = format!("{} ({})", row.label, row.shape.name());
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        let p99 = ms(row.r.waits.p99());
        out.push(at_most(
            format!("hot key: {name} wait p99 ≤ {HOT_WAIT_P99_MS} ms"),
            p99,
            HOT_WAIT_P99_MS,
            format!(
                "{p99:.2} ms (p50 {:.2}, max {:.2})",
                ms(row.r.waits.p50()),
                ms(row.r.waits.max())
            ),
        ));
        let min_share = if row.fair { FAIR_MIN_SHARE } else { HOT_MIN_SHARE };
        out.push(at_least(
            format!("hot key: {name} no contender below {min_share} of its fair share"),
            row.r.min_share(),
            min_share,
            format!(
                "min {:.2}, max {:.2} of fair share",
                row.r.min_share(),
                row.r.max_share()
            ),
        ));
    }
}

/// etcd (issue 26): the default backend against raw etcd-client
/// transactions with the same operations and against etcd's server-side
/// Lock API (throughput), its sequential pair p50 against two single-key
/// reads of the same client, and its fair-mode hand-off against one read.
/// Its renewals are checked with every backend's in [`renewals`].
fn etcd(r: &Results, out: &mut Vec<Check>) {
    use crate::etcd::{LOCK_API, RAW_ETCD, READ_ETCD, VERROU_ETCD};
    let rows = r.uncontended.as_ref().map(|u| u.rows.as_slice()).unwrap_or(&[]);
    for (peer, limit) in [(RAW_ETCD, VS_RAW), (LOCK_API, ETCD_VS_LOCK_API)] {
        let target = format!("uncontended: {VERROU_ETCD} ≥ {limit}× {peer}");
        out.push(match (row(rows, VERROU_ETCD), row(rows, peer)) {
            (Some(a), Some(b)) => {
                let ratio = a.m.rate() / b.m.rate().max(1e-9);
                at_least(
                    target,
                    ratio,
                    limit,
                    format!("{ratio:.2}× ({:.0} vs {:.0} pairs/s)", a.m.rate(), b.m.rate()),
                )
            }
            _ => missing(target, "row not measured"),
        });
    }
    let read = r.latency.as_ref().and_then(|l| l.ping_p50(Library::Etcd));
    let target =
        format!("sequential (current-thread runtime): {VERROU_ETCD} pair p50 ≤ {ETCD_PAIR_VS_READS} × {READ_ETCD} p50");
    let pair = r.latency.as_ref().and_then(|l| {
        l.rows
            .iter()
            .find(|(_, row)| row.label == VERROU_ETCD)
            .map(|(_, row)| row.m.latencies.p50())
    });
    out.push(match (pair, read) {
        (Some(pair), Some(read)) => {
            let ratio = us(pair) / us(read).max(1e-9);
            at_most(
                target,
                ratio,
                ETCD_PAIR_VS_READS,
                format!("{ratio:.2}× ({:.0} vs {:.0} µs)", us(pair), us(read)),
            )
        }
        _ => missing(target, "row not measured"),
    });
    let fair: Vec<&HotRow> = r
        .hot_keys
        .iter()
        .flat_map(|h| &h.rows)
        .filter(|row| row.kind == Kind::Verrou && row.fair && crate::etcd::is_etcd(&row.label))
        .collect();
    if fair.is_empty() {
        out.push(missing(
            format!("hot key: {VERROU_ETCD}, fair mode hand-off p50 ≤ {FAIR_HANDOFF_VS_PING} × read p50"),
            "row not measured",
        ));
    }
    for row in fair {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        let target = format!(
            "hot key: {} ({}) hand-off p50 ≤ {FAIR_HANDOFF_VS_PING} × {READ_ETCD} p50",
            row.label,
            row.shape.name()
        );
        out.push(match read {
            Some(read) => {
                let ratio = row.r.handoffs.p50().as_secs_f64() / read.as_secs_f64().max(1e-9);
                at_most(
                    target,
                    ratio,
                    FAIR_HANDOFF_VS_PING,
                    format!(
                        "{ratio:.1}× ({:.3} ms vs read {:.3} ms)",
                        ms(row.r.handoffs.p50()),
                        ms(read)
                    ),
                )
            }
            None => missing(target, "read not measured (scenario 2)"),
        });
    }
}

/// NATS (issue 45): the default backend against raw async-nats key-value
/// calls doing the same operations (throughput), and its sequential pair
/// p50 against a key-value `get` of the same client. Its renewals are
/// checked with every backend's in [`renewals`].
fn nats(r: &Results, out: &mut Vec<Check>) {
    use crate::nats::{RAW_NATS, READ_NATS, VERROU_NATS};
    let rows = r.uncontended.as_ref().map(|u| u.rows.as_slice()).unwrap_or(&[]);
    let target = format!("uncontended: {VERROU_NATS} ≥ {VS_RAW}× {RAW_NATS}");
    out.push(match (row(rows, VERROU_NATS), row(rows, RAW_NATS)) {
        (Some(a), Some(b)) => {
            let ratio = a.m.rate() / b.m.rate().max(1e-9);
            at_least(
                target,
                ratio,
                VS_RAW,
                format!("{ratio:.2}× ({:.0} vs {:.0} pairs/s)", a.m.rate(), b.m.rate()),
            )
        }
        _ => missing(target, "row not measured"),
    });
    let read = r.latency.as_ref().and_then(|l| l.ping_p50(Library::Nats));
    let target =
        format!("sequential (current-thread runtime): {VERROU_NATS} pair p50 ≤ {NATS_PAIR_VS_READ} × {READ_NATS} p50");
    let pair = r.latency.as_ref().and_then(|l| {
        l.rows
            .iter()
            .find(|(_, row)| row.label == VERROU_NATS)
            .map(|(_, row)| row.m.latencies.p50())
    });
    out.push(match (pair, read) {
        (Some(pair), Some(read)) => {
            let ratio = us(pair) / us(read).max(1e-9);
            at_most(
                target,
                ratio,
                NATS_PAIR_VS_READ,
                format!("{ratio:.2}× ({:.0} vs {:.0} µs)", us(pair), us(read)),
            )
        }
        _ => missing(target, "row not measured"),
    });
}

/// Redis Sentinel (issue 46): each backend through the sentinels against
/// itself connected directly to the primary they name, in the same rounds.
fn sentinel(r: &Results, out: &mut Vec<Check>) {
    let rows = r.uncontended.as_ref().map(|u| u.rows.as_slice()).unwrap_or(&[]);
    for (through, direct) in crate::sentinel::PAIRS {
        let target = format!("uncontended: {through} ≥ {SENTINEL_VS_DIRECT}× direct to its primary");
        out.push(match (row(rows, through), row(rows, direct)) {
            (Some(a), Some(b)) => {
                let ratio = a.m.rate() / b.m.rate().max(1e-9);
                at_least(
                    target,
                    ratio,
                    SENTINEL_VS_DIRECT,
                    format!("{ratio:.2}× ({:.0} vs {:.0} pairs/s)", a.m.rate(), b.m.rate()),
                )
            }
            _ => missing(target, "row not measured"),
        });
    }
}
