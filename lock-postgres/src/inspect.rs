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
