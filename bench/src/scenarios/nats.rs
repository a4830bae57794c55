//! The NATS rows of scenarios 1 and 2 besides verrou's own (which come from
//! [`Backend::Nats`] like every backend's): raw async-nats key-value calls
//! doing the backend's operations, and a key-value `get` as the round trip.

#[allow(clippy::wildcard_imports)]
use super::*;
use crate::nats::{RAW_NATS, READ_NATS, RawNats, ReadNats};

/// The raw async-nats peer, with its label.
async fn raw_subject(lab: &mut Lab, s: &Settings, problems: &mut Vec<String>) -> Option<Subject> {
    if !s.runs(RAW_NATS) {
        return None;
    }
    let subject = async {
        let raw = RawNats::connect(&mut lab.nats, TTL).await?;
        Ok(Subject::new(RAW_NATS, Kind::Raw, Pairs(raw), Probe::none()))
    }
    .await;
    keep(problems, RAW_NATS, subject)
}

/// Scenario 1: the raw peer, measured in the same interleaved rounds as
/// every other row.
pub async fn uncontended_peers(lab: &mut Lab, s: &Settings, problems: &mut Vec<String>) -> Vec<Subject> {
    raw_subject(lab, s, problems).await.into_iter().collect()
}

/// Scenario 2: the key-value `get` round trip, verrou's NATS row and the
/// raw peer, all on async-nats.
pub async fn latency_subjects(
    lab: &mut Lab,
    s: &Settings,
    problems: &mut Vec<String>,
) -> Vec<(Subject, &'static str, Library)> {
    let mut out = Vec::new();
    if s.runs(READ_NATS) {
        let subject = async {
            let store = lab.nats.store().await?;
            Ok(Subject::new(READ_NATS, Kind::Reference, ReadNats(store), Probe::none()))
        }
        .await;
        if let Some(subject) = keep(problems, READ_NATS, subject) {
            out.push((subject, READ_NATS, Library::Nats));
        }
    }
    let backend = Backend::Nats;
    if s.runs(backend.label()) {
        let subject = verrou_subject(lab, backend, backend.label(), backend.kind(), LockOptions::default()).await;
        if let Some(subject) = keep(problems, backend.label(), subject) {
            out.push((subject, backend.label(), Library::Nats));
        }
    }
    if let Some(subject) = raw_subject(lab, s, problems).await {
        out.push((subject, RAW_NATS, Library::Nats));
    }
    out
}
