//! Scenario 5: Redlock over five instances against one instance.

#[allow(clippy::wildcard_imports)]
use super::*;

/// Scenario 5: Redlock over five instances against one instance, with the
/// network floor of a five-node round next to them.
pub async fn redlock(
    lab: &mut Lab,
    s: &Settings,
    runtime: &'static str,
    problems: &mut Vec<String>,
) -> BoxResult<Redlock> {
    let mut out = Redlock {
        runtime,
        ..Redlock::default()
    };
    let instances = lab.redlock_instances().await?;
    let urls = instances.urls();
    let addrs = instances.addrs();
    let single = urls.first().cloned().ok_or("no instance")?;
    let all = || Probe::connect_addrs(&addrs);
    let one = || Probe::connect_addrs(&addrs[..1]);
    lab.flush().await?;
    let mut subjects = Vec::new();
    if s.runs("PING") {
        let mut conns = Vec::with_capacity(urls.len());
        for url in &urls {
            conns.push(RawRedisRs::connect(url, TTL).await?.connection());
        }
        let quorum = urls.len() / 2 + 1;
        for (label, need, n) in [
            ("PING, 1 instance".to_owned(), 1, 1),
            (
                format!("PING ×{}, first {quorum} replies", urls.len()),
                quorum,
                urls.len(),
            ),
            (format!("PING ×{}, all replies", urls.len()), urls.len(), urls.len()),
        ] {
            let op = PingFanout {
                conns: conns[..n].to_vec(),
                need,
            };
            subjects.push(Subject::new(label, Kind::Reference, op, all().await?));
        }
    }
    let one_label = "verrou redis-lua, 1 instance";
    if s.runs("verrou") {
        let one = async {
            let manager = LockManager::from_arc(lab.redlock_single().await?, LockOptions::default())?;
            Ok(Subject::new(
                one_label,
                Kind::Verrou,
                Pairs(Verrou(manager)),
                one().await?,
            ))
        }
        .await;
        add(&mut subjects, problems, one_label, one);
        let five = async {
            let manager = verrou_manager(lab, Backend::Redlock, LockOptions::default()).await?;
            Ok(Subject::new(
                Backend::Redlock.label(),
                Kind::Verrou,
                Pairs(Verrou(manager)),
                all().await?,
            ))
        }
        .await;
        add(&mut subjects, problems, Backend::Redlock.label(), five);
    }
    let (rs_one, rs_five) = ("rslock 0.10, 1 instance", "rslock 0.10, 5 instances");
    if s.runs(RSLOCK) {
        let one_lock = Pairs(Rslock::new(&[single], TTL));
        subjects.push(Subject::new(rs_one, Kind::Peer, one_lock, one().await?));
        let five = Pairs(Rslock::new(&urls, TTL));
        subjects.push(Subject::new(rs_five, Kind::Peer, five, all().await?));
    }
    let mut rows = collect(problems, run_subjects(subjects, 1, s.sequential, s.rounds, None).await);
    let mut take = |label: &str| rows.iter().position(|r| r.label == label).map(|i| rows.remove(i));
    for (one, five) in [(one_label, Backend::Redlock.label()), (rs_one, rs_five)] {
        if let (Some(a), Some(b)) = (take(one), take(five)) {
            out.pairs.push((a, b));
        }
    }
    out.floors = rows;
    lab.flush().await?;
    Ok(out)
}
