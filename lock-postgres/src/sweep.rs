//! Sweeping rows that no longer mean anything (`sweep` in `sql/kinds.sql`):
//! expired locks, leaders, store keys, queue entries, gone records, and the
//! names of semaphores and read-write locks nobody holds. A release removes
//! its name's row when it was the last holder; the sweep catches the rest
//! (holders that stopped renewing, keys never used again).

use std::sync::Weak;
use std::time::Duration;

use lock_core::Result;

use crate::error::bad_reply;
use crate::{Inner, PostgresBackend};

/// How often a backend sweeps in the background.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(30);

/// Most rows of each table removed by one sweep.
pub const SWEEP_LIMIT: i32 = 1000;

impl PostgresBackend {
    /// Remove up to [`SWEEP_LIMIT`] expired rows of each table, and the rows
    /// of names nobody holds; answers how many rows went. The backend does
    /// this every [`SWEEP_INTERVAL`] in the background; rows are taken with
    /// `SKIP LOCKED`, so a sweep never waits for a lock decision.
    ///
    /// # Errors
    /// [`lock_core::Error::Backend`] when the statement fails.
    ///
    /// # Cancel safety
    /// Cancel safe: it removes only rows whose removal nobody can observe.
    pub async fn sweep(&self) -> Result<u64> {
        let limit = SWEEP_LIMIT;
        let params: [crate::Param<'_>; 1] = [(&limit, tokio_postgres::types::Type::INT4)];
        let rows = self.query(&self.inner.sql.sweep, &params, true).await?;
        let n: i64 = rows
            .first()
            .and_then(|r| r.try_get(0).ok())
            .ok_or_else(|| bad_reply("sweep"))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}

/// Sweep every [`SWEEP_INTERVAL`] while the backend lives.
pub(crate) fn spawn(inner: Weak<Inner>) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    handle.spawn(async move {
        loop {
            tokio::time::sleep(SWEEP_INTERVAL).await;
            let Some(inner) = inner.upgrade() else { return };
            let backend = PostgresBackend { inner };
            if let Err(e) = backend.sweep().await {
                tracing::debug!(error = %e, "sweeping expired rows failed; the next sweep tries again");
            }
        }
    });
}
