//! The etcd rows of scenarios 1–3 besides verrou's own (which come from
//! [`Backend::Etcd`] like every backend's): raw etcd-client transactions
//! sending the backend's operations, etcd's server-side Lock API, and a
//! single-key read as the round trip.

#[allow(clippy::wildcard_imports)]
use super::*;
use crate::etcd::{LOCK_API, LockApi, RAW_ETCD, READ_ETCD, RawEtcd, ReadEtcd};

/// The etcd peers of scenarios 1 and 2, with their labels.
async fn peer_subjects(lab: &mut Lab, s: &Settings, problems: &mut Vec<String>) -> Vec<(&'static str, Subject)> {
    let mut out = Vec::new();
    if s.runs(RAW_ETCD) {
        let subject = async {
            let raw = RawEtcd::connect(&mut lab.etcd, TTL).await?;
            Ok(Subject::new(RAW_ETCD, Kind::Raw, Pairs(raw), Probe::none()))
        }
        .await;
        if let Some(subject) = keep(problems, RAW_ETCD, subject) {
            out.push((RAW_ETCD, subject));
        }
    }
    if s.runs(LOCK_API) {
        let subject = async {
            let api = LockApi::connect(&mut lab.etcd, TTL).await?;
            Ok(Subject::new(LOCK_API, Kind::Peer, Pairs(api), Probe::none()))
        }
        .await;
        if let Some(subject) = keep(problems, LOCK_API, subject) {
            out.push((LOCK_API, subject));
        }
    }
    out
}

/// Scenario 1: the etcd peers, measured in the same interleaved rounds as
/// every other row.
pub async fn uncontended_peers(lab: &mut Lab, s: &Settings, problems: &mut Vec<String>) -> Vec<Subject> {
    peer_subjects(lab, s, problems)
        .await
        .into_iter()
        .map(|(_, subject)| subject)
        .collect()
}

/// Scenario 2: the single-key read round trip, verrou's etcd row and the
/// peers, all on etcd-client.
pub async fn latency_subjects(
    lab: &mut Lab,
    s: &Settings,
    problems: &mut Vec<String>,
) -> Vec<(Subject, &'static str, Library)> {
    let mut out = Vec::new();
    if s.runs(READ_ETCD) {
        let subject = async {
            let client = lab.etcd.client().await?;
            Ok(Subject::new(
                READ_ETCD,
                Kind::Reference,
                ReadEtcd(client),
                Probe::none(),
            ))
        }
        .await;
        if let Some(subject) = keep(problems, READ_ETCD, subject) {
            out.push((subject, READ_ETCD, Library::Etcd));
        }
    }
    let backend = Backend::Etcd;
    if s.runs(backend.label()) {
        let subject = verrou_subject(lab, backend, backend.label(), backend.kind(), LockOptions::default()).await;
        if let Some(subject) = keep(problems, backend.label(), subject) {
            out.push((subject, backend.label(), Library::Etcd));
        }
    }
    for (label, subject) in peer_subjects(lab, s, problems).await {
        out.push((subject, label, Library::Etcd));
    }
    out
}

/// Scenario 3: etcd's Lock API on one hot key. Locks of one lease share
/// one key per name, so each contender has its own client and lease
/// (independent only); the server queues them in revision order.
pub async fn hot_peers(lab: &mut Lab, s: &Settings, problems: &mut Vec<String>) -> Vec<HotRow> {
    let mut rows = Vec::new();
    if s.runs(LOCK_API) {
        let row = async {
            let mut lockers = Vec::with_capacity(s.contenders);
            for _ in 0..s.contenders {
                lockers.push(Arc::new(LockApi::connect(&mut lab.etcd, TTL).await?));
            }
            let r = run_hot_key(lockers, "hot:etcd:lock-api", s.hot, &mut Probe::none()).await?;
            BoxResult::Ok(HotRow {
                label: LOCK_API.to_owned(),
                kind: Kind::Peer,
                shape: Shape::Independent,
                fair: false,
                r,
            })
        }
        .await;
        rows.extend(keep(problems, LOCK_API, row));
    }
    rows
}
