//! `verrou status`: what the backend sees of a name, read without taking
//! anything: the lock (`verrou lock`), the semaphore (`verrou semaphore`)
//! and the election (`verrou elect`) of that name.

use serde_json::{Value, json};
use verrou::{Backend, Error, LockOptions};

use crate::args::{StatusArgs, StatusKind};
use crate::exit::{Failure, NO, OK};
use crate::supervise::round_ms;

/// One kind's answer: `Ok(None)` when the backend offers no such kind
/// (nothing of it can be held there).
struct Answer {
    /// Held (a permit in use, a leader) or not.
    held: bool,
    /// The text line.
    line: String,
    /// The JSON member.
    json: Value,
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

async fn lock(backend: &Backend, name: &str) -> Result<Answer, Error> {
    let seen = backend.manager(LockOptions::default())?.inspect(name).await?;
    let info = seen.info;
    let mut line = if info.held {
        "held".to_owned()
    } else {
        "free".to_owned()
    };
    if let Some(left) = info.remaining.filter(|_| info.held) {
        line.push_str(&format!(", {} left", humantime::format_duration(round_ms(left))));
    }
    if let Some(token) = info.fencing_token {
        line.push_str(&format!(", fencing token {}", token.0));
    }
    Ok(Answer {
        held: info.held,
        line: format!("lock: {line}"),
        json: json!({"held": info.held, "remaining_ttl_ms": info.remaining.map(millis),
                     "fencing_token": info.fencing_token.map(|t| t.0)}),
    })
}

async fn semaphore(backend: &Backend, name: &str) -> Result<Answer, Error> {
    let seen = backend.semaphores(LockOptions::default())?.inspect(name).await?;
    let line = match seen.size {
        Some(size) if seen.in_use > 0 => format!(
            "semaphore: {} of {size} permits in use ({} holders)",
            seen.in_use, seen.holders
        ),
        _ => "semaphore: no permit in use".to_owned(),
    };
    Ok(Answer {
        held: seen.in_use > 0,
        line,
        json: json!({"in_use": seen.in_use, "holders": seen.holders, "size": seen.size}),
    })
}

async fn election(backend: &Backend, name: &str) -> Result<Answer, Error> {
    let leader = backend.elections(LockOptions::default())?.leader(name).await?;
    Ok(match leader {
        Some(l) => Answer {
            held: true,
            line: format!("leader: {:?}, term {}", String::from_utf8_lossy(&l.identity), l.term),
            json: json!({"identity": String::from_utf8_lossy(&l.identity), "term": l.term}),
        },
        None => Answer {
            held: false,
            line: "leader: none".to_owned(),
            json: Value::Null,
        },
    })
}

/// What the backend says about replication: whether a confirmed write
/// waited for a replica (a synchronous standby, `WAIT`).
fn replication_line(backend: &Backend) -> String {
    let caps = backend.locks().capabilities();
    if caps.replica_ack {
        format!(
            "{}: confirmed writes are replica-acknowledged (synchronous replication): they survive a failover",
            caps.name
        )
    } else {
        format!(
            "{}: confirmed writes are not replica-acknowledged (no synchronous replication): a failover can lose them",
            caps.name
        )
    }
}

/// `verrou status [--kind K] NAME`: exit 0 when something of NAME is held,
/// 1 when nothing is. Every answer is a read (`inspect`, the semaphore's
/// permits, the leader): no token is drawn, no queue joined. A kind the
/// backend cannot read makes the command fail (never "free") unless
/// another kind is held; a kind the backend does not offer is left out of
/// `--kind all`.
pub async fn status(backend: &Backend, args: &StatusArgs, json: bool) -> Result<u8, Failure> {
    let caps = backend.locks().capabilities();
    let name = args.name.as_str();
    let kinds: Vec<StatusKind> = match args.kind {
        StatusKind::All => {
            let mut all = vec![StatusKind::Lock];
            if caps.semaphores {
                all.push(StatusKind::Semaphore);
            }
            if caps.leader_election {
                all.push(StatusKind::Election);
            }
            all
        }
        one => vec![one],
    };
    let mut answers = Vec::new();
    let mut failed = None;
    for kind in kinds {
        let answer = match kind {
            StatusKind::Semaphore => semaphore(backend, name).await,
            StatusKind::Election => election(backend, name).await,
            _ => lock(backend, name).await,
        };
        match answer {
            Ok(a) => answers.push((kind, a)),
            Err(e) => failed = Some(e),
        }
    }
    let held = answers.iter().any(|(_, a)| a.held);
    if let Some(e) = failed.filter(|_| !held) {
        return Err(e.into());
    }
    if json {
        let mut out = json!({"name": name, "held": held, "backend": caps.name, "replica_ack": caps.replica_ack});
        for (kind, a) in answers {
            out[kind.json_name()] = a.json;
        }
        println!("{out}");
    } else {
        for (_, a) in &answers {
            println!("{}", a.line);
        }
        println!("{}", replication_line(backend));
    }
    Ok(if held { OK } else { NO })
}
