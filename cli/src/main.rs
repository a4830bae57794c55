//! `verrou`: hold a distributed lock around any program, and read or write
//! versioned values, from the shell. See `verrou --help`.

mod args;
mod exit;
mod kinds;
mod lock;
mod status;
mod store;
mod supervise;
mod terminal;

use std::process::ExitCode;

use clap::Parser;
use verrou::Backend;

use crate::args::{Cli, Command};
use crate::exit::{CONFIG, Failure};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return Failure::new(exit::SOFTWARE, format!("cannot start the async runtime: {e}")).report(),
    };
    let outcome = runtime.block_on(async {
        let outcome = run(cli).await;
        // An acquire given up on a signal (or a guard dropped on an error)
        // left its clean-up release to the runtime: exiting now would drop
        // it, and a grant that lands late would stay held for the whole TTL.
        // Each release is bounded by its operation timeout.
        verrou::wait_for_background_releases().await;
        outcome
    });
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => failure.report(),
    }
}

async fn run(cli: Cli) -> Result<u8, Failure> {
    let url = cli.url.as_deref().ok_or_else(|| {
        Failure::new(
            CONFIG,
            "no backend URL: pass --url URL or set VERROU_URL (e.g. redis://127.0.0.1:6379)",
        )
    })?;
    let backend = connect(url).await?;
    let json = cli.json;
    match cli.command {
        Command::Lock(args) => lock::run(&backend, args).await,
        Command::Semaphore(args) => kinds::semaphore(&backend, args).await,
        Command::Elect(args) => kinds::elect(&backend, args).await,
        Command::Status(args) => status::status(&backend, &args, json).await,
        Command::Get(args) => store::get(&backend, &args.key, json).await,
        Command::Set(args) => store::set(&backend, args, json).await,
        Command::Cas(args) => store::cas(&backend, args, json).await,
        Command::Delete(args) => store::delete(&backend, args, json).await,
    }
}

/// Connect, refusing `memory://`: each `verrou` run is its own process.
async fn connect(url: &str) -> Result<Backend, Failure> {
    let backend = verrou::connect(url).await?;
    if backend.is_in_process() {
        return Err(Failure::new(
            CONFIG,
            "memory:// keeps locks and values inside one process, and every verrou command is a process of its \
             own, so nothing would be shared: use a server URL (redis://, tair://, redlock://…)",
        ));
    }
    Ok(backend)
}
