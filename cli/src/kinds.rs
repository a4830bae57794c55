//! `verrou semaphore` (at most N copies of a program) and `verrou elect`
//! (run a program only while leader): the lock kinds around a program, with
//! `verrou lock`'s kill sequence and exit codes.

use verrou::Backend;

use crate::args::{ElectArgs, SemaphoreArgs};
use crate::exit::Failure;
use crate::supervise::{Plan, Signals, run_program};

/// `verrou semaphore --permits N NAME -- PROGRAM ARGS…`: one permit of a
/// semaphore of N.
pub async fn semaphore(backend: &Backend, args: SemaphoreArgs) -> Result<u8, Failure> {
    let hold = &args.hold;
    let plan = Plan::new(hold.ttl, hold.kill_grace, hold.wait, hold.no_wait)?.min_hold(hold.hold_at_least);
    let mut signals = Signals::install()?;
    let semaphore = backend
        .semaphores(plan.options.clone())?
        .semaphore(&args.name, args.permits)?;
    let what = format!("semaphore {:?}", args.name);
    let acquire = async {
        if hold.no_wait {
            semaphore.try_acquire(1).await
        } else {
            semaphore.acquire(1).await.map(Some)
        }
    };
    let busy = format!("{what}: all {} permits are taken", args.permits);
    match signals.acquire(&busy, acquire).await? {
        Ok(permit) => run_program(permit, signals, &what, &args.program, plan.grace).await,
        Err(interrupted) => Ok(interrupted),
    }
}

/// `verrou elect NAME -- PROGRAM ARGS…`: campaign, run while leader.
pub async fn elect(backend: &Backend, args: ElectArgs) -> Result<u8, Failure> {
    let hold = &args.hold;
    let plan = Plan::new(hold.ttl, hold.kill_grace, hold.wait, hold.no_wait)?.min_hold(hold.hold_at_least);
    let mut signals = Signals::install()?;
    let elections = backend.elections(plan.options.clone())?;
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let what = format!("leadership of {:?}", args.name);
    let acquire = async {
        if hold.no_wait {
            elections.try_campaign(&args.name, identity.as_bytes()).await
        } else {
            elections.campaign(&args.name, identity.as_bytes()).await.map(Some)
        }
    };
    let busy = format!("{:?} has another leader", args.name);
    match signals.acquire(&busy, acquire).await? {
        Ok(leadership) => run_program(leadership, signals, &what, &args.program, plan.grace).await,
        Err(interrupted) => Ok(interrupted),
    }
}

/// `HOSTNAME:PID`: tells the leader's machine and process apart.
fn default_identity() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".to_owned());
    format!("{host}:{}", std::process::id())
}
