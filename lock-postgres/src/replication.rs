//! What the server does with a commit before confirming it: whether a
//! confirmed lease survives the promotion of a standby.

use lock_core::Result;

use crate::PostgresBackend;
use crate::error::bad_reply;

/// The server's replication, as its settings say.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplicationMode {
    /// The server is a standby (in recovery): read-only, every write is
    /// refused with [`RefusalReason::ReadOnly`](lock_core::RefusalReason::ReadOnly).
    Standby,
    /// No synchronous standby: a commit is confirmed once it is on the
    /// primary. A failover to a standby can lose confirmed leases (two
    /// holders) and versioned writes.
    Asynchronous {
        /// Standbys streaming from the server now.
        standbys: u32,
    },
    /// `synchronous_standby_names` is set and `synchronous_commit` is `on`,
    /// `remote_write` or `remote_apply`: a commit is confirmed only once
    /// the synchronous standbys have it, so a confirmed lease survives the
    /// promotion of one of them (with `remote_write`, unless that standby
    /// also crashes before flushing). While no synchronous standby is
    /// connected, every write waits.
    Synchronous {
        /// `synchronous_standby_names`.
        standby_names: String,
        /// `synchronous_commit`.
        commit: String,
        /// Standbys in `sync` or `quorum` state now (0 without the
        /// `pg_read_all_stats` privilege, which the state needs).
        synchronous_now: u32,
    },
}

impl ReplicationMode {
    /// True for [`ReplicationMode::Synchronous`].
    pub fn is_synchronous(&self) -> bool {
        matches!(self, ReplicationMode::Synchronous { .. })
    }
}

const DETECT: &str = "SELECT pg_is_in_recovery(), current_setting('synchronous_standby_names'), \
    current_setting('synchronous_commit'), \
    (SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum'))::int4, \
    (SELECT count(*) FROM pg_stat_replication)::int4";

impl PostgresBackend {
    /// Ask the server how it replicates commits now (one statement).
    ///
    /// # Errors
    /// [`lock_core::Error::Backend`] when the server cannot be asked.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn replication(&self) -> Result<ReplicationMode> {
        let rows = self.query(DETECT, &[], false).await?;
        let row = rows.first().ok_or_else(|| bad_reply("the replication settings"))?;
        let bad = |_| bad_reply("the replication settings");
        let in_recovery: bool = row.try_get(0).map_err(bad)?;
        let names: String = row.try_get(1).map_err(bad)?;
        let commit: String = row.try_get(2).map_err(bad)?;
        let sync_now: i32 = row.try_get(3).map_err(bad)?;
        let streaming: i32 = row.try_get(4).map_err(bad)?;
        let count = |n: i32| u32::try_from(n).unwrap_or(0);
        Ok(if in_recovery {
            ReplicationMode::Standby
        } else if !names.trim().is_empty() && matches!(commit.as_str(), "on" | "remote_write" | "remote_apply") {
            ReplicationMode::Synchronous {
                standby_names: names,
                commit,
                synchronous_now: count(sync_now),
            }
        } else {
            ReplicationMode::Asynchronous {
                standbys: count(streaming),
            }
        })
    }

    /// The replication detected when the backend was built (`None` if the
    /// server could not tell); [`LockBackend::capabilities`](lock_core::LockBackend::capabilities)'s
    /// `replica_ack` is true when it was synchronous.
    pub fn replication_at_build(&self) -> Option<&ReplicationMode> {
        self.inner.replication.get()
    }
}
