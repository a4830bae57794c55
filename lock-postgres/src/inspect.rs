//! Inspecting a lock key: one `SELECT` of its live row.

use std::time::Duration;

use lock_core::{FencingToken, LockInfo, Result};
use tokio_postgres::types::Type;

use crate::error::bad_reply;
use crate::{Param, PostgresBackend};

impl PostgresBackend {
    /// The live holder's fencing token and remaining lease, read without
    /// a lock on the row (no `FOR UPDATE`): nothing is written.
    pub(crate) async fn inspect_lock(&self, key: &str) -> Result<LockInfo> {
        let params: [Param<'_>; 1] = [(&key, Type::TEXT)];
        let rows = self.query(&self.inner.sql.inspect, &params, false).await?;
        let Some(row) = rows.first() else {
            return Ok(LockInfo::free());
        };
        let fence: i64 = row.try_get(0).map_err(|_| bad_reply("inspect"))?;
        let left: i64 = row.try_get(1).map_err(|_| bad_reply("inspect"))?;
        let fence = u64::try_from(fence).map_err(|_| bad_reply("inspect"))?;
        let left = u64::try_from(left).map_err(|_| bad_reply("inspect"))?;
        Ok(LockInfo::held(Some(Duration::from_millis(left))).with_fencing_token(Some(FencingToken(fence))))
    }
}

impl PostgresBackend {
    /// The semaphore `name`'s live holders and their permits, with the
    /// size stored for it: one `SELECT`, no row locked.
    pub(crate) async fn inspect_permits(&self, name: &str) -> Result<lock_core::PermitsInfo> {
        crate::check_key(name)?;
        let s = format!("\"{}\"", self.inner.sql.schema);
        let sql = format!(
            "SELECT COALESCE(sum(permits), 0)::int8, count(*)::int8, \
               (SELECT size FROM {s}.names WHERE kind = 's' AND name = $1)::int8 \
             FROM {s}.holders WHERE kind = 's' AND name = $1 AND role = 's' AND expires_at > clock_timestamp()"
        );
        let params: [Param<'_>; 1] = [(&name, Type::TEXT)];
        let rows = self.query(&sql, &params, false).await?;
        let row = rows.first().ok_or_else(|| bad_reply("semaphore inspect"))?;
        let number = |i: usize| -> Result<Option<u32>> {
            let n: Option<i64> = row.try_get(i).map_err(|_| bad_reply("semaphore inspect"))?;
            n.map(|n| u32::try_from(n).map_err(|_| bad_reply("semaphore inspect")))
                .transpose()
        };
        let (in_use, holders) = (number(0)?.unwrap_or(0), number(1)?.unwrap_or(0));
        let size = number(2)?.filter(|_| holders > 0);
        Ok(lock_core::PermitsInfo::new(in_use, holders, size))
    }
}

impl PostgresBackend {
    /// The read-write lock `name`'s live readers, writer and writer's
    /// intent: one `SELECT`, no row locked. PostgreSQL keeps no writer's
    /// fencing token with its row, so none is reported.
    pub(crate) async fn inspect_rw(&self, name: &str) -> Result<lock_core::RwInfo> {
        crate::check_key(name)?;
        let s = format!("\"{}\"", self.inner.sql.schema);
        let sql = format!(
            "SELECT count(*) FILTER (WHERE role = 'r')::int8, count(*) FILTER (WHERE role = 'w')::int8, \
               count(*) FILTER (WHERE role = 'i')::int8 \
             FROM {s}.holders WHERE kind = 'w' AND name = $1 AND expires_at > clock_timestamp()"
        );
        let params: [Param<'_>; 1] = [(&name, Type::TEXT)];
        let rows = self.query(&sql, &params, false).await?;
        let row = rows.first().ok_or_else(|| bad_reply("read-write inspect"))?;
        let count = |i: usize| -> Result<u32> {
            let n: i64 = row.try_get(i).map_err(|_| bad_reply("read-write inspect"))?;
            u32::try_from(n).map_err(|_| bad_reply("read-write inspect"))
        };
        let (readers, writers, intents) = (count(0)?, count(1)?, count(2)?);
        let info = if writers > 0 {
            lock_core::RwInfo::writer(None)
        } else {
            lock_core::RwInfo::readers(readers)
        };
        Ok(info.with_writer_waiting(intents > 0))
    }
}
