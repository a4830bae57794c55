//! `verrou lock` (hold a lock around a program) and `verrou status`.

use std::time::Duration;

use serde_json::json;
use verrou::AcquireOutcome;
use verrou::{Backend, LockToken};

use crate::args::LockArgs;
use crate::exit::{Failure, NO, OK, SOFTWARE};
use crate::supervise::{Plan, Signals, round_ms, run_program};

/// `verrou lock NAME -- PROGRAM ARGS…`.
pub async fn run(backend: &Backend, args: LockArgs) -> Result<u8, Failure> {
    let hold = &args.hold;
    let plan = Plan::new(hold.ttl, hold.kill_grace, hold.wait, hold.no_wait)?;
    let mut signals = Signals::install()?;
    let locks = backend.manager(plan.options.clone())?;
    let what = format!("lock {:?}", args.name);
    let acquire = async {
        if hold.no_wait {
            locks.try_lock(&args.name).await
        } else {
            locks.lock(&args.name).await.map(Some)
        }
    };
    let busy = format!("{what} is held by another client");
    match signals.acquire(&busy, acquire).await? {
        Ok(guard) => run_program(guard, signals, &what, &args.program, plan.grace).await,
        Err(interrupted) => Ok(interrupted),
    }
}

/// What the backend says about replication, for `verrou status`: whether a
/// confirmed write waited for a replica (a synchronous standby, `WAIT`).
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

/// `verrou status NAME`: one acquire attempt with a fresh token, released at
/// once when it succeeds (so a free lock's fencing counter advances by one),
/// and whether the backend's confirmed writes are replica-acknowledged.
pub async fn status(backend: &Backend, name: &str, json: bool) -> Result<u8, Failure> {
    let locks = backend.locks();
    let caps = locks.capabilities();
    let (backend_name, replica_ack) = (caps.name, caps.replica_ack);
    let token = LockToken::generate()?;
    let probe_ttl = Duration::from_secs(1);
    match locks.try_acquire(name, &token, probe_ttl).await? {
        AcquireOutcome::Held { retry_after } => {
            if json {
                let remaining = retry_after.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                println!(
                    "{}",
                    json!({"name": name, "held": true, "remaining_ttl_ms": remaining,
                           "backend": backend_name, "replica_ack": replica_ack})
                );
            } else {
                match retry_after {
                    Some(d) => println!("held, {} left", humantime::format_duration(round_ms(d))),
                    None => println!("held"),
                }
                println!("{}", replication_line(backend));
            }
            Ok(OK)
        }
        AcquireOutcome::Acquired(lease) => {
            if let Err(e) = locks.release(name, &token).await {
                eprintln!("verrou: the status probe could not release its own {probe_ttl:?} lease ({e}); it expires");
            }
            let fence = lease.fencing_token.map(|t| t.0);
            if json {
                println!(
                    "{}",
                    json!({"name": name, "held": false, "fencing_counter": fence,
                           "backend": backend_name, "replica_ack": replica_ack})
                );
            } else {
                match fence {
                    Some(f) => println!("free (fencing counter {f}, advanced by this probe)"),
                    None => println!("free"),
                }
                println!("{}", replication_line(backend));
            }
            Ok(NO)
        }
        _ => Err(Failure::new(SOFTWARE, "unexpected reply from the backend")),
    }
}
