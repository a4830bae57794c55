//! Scenario 2: one task, sequential pairs, against the PING round trip.

#[allow(clippy::wildcard_imports)]
use super::*;

/// Scenario 2: one task, sequential pairs, against the PING round trip.
pub async fn latency(
    lab: &mut Lab,
    s: &Settings,
    runtime: &'static str,
    problems: &mut Vec<String>,
) -> BoxResult<Latency> {
    let mut out = Latency {
        runtime,
        ..Latency::default()
    };
    let url = lab.url();
    lab.flush().await?;
    let mut subjects = Vec::new();
    let mut libraries = Vec::new();
    let label = "PING (redis-rs)";
    if s.runs(label) {
        let subject = async {
            let raw = RawRedisRs::connect(&url, TTL).await?;
            Ok(Subject::new(
                label,
                Kind::Reference,
                PingRedisRs(raw.connection()),
                lab.main_probe().await?,
            ))
        }
        .await;
        add(&mut subjects, problems, label, subject);
        libraries.push((label, Library::RedisRs));
    }
    let label = "PING (fred)";
    if s.runs(label) {
        let subject = async {
            let raw = RawFred::connect(&url, TTL).await?;
            Ok(Subject::new(
                label,
                Kind::Reference,
                PingFred(raw.client().clone()),
                lab.main_probe().await?,
            ))
        }
        .await;
        add(&mut subjects, problems, label, subject);
        libraries.push((label, Library::Fred));
    }
    for (backend, lib) in [(Backend::RedisLua, Library::RedisRs), (Backend::Tair, Library::Fred)] {
        if s.runs(backend.label()) {
            let subject = verrou_subject(lab, backend, backend.label(), backend.kind(), LockOptions::default()).await;
            add(&mut subjects, problems, backend.label(), subject);
            libraries.push((backend.label(), lib));
        }
    }
    for peer in Peer::ALL {
        if s.runs(peer.label()) {
            add(&mut subjects, problems, peer.label(), peer.subject(lab).await);
            libraries.push((peer.label(), peer.library()));
        }
    }
    for (subject, label, lib) in postgres::latency_subjects(lab, s, problems).await {
        subjects.push(subject);
        libraries.push((label, lib));
    }
    for (subject, label, lib) in etcd::latency_subjects(lab, s, problems).await {
        subjects.push(subject);
        libraries.push((label, lib));
    }
    for (subject, label, lib) in nats::latency_subjects(lab, s, problems).await {
        subjects.push(subject);
        libraries.push((label, lib));
    }
    let rows = collect(problems, run_subjects(subjects, 1, s.sequential, s.rounds, None).await);
    for row in rows {
        let lib = libraries
            .iter()
            .find(|(l, _)| *l == row.label)
            .map_or(Library::RedisRs, |(_, lib)| *lib);
        if row.label.starts_with("PING")
            || row.label == crate::pg::PING_PG
            || row.label == crate::etcd::READ_ETCD
            || row.label == crate::nats::READ_NATS
        {
            out.pings.push((lib, row));
        } else {
            out.rows.push((lib, row));
        }
    }
    lab.flush().await?;
    Ok(out)
}
