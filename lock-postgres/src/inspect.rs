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
