//! The PostgreSQL rows of scenarios 1–3 besides verrou's own (which come
//! from [`Backend::Postgres`] like every backend's): raw tokio-postgres
//! sending the backend's statements, session advisory locks on a held
//! connection, sqlx's `PgAdvisoryLock` and `distributed-lock-postgres`.

#[allow(clippy::wildcard_imports)]
use super::*;
use crate::pg::{
    ADVISORY, ADVISORY_BLOCKING, AdvisoryHeld, DLP, DistributedLockPg, PING_PG, PingPg, RAW_TOKIO_PG, RawTokioPostgres,
    SQLX, SqlxAdvisory,
};

/// The PostgreSQL peers of scenarios 1 and 2, with their labels.
async fn peer_subjects(lab: &mut Lab, s: &Settings, problems: &mut Vec<String>) -> Vec<(&'static str, Subject)> {
    let mut subjects = Vec::new();
    if s.runs(RAW_TOKIO_PG) {
        let subject = async {
            // Built through the backend, so that the schema exists and the
            // statements are the backend's own.
            let backend = lab.pg.backend(false).await?;
            let url = lab.pg.peer_url().await?;
            let raw = RawTokioPostgres::new(&backend, &url, TTL)?;
            Ok(Subject::new(RAW_TOKIO_PG, Kind::Raw, Pairs(raw), Probe::none()))
        }
        .await;
        add(&mut subjects, problems, RAW_TOKIO_PG, subject);
    }
    if s.runs(ADVISORY) {
        let subject = async {
            let url = lab.pg.peer_url().await?;
            let held = AdvisoryHeld::connect(&url, false).await?;
            Ok(Subject::new(ADVISORY, Kind::Raw, Pairs(held), Probe::none()))
        }
        .await;
        add(&mut subjects, problems, ADVISORY, subject);
    }
    if s.runs(SQLX) {
        let subject = async {
            let url = lab.pg.peer_url().await?;
            let sqlx = SqlxAdvisory::connect(&url).await?;
            Ok(Subject::new(SQLX, Kind::Peer, Pairs(sqlx), Probe::none()))
        }
        .await;
        add(&mut subjects, problems, SQLX, subject);
    }
    if s.runs(DLP) {
        let subject = async {
            let url = lab.pg.peer_url().await?;
            let dlp = DistributedLockPg::connect(&url).await?;
            Ok(Subject::new(DLP, Kind::Peer, Pairs(dlp), Probe::none()))
        }
        .await;
        add(&mut subjects, problems, DLP, subject);
    }
    subjects
        .into_iter()
        .filter_map(|subject| {
            let label = [RAW_TOKIO_PG, ADVISORY, SQLX, DLP]
                .into_iter()
                .find(|l| *l == subject.label)?;
            Some((label, subject))
        })
        .collect()
}

/// Scenario 1: the PostgreSQL peers, measured in the same interleaved
/// rounds as every other row.
pub async fn uncontended_peers(lab: &mut Lab, s: &Settings, problems: &mut Vec<String>) -> Vec<Subject> {
    peer_subjects(lab, s, problems)
        .await
        .into_iter()
        .map(|(_, subject)| subject)
        .collect()
}

/// Scenario 2: the `SELECT 1` round trip, verrou's postgres row and the
/// peers, each with the library its p50 is compared against.
pub async fn latency_subjects(
    lab: &mut Lab,
    s: &Settings,
    problems: &mut Vec<String>,
) -> Vec<(Subject, &'static str, Library)> {
    let mut out = Vec::new();
    if s.runs(PING_PG) {
        let subject = async {
            let url = lab.pg.peer_url().await?;
            Ok(Subject::new(
                PING_PG,
                Kind::Reference,
                PingPg::connect(&url).await?,
                Probe::none(),
            ))
        }
        .await;
        if let Some(subject) = keep(problems, PING_PG, subject) {
            out.push((subject, PING_PG, Library::Postgres));
        }
    }
    let backend = Backend::Postgres;
    if s.runs(backend.label()) {
        let subject = verrou_subject(lab, backend, backend.label(), backend.kind(), LockOptions::default()).await;
        if let Some(subject) = keep(problems, backend.label(), subject) {
            out.push((subject, backend.label(), Library::Postgres));
        }
    }
    for (label, subject) in peer_subjects(lab, s, problems).await {
        out.push((subject, label, Library::Postgres));
    }
    out
}

/// Ends the sessions a peer row left (see [`crate::pg::PgLab::end_peer_sessions`]).
async fn end_peer_sessions(lab: &Lab, problems: &mut Vec<String>) {
    if let Err(e) = lab.pg.end_peer_sessions().await {
        problems.push(format!("postgres peers: {e}"));
    }
}

/// Scenario 3: the PostgreSQL peers on one hot key. Session advisory locks
/// need a connection per contender (a session's locks are re-entrant), so
/// that row is independent only; sqlx and distributed-lock-postgres take a
/// pooled connection per lock, so one pool serves all contenders.
pub async fn hot_peers(lab: &mut Lab, s: &Settings, problems: &mut Vec<String>) -> Vec<HotRow> {
    let n = s.contenders;
    let mut rows = Vec::new();
    if s.runs(ADVISORY_BLOCKING) {
        let row = async {
            let url = lab.pg.peer_url().await?;
            let mut lockers = Vec::with_capacity(n);
            for _ in 0..n {
                lockers.push(Arc::new(AdvisoryHeld::connect(&url, true).await?));
            }
            let r = run_hot_key(lockers, "hot:pg:advisory", s.hot, &mut Probe::none()).await?;
            BoxResult::Ok(HotRow {
                label: ADVISORY_BLOCKING.to_owned(),
                kind: Kind::Raw,
                shape: Shape::Independent,
                fair: false,
                r,
            })
        }
        .await;
        rows.extend(keep(problems, ADVISORY_BLOCKING, row));
        end_peer_sessions(lab, problems).await;
    }
    if s.runs(SQLX) {
        let row = async {
            let url = lab.pg.peer_url().await?;
            let one = Arc::new(SqlxAdvisory::connect(&url).await?);
            let lockers = (0..n).map(|_| one.clone()).collect();
            let r = run_hot_key(lockers, "hot:pg:sqlx", s.hot, &mut Probe::none()).await?;
            BoxResult::Ok(HotRow {
                label: SQLX.to_owned(),
                kind: Kind::Peer,
                shape: Shape::Shared,
                fair: false,
                r,
            })
        }
        .await;
        rows.extend(keep(problems, SQLX, row));
        end_peer_sessions(lab, problems).await;
    }
    if s.runs(DLP) {
        let row = async {
            let url = lab.pg.peer_url().await?;
            let one = Arc::new(DistributedLockPg::connect(&url).await?);
            let lockers = (0..n).map(|_| one.clone()).collect();
            let r = run_hot_key(lockers, "hot:pg:dlp", s.hot, &mut Probe::none()).await?;
            BoxResult::Ok(HotRow {
                label: DLP.to_owned(),
                kind: Kind::Peer,
                shape: Shape::Shared,
                fair: false,
                r,
            })
        }
        .await;
        rows.extend(keep(problems, DLP, row));
        end_peer_sessions(lab, problems).await;
    }
    rows
}
