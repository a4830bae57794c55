//! Scenario 4: optimistic increments of one value.

#[allow(clippy::wildcard_imports)]
use super::*;

/// Retry policy of every update row: verrou's defaults, with enough attempts
/// that heavy contention never gives up.
fn update_options() -> UpdateOptions {
    UpdateOptions::default().max_attempts(10_000)
}

async fn update_row<I: Incrementer>(
    label: &str,
    kind: Kind,
    inc: I,
    s: &Settings,
    probe: &mut Probe,
) -> BoxResult<UpdateRow> {
    let inc = Arc::new(inc);
    let key = format!("upd:{}", label.replace(' ', "_"));
    let before = probe.read().await?;
    let mut set = JoinSet::new();
    for task in 0..s.update_tasks {
        let inc = inc.clone();
        let key = key.clone();
        let n = s.updates_per_task;
        set.spawn(async move {
            let (mut ok, mut attempts, mut errors, mut first_error) = (0u64, 0u64, 0u64, None);
            for _ in 0..n {
                match inc.increment(task, &key).await {
                    Ok(a) => {
                        ok += 1;
                        attempts += a;
                    }
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert_with(|| e.to_string());
                    }
                }
            }
            (ok, attempts, errors, first_error)
        });
    }
    let mut row = UpdateRow {
        label: label.to_owned(),
        kind,
        increments: 0,
        attempts: 0,
        interval: Default::default(),
        final_value: 0,
        expected: 0,
        errors: 0,
        first_error: None,
    };
    while let Some(r) = set.join_next().await {
        let (ok, attempts, errors, first_error) = r?;
        row.increments += ok;
        row.attempts += attempts;
        row.errors += errors;
        if row.first_error.is_none() {
            row.first_error = first_error;
        }
    }
    let after = probe.read().await?;
    row.interval = after.since(&before);
    row.final_value = inc.read(&key).await?;
    row.expected = row.increments;
    eprintln!(
        "  {:<36} {:>8.0} incr/s  {:>5.2} attempts/incr  {:>5.2} cmds/incr  final {} (expected {})",
        row.label,
        row.rate(),
        row.attempts_per_increment(),
        row.commands_per_increment(),
        row.final_value,
        row.expected
    );
    Ok(row)
}

/// Scenario 4: optimistic increments of one value.
pub async fn updates(lab: &mut Lab, s: &Settings, problems: &mut Vec<String>) -> BoxResult<Updates> {
    let mut out = Updates {
        tasks: s.update_tasks,
        per_task: s.updates_per_task,
        ..Updates::default()
    };
    let url = lab.url();
    let backoff = update_options().backoff;
    for backend in [Backend::Memory, Backend::Tair] {
        if !s.runs(backend.label()) {
            continue;
        }
        lab.flush().await?;
        let row = async {
            let store = lab.store(backend).await?.ok_or("no versioned store")?;
            let mut probe = lab.probe(backend).await?;
            let label = format!("{} update", backend.label());
            let label = if backend == Backend::Tair {
                format!("{label} (EXCAS)")
            } else {
                label
            };
            let inc = StoreUpdate::new(store, update_options());
            update_row(&label, Kind::Verrou, inc, s, &mut probe).await
        }
        .await;
        out.rows.extend(keep(problems, backend.label(), row));
    }
    let label = "raw EXGET + EXSET VER loop (fred)";
    if s.runs(label) {
        lab.flush().await?;
        let row = async {
            let client = fred_client(&url).await?;
            let mut probe = lab.main_probe().await?;
            update_row(label, Kind::Raw, ExgetExset { client, backoff }, s, &mut probe).await
        }
        .await;
        out.rows.extend(keep(problems, label, row));
    }
    if s.runs(Backend::RedisLua.label()) {
        lab.flush().await?;
        let row = async {
            let store = lab.store(Backend::RedisLua).await?.ok_or("no versioned store")?;
            let mut probe = lab.main_probe().await?;
            let inc = StoreUpdate::new(store, update_options());
            update_row("verrou redis-lua update (Lua CAS)", Kind::Verrou, inc, s, &mut probe).await
        }
        .await;
        out.rows.extend(keep(problems, "redis-lua store", row));
    }
    let label = "raw WATCH/MULTI/EXEC (redis-rs)";
    if s.runs(label) {
        lab.flush().await?;
        let row = async {
            let client = deadpool_redis::redis::Client::open(url.as_str())?;
            let mut conns = Vec::with_capacity(s.update_tasks);
            for _ in 0..s.update_tasks {
                conns.push(client.get_multiplexed_async_connection().await?);
            }
            let mut probe = lab.main_probe().await?;
            update_row(label, Kind::Raw, WatchMulti { conns, backoff }, s, &mut probe).await
        }
        .await;
        out.rows.extend(keep(problems, label, row));
    }
    for row in &out.rows {
        if row.final_value != row.expected || row.errors > 0 {
            problems.push(format!(
                "{}: final value {} for {} increments, {} errors (first: {})",
                row.label,
                row.final_value,
                row.expected,
                row.errors,
                row.first_error.as_deref().unwrap_or("none")
            ));
        }
    }
    lab.flush().await?;
    Ok(out)
}
