//! A PostgreSQL primary with one streaming standby, synchronous or not,
//! and promotion of the standby.

use std::process::Command;
use std::time::Duration;

use super::error::{HarnessError, HarnessResult};
use super::postgres::{PG_USER, PostgresServer, PostgresServerBuilder, owned_command, run_to_end};
use super::process::wait_until;

/// How long a standby gets to catch up (or the primary to see it).
const CATCH_UP: Duration = Duration::from_secs(30);

/// A primary and a standby streaming from it (a base backup taken with
/// `pg_basebackup -R`, so `standby.signal` and `primary_conninfo` are set).
/// With `synchronous`, the primary's `synchronous_standby_names` is `'*'`
/// and `synchronous_commit` `on`: a commit returns only once the standby
/// has flushed it, so what the primary confirmed survives a promotion.
#[derive(Debug)]
pub struct PostgresPair {
    primary: PostgresServer,
    standby: PostgresServer,
    synchronous: bool,
}

impl PostgresPair {
    /// Starts the primary from `builder`, the standby from a base backup of
    /// it, and waits until the primary sees the standby streaming (in
    /// `sync` state when `synchronous`).
    ///
    /// # Errors
    /// The start errors of [`PostgresServerBuilder::start`];
    /// [`HarnessError::Reply`] when `pg_basebackup` fails;
    /// [`HarnessError::Timeout`] when the standby does not stream.
    ///
    /// # Cancel safety
    /// Dropping the future kills the servers started so far.
    pub async fn start(builder: PostgresServerBuilder, synchronous: bool) -> HarnessResult<PostgresPair> {
        let primary = builder.start().await?;
        let (bin, port) = (primary.bin_dir().to_path_buf(), primary.port());
        let standby = builder
            .start_with(|data, owner| async move {
                let parent = data.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
                let mut cmd: Command = owned_command(&bin.join("pg_basebackup"), owner, &parent);
                cmd.args([
                    "-h",
                    "127.0.0.1",
                    "-U",
                    PG_USER,
                    "-R",
                    "-X",
                    "stream",
                    "-c",
                    "fast",
                    "--no-sync",
                ])
                .arg("-p")
                .arg(port.to_string())
                .arg("-D")
                .arg(&data);
                run_to_end(cmd, "pg_basebackup").await.map(drop)
            })
            .await?;
        let pair = PostgresPair {
            primary,
            standby,
            synchronous,
        };
        if synchronous {
            pair.primary
                .psql("ALTER SYSTEM SET synchronous_standby_names = '*'")
                .await?;
            pair.primary.psql("SELECT pg_reload_conf()").await?;
        }
        let want = if synchronous { "sync" } else { "async" };
        let primary = &pair.primary;
        wait_until(&format!("the standby to stream ({want})"), CATCH_UP, || async move {
            let state = primary
                .psql("SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'")
                .await?;
            Ok(state.lines().any(|l| l.trim() == want))
        })
        .await?;
        Ok(pair)
    }

    /// The primary.
    pub fn primary(&self) -> &PostgresServer {
        &self.primary
    }

    /// The standby (read-only until promoted).
    pub fn standby(&self) -> &PostgresServer {
        &self.standby
    }

    /// Whether the standby is synchronous.
    pub fn is_synchronous(&self) -> bool {
        self.synchronous
    }

    /// Fails over: kills the primary and promotes the standby, waiting
    /// until it accepts writes.
    ///
    /// # Errors
    /// [`HarnessError::Timeout`] when the standby does not leave recovery.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the standby promoting or promoted.
    pub async fn fail_over(&self) -> HarnessResult<()> {
        self.primary.kill()?;
        self.standby.psql("SELECT pg_promote(true, 30)").await?;
        let standby = &self.standby;
        wait_until("the promoted standby to accept writes", CATCH_UP, || async move {
            Ok(standby.psql("SELECT pg_is_in_recovery()").await? == "f")
        })
        .await
        .map_err(|e| match e {
            HarnessError::Timeout { what, after } => HarnessError::Timeout {
                what: format!("{what}; log:\n{}", standby.log_tail(20)),
                after,
            },
            other => other,
        })
    }
}
