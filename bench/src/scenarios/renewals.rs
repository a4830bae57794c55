//! Scenario 7: many held locks under auto-renewal.

#[allow(clippy::wildcard_imports)]
use super::*;

/// Scenario 7: many held locks under auto-renewal.
pub async fn renewals(lab: &mut Lab, s: &Settings, problems: &mut Vec<String>) -> BoxResult<Renewals> {
    let mut out = Renewals::default();
    let idle = idle_cpu(s.renew_window.min(Duration::from_secs(1))).await?;
    for backend in [
        Backend::Memory,
        Backend::RedisLua,
        Backend::Tair,
        Backend::Postgres,
        Backend::Etcd,
        Backend::Nats,
    ] {
        if !s.runs(backend.label()) {
            continue;
        }
        lab.flush().await?;
        let row = async {
            // etcd leases have a server minimum (whole seconds, about
            // 2 s): the quick mode's TTL is raised to it there.
            let locks = lab.lock_backend(backend).await?;
            let ttl = s.renew_ttl.max(locks.capabilities().min_ttl);
            let options = LockOptions::with_ttl(ttl);
            let renew_every = match options.renewal {
                Renewal::Auto { interval } => interval,
                _ => ttl / 3,
            };
            let manager = LockManager::from_arc(locks, options)?;
            let mut probe = lab.probe(backend).await?;
            let t0 = Instant::now();
            let guards = hold_many(&manager, backend.slug(), s.renew_locks).await?;
            let acquire_time = t0.elapsed();
            tokio::time::sleep(s.renew_settle).await;
            // Allocations over the probe's whole window (its reads too),
            // the span its wall time covers.
            let allocated = crate::budget::Allocations::now();
            let before = probe.read().await?;
            tokio::time::sleep(s.renew_window).await;
            let after = probe.read().await?;
            let allocations = crate::budget::Allocations::now().since(allocated);
            let lost = guards.iter().flatten().filter(|g| g.is_lost()).count();
            release_many(guards).await?;
            let row = RenewRow {
                label: backend.label().to_owned(),
                locks: s.renew_locks,
                ttl,
                renew_every,
                acquire_time,
                interval: after.since(&before),
                lost,
                idle_cpu: idle,
                allocations,
            };
            eprintln!(
                "  {:<36} {} locks: client {:>5.2}% of a core, {:>5.1} allocations/renewal, server {:>6.0} cmds/s ({:>5.2}% core), {} lost",
                row.label,
                row.locks,
                row.client_core_share() * 100.0,
                row.allocations_per_renewal(),
                row.commands_per_sec(),
                row.server_core_share() * 100.0,
                row.lost
            );
            BoxResult::Ok(row)
        }
        .await;
        if let Some(row) = keep(problems, backend.label(), row) {
            if row.lost > 0 {
                problems.push(format!(
                    "{}: {} of {} renewed leases were lost",
                    row.label, row.lost, row.locks
                ));
            }
            out.rows.push(row);
        }
    }
    lab.flush().await?;
    Ok(out)
}

/// Acquire `count` distinct keys with 64 tasks; one vector of guards per task.
async fn hold_many(manager: &LockManager, slug: &str, count: usize) -> BoxResult<Vec<Vec<LockGuard>>> {
    const TASKS: usize = 64;
    let mut set = JoinSet::new();
    for task in 0..TASKS {
        let manager = manager.clone();
        let slug = slug.to_owned();
        set.spawn(async move {
            let mut guards = Vec::with_capacity(count / TASKS + 1);
            for i in (task..count).step_by(TASKS) {
                guards.push(manager.lock(&format!("held:{slug}:{i}")).await?);
            }
            BoxResult::Ok(guards)
        });
    }
    let mut all = Vec::with_capacity(TASKS);
    while let Some(r) = set.join_next().await {
        all.push(r??);
    }
    Ok(all)
}

async fn release_many(guards: Vec<Vec<LockGuard>>) -> BoxResult<()> {
    let mut set = JoinSet::new();
    for chunk in guards {
        set.spawn(async move {
            for g in chunk {
                g.release().await?;
            }
            BoxResult::Ok(())
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    Ok(())
}
