//! The seven scenarios of issue 7, and the lock kinds of issue 16. Each row runs against freshly flushed
//! servers; a row that fails is recorded as a problem and the run goes on.
//! One file per scenario; this module holds what they share.

mod etcd;
mod hot_keys;
mod kinds;
mod latency;
mod memory;
mod nats;
mod postgres;
mod redlock;
mod renewals;
mod uncontended;
mod updates;

pub use hot_keys::hot_keys;
pub use kinds::kinds;
pub use latency::latency;
pub use memory::memory;
pub use redlock::redlock;
pub use renewals::renewals;
pub use uncontended::uncontended;
pub use updates::updates;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{LockGuard, LockManager, LockOptions, LockToken, Renewal, UpdateOptions};
use tokio::task::JoinSet;

use crate::BoxResult;
use crate::contend::run_hot_key;
use crate::drive::{Pairs, Repeat};
use crate::lab::{Backend, Lab};
use crate::locks::{RawFred, RawRedisRs, Rslock, TokioMutex, Verrou, fred_client};
use crate::measure::{Probe, children_cpu, process_cpu};
use crate::ops::{BareBackend, ExgetExset, Incrementer, PingFanout, PingFred, PingRedisRs, StoreUpdate, WatchMulti};
use crate::results::{
    CeilingRow, HotKeys, HotRow, Kind, Latency, Library, Memory, OpRow, RAW_FRED, RAW_FRED_SCRIPTED, RAW_REDIS_RS,
    RAW_REDIS_RS_SCRIPTED, RSLOCK, Redlock, RenewRow, Renewals, Shape, Uncontended, UpdateRow, Updates,
};
use crate::rows::{Subject, run_subjects};
use crate::settings::Settings;

/// TTL of every lock in scenarios 1–6 (verrou's default, also given to rslock
/// and the raw clients).
pub const TTL: Duration = Duration::from_secs(30);

/// Record a failed row and go on.
fn keep<T>(problems: &mut Vec<String>, what: &str, r: BoxResult<T>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            eprintln!("  ! {what}: {e}");
            problems.push(format!("{what}: {e}"));
            None
        }
    }
}

/// A row whose operations failed is a problem too.
fn check_row(problems: &mut Vec<String>, row: &OpRow) {
    if row.m.errors > 0 {
        problems.push(format!(
            "{}: {} failed operations (first: {})",
            row.label,
            row.m.errors,
            row.m.first_error.as_deref().unwrap_or("?")
        ));
    }
}

/// Turn finished rows into the scenario's list, recording failures.
fn collect(problems: &mut Vec<String>, rows: Vec<(String, BoxResult<OpRow>)>) -> Vec<OpRow> {
    let mut out = Vec::with_capacity(rows.len());
    for (label, row) in rows {
        if let Some(row) = keep(problems, &label, row) {
            check_row(problems, &row);
            out.push(row);
        }
    }
    out
}

async fn verrou_manager(lab: &mut Lab, backend: Backend, options: LockOptions) -> BoxResult<LockManager> {
    Ok(LockManager::from_arc(lab.lock_backend(backend).await?, options)?)
}

/// The non-verrou rows of scenarios 1 and 2.
#[derive(Debug, Clone, Copy)]
enum Peer {
    Rslock,
    RawRedisRs,
    RawRedisRsScripted,
    RawFred,
    RawFredScripted,
}

impl Peer {
    const ALL: [Peer; 5] = [
        Peer::Rslock,
        Peer::RawRedisRs,
        Peer::RawRedisRsScripted,
        Peer::RawFred,
        Peer::RawFredScripted,
    ];

    fn label(self) -> &'static str {
        match self {
            Peer::Rslock => RSLOCK,
            Peer::RawRedisRs => RAW_REDIS_RS,
            Peer::RawRedisRsScripted => RAW_REDIS_RS_SCRIPTED,
            Peer::RawFred => RAW_FRED,
            Peer::RawFredScripted => RAW_FRED_SCRIPTED,
        }
    }

    fn library(self) -> Library {
        match self {
            Peer::RawFred | Peer::RawFredScripted => Library::Fred,
            _ => Library::RedisRs,
        }
    }

    async fn subject(self, lab: &Lab) -> BoxResult<Subject> {
        let (label, url, probe) = (self.label(), lab.url(), lab.main_probe().await?);
        Ok(match self {
            Peer::Rslock => Subject::new(label, Kind::Peer, Pairs(Rslock::new(&[url], TTL)), probe),
            Peer::RawRedisRs => Subject::new(label, Kind::Raw, Pairs(RawRedisRs::connect(&url, TTL).await?), probe),
            Peer::RawRedisRsScripted => Subject::new(
                label,
                Kind::Raw,
                Pairs(RawRedisRs::connect_scripted(&url, TTL).await?),
                probe,
            ),
            Peer::RawFred => Subject::new(label, Kind::Raw, Pairs(RawFred::connect(&url, TTL).await?), probe),
            Peer::RawFredScripted => Subject::new(
                label,
                Kind::Raw,
                Pairs(RawFred::connect_scripted(&url, TTL).await?),
                probe,
            ),
        })
    }
}

/// A verrou row: the backend's default configuration through a manager with
/// `options`.
async fn verrou_subject(
    lab: &mut Lab,
    backend: Backend,
    label: &str,
    kind: Kind,
    options: LockOptions,
) -> BoxResult<Subject> {
    let manager = verrou_manager(lab, backend, options).await?;
    let probe = lab.probe(backend).await?;
    Ok(Subject::new(label, kind, Pairs(Verrou(manager)), probe))
}

/// Build a subject if the filter lets it through; a failure is a problem.
fn add(subjects: &mut Vec<Subject>, problems: &mut Vec<String>, label: &str, subject: BoxResult<Subject>) {
    if let Some(subject) = keep(problems, label, subject) {
        subjects.push(subject);
    }
}

/// Client CPU share of one core while the process does nothing.
async fn idle_cpu(window: Duration) -> BoxResult<f64> {
    let (t0, c0) = (Instant::now(), process_cpu()?);
    tokio::time::sleep(window).await;
    let (wall, cpu) = (t0.elapsed(), process_cpu()?.saturating_sub(c0));
    Ok(cpu.as_secs_f64() / wall.as_secs_f64().max(1e-9))
}
