//! Scenario 6: the memory backend against tokio's mutex.

#[allow(clippy::wildcard_imports)]
use super::*;

/// Pairs per timed call in scenario 6: one in-process pair is too short to
/// time alone (two clock reads would cost as much as the mutex).
pub const MEMORY_BATCH: u64 = 100;

/// Scenario 6: the memory backend against tokio's mutex, and where its time goes.
pub async fn memory(lab: &mut Lab, s: &Settings, problems: &mut Vec<String>) -> BoxResult<Memory> {
    let mut out = Memory::default();
    let batch = |op| Repeat {
        op,
        times: MEMORY_BATCH,
    };
    let mut subjects = Vec::new();
    let tokio_label = "tokio::sync::Mutex lock+unlock";
    if s.runs(tokio_label) {
        let mutex = Pairs(TokioMutex(Arc::new(tokio::sync::Mutex::new(()))));
        let op = Repeat {
            op: mutex,
            times: MEMORY_BATCH,
        };
        subjects.push(Subject::new(tokio_label, Kind::Reference, op, Probe::none()).batched(MEMORY_BATCH));
    }
    let verrou_label = "verrou memory (lock + release)";
    if s.runs(verrou_label) {
        let manager = verrou_manager(lab, Backend::Memory, LockOptions::default()).await?;
        let op = Repeat {
            op: Pairs(Verrou(manager)),
            times: MEMORY_BATCH,
        };
        subjects.push(Subject::new(verrou_label, Kind::Verrou, op, Probe::none()).batched(MEMORY_BATCH));
    }
    let label = "… with Renewal::Manual (no renewer task)";
    if s.runs(label) {
        let options = LockOptions::default().renewal(Renewal::Manual);
        let manager = verrou_manager(lab, Backend::Memory, options).await?;
        let op = Repeat {
            op: Pairs(Verrou(manager)),
            times: MEMORY_BATCH,
        };
        subjects.push(Subject::new(label, Kind::Reference, op, Probe::none()).batched(MEMORY_BATCH));
    }
    for fresh_tokens in [true, false] {
        let label = if fresh_tokens {
            "… backend calls only, fresh token (no manager)"
        } else {
            "… backend calls only, one token"
        };
        if s.runs(label) {
            let op = batch(BareBackend {
                backend: lab.lock_backend(Backend::Memory).await?,
                fresh_tokens,
                token: LockToken::generate()?,
                ttl: TTL,
            });
            subjects.push(Subject::new(label, Kind::Reference, op, Probe::none()).batched(MEMORY_BATCH));
        }
    }
    for row in collect(problems, run_subjects(subjects, 1, s.sequential, s.rounds, None).await) {
        if row.label == tokio_label {
            out.tokio = Some(row);
        } else if row.label == verrou_label {
            out.verrou = Some(row);
        } else {
            out.diagnostics.push(row);
        }
    }
    Ok(out)
}
