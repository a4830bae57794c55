//! Scenario 3: contenders on one key, shared and independent instances.

#[allow(clippy::wildcard_imports)]
use super::*;

fn say_hot(row: &HotRow) {
    let r = &row.r;
    eprintln!(
        "  {:<30} {:<11} {:>8.0} acq/s  changed {:>3.0}%  wait p50 {:>7.2} ms p99 {:>7.2} ms  hand-off p50 {:>6.3} ms  share {:.2}–{:.2}  {}",
        row.label,
        row.shape.name(),
        r.rate(),
        r.holder_changes() * 100.0,
        r.waits.p50().as_secs_f64() * 1e3,
        r.waits.p99().as_secs_f64() * 1e3,
        r.handoffs.p50().as_secs_f64() * 1e3,
        r.min_share(),
        r.max_share(),
        if r.exclusive() { "exclusive" } else { "OVERLAP" },
    );
}

fn check_hot(problems: &mut Vec<String>, row: &HotRow) {
    let r = &row.r;
    if !r.exclusive() {
        problems.push(format!(
            "{} ({}): counter {} ≠ acquisitions {} or {} overlapping holders — mutual exclusion broken",
            row.label,
            row.shape.name(),
            r.counter,
            r.total_acquisitions,
            r.overlaps
        ));
    }
    if r.errors > 0 {
        problems.push(format!(
            "{} ({}): {} failed calls (first: {})",
            row.label,
            row.shape.name(),
            r.errors,
            r.first_error.as_deref().unwrap_or("?")
        ));
    }
}

/// The backends with a fair queue, measured in fair mode too.
const FAIR: &[Backend] = &[
    Backend::Memory,
    Backend::RedisLua,
    Backend::Tair,
    Backend::Postgres,
    Backend::PostgresQuiet,
    Backend::Etcd,
];

/// Scenario 3: contenders on one key, shared and independent instances.
pub async fn hot_keys(lab: &mut Lab, s: &Settings, problems: &mut Vec<String>) -> BoxResult<HotKeys> {
    let n = s.contenders;
    let mut out = HotKeys {
        contenders: n,
        ..HotKeys::default()
    };
    let url = lab.url();
    // Fair rows: independent contenders only (one manager's waiters take
    // turns in its local line anyway), on backends with a fair queue.
    let modes = Lab::available()
        .into_iter()
        .flat_map(|b| [(b, Shape::Shared, false), (b, Shape::Independent, false)])
        .chain(FAIR.iter().map(|b| (*b, Shape::Independent, true)));
    for (backend, shape, fair) in modes {
        let label = if fair {
            format!("{}, fair mode", backend.label())
        } else {
            backend.label().to_owned()
        };
        if !s.runs(&label) {
            continue;
        }
        let options = if fair {
            LockOptions::default().fair()
        } else {
            LockOptions::default()
        };
        lab.flush().await?;
        let row = async {
            let lockers: Vec<Arc<Verrou>> = match shape {
                Shape::Shared => {
                    let one = Arc::new(Verrou(verrou_manager(lab, backend, options.clone()).await?));
                    (0..n).map(|_| one.clone()).collect()
                }
                Shape::Independent => {
                    let mut v = Vec::with_capacity(n);
                    for _ in 0..n {
                        v.push(Arc::new(Verrou(verrou_manager(lab, backend, options.clone()).await?)));
                    }
                    v
                }
            };
            let mut probe = lab.probe(backend).await?;
            let key = format!("hot:{}:{}:{fair}", backend.slug(), shape.name());
            let r = run_hot_key(lockers, &key, s.hot, &mut probe).await?;
            let row = HotRow {
                label: label.clone(),
                kind: backend.kind(),
                shape,
                fair,
                r,
            };
            say_hot(&row);
            BoxResult::Ok(row)
        }
        .await;
        out.rows.extend(keep(problems, &label, row));
    }
    for shape in [Shape::Shared, Shape::Independent] {
        if !s.runs(RSLOCK) {
            continue;
        }
        lab.flush().await?;
        let row = async {
            let lockers: Vec<Arc<Rslock>> = match shape {
                Shape::Shared => {
                    let one = Arc::new(Rslock::new(std::slice::from_ref(&url), TTL));
                    (0..n).map(|_| one.clone()).collect()
                }
                Shape::Independent => (0..n)
                    .map(|_| Arc::new(Rslock::new(std::slice::from_ref(&url), TTL)))
                    .collect(),
            };
            let mut probe = lab.main_probe().await?;
            let r = run_hot_key(lockers, &format!("hot:rslock:{}", shape.name()), s.hot, &mut probe).await?;
            let row = HotRow {
                label: "rslock 0.10 (default retry)".to_owned(),
                kind: Kind::Peer,
                shape,
                fair: false,
                r,
            };
            say_hot(&row);
            BoxResult::Ok(row)
        }
        .await;
        out.rows.extend(keep(problems, "rslock hot key", row));
    }
    for row in postgres::hot_peers(lab, s, problems).await {
        say_hot(&row);
        out.rows.push(row);
    }
    for row in etcd::hot_peers(lab, s, problems).await {
        say_hot(&row);
        out.rows.push(row);
    }
    for row in &out.rows {
        check_hot(problems, row);
    }
    lab.flush().await?;
    Ok(out)
}
