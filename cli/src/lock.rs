//! `verrou lock`: hold a lock around a program.

use verrou::Backend;

use crate::args::LockArgs;
use crate::exit::Failure;
use crate::supervise::{Plan, Signals, run_program};

/// `verrou lock NAME -- PROGRAM ARGS…`.
pub async fn run(backend: &Backend, args: LockArgs) -> Result<u8, Failure> {
    let hold = &args.hold;
    let plan = Plan::new(hold.ttl, hold.kill_grace, hold.wait, hold.no_wait)?.min_hold(hold.hold_at_least);
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
