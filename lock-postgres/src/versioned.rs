//! The versioned store: a table whose versions come from a sequence.

use async_trait::async_trait;
use lock_core::{CasOutcome, CreateOutcome, DeleteOutcome, Error, Expiry, Result, Versioned, VersionedStore};
use tokio_postgres::Row;
use tokio_postgres::types::Type;

use crate::error::{BACKEND, bad_reply};
use crate::{Param, PostgresBackend, check_key, ttl_param};

/// Largest value accepted (PostgreSQL's `bytea` limit is 1 GiB; a lock
/// library's values are small, and a bound keeps one call from tying up a
/// connection for long).
pub const MAX_VALUE_BYTES: usize = 64 << 20;

fn check_value(value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(Error::invalid(format!(
            "value is {} bytes; the postgres backend takes at most {MAX_VALUE_BYTES}",
            value.len()
        )));
    }
    Ok(())
}

/// The TTL parameter of a write: `None` keeps the key's expiry (none for a
/// new key), `-1` removes it, else milliseconds from the server's now.
fn expiry_param(expiry: Expiry) -> Result<Option<i64>> {
    expiry.validate()?;
    match expiry {
        Expiry::After(ttl) => ttl_param(ttl).map(Some),
        Expiry::Persist => Ok(Some(-1)),
        _ => Ok(None),
    }
}

fn version_of(row: &Row, idx: usize, what: &str) -> Result<u64> {
    let v: i64 = row.try_get(idx).map_err(|_| bad_reply(what))?;
    u64::try_from(v).map_err(|_| bad_reply(what))
}

fn kind_of<'a>(rows: &'a [Row], what: &str) -> Result<(i32, &'a Row)> {
    let row = rows.first().ok_or_else(|| bad_reply(what))?;
    let kind: i32 = row.try_get(0).map_err(|_| bad_reply(what))?;
    Ok((kind, row))
}

#[async_trait]
impl VersionedStore for PostgresBackend {
    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        check_key(key)?;
        let params: [Param<'_>; 1] = [(&key, Type::TEXT)];
        let rows = self.query(&self.inner.sql.kv_get, &params, false).await?;
        let Some(row) = rows.first() else { return Ok(None) };
        let value: Vec<u8> = row.try_get(0).map_err(|_| bad_reply("get"))?;
        Ok(Some(Versioned {
            value,
            version: version_of(row, 1, "get")?,
        }))
    }

    async fn create(&self, key: &str, value: &[u8], expiry: Expiry) -> Result<CreateOutcome> {
        check_key(key)?;
        check_value(value)?;
        // A new key has no expiry to keep, and `Persist` means none either.
        let ttl = expiry_param(expiry)?.filter(|ms| *ms >= 0);
        let params: [Param<'_>; 3] = [(&key, Type::TEXT), (&value, Type::BYTEA), (&ttl, Type::INT8)];
        let rows = self.query(&self.inner.sql.kv_create, &params, true).await?;
        match rows.first() {
            Some(row) => Ok(CreateOutcome::Created {
                version: version_of(row, 0, "create")?,
            }),
            None => Ok(CreateOutcome::Exists),
        }
    }

    async fn compare_and_set(&self, key: &str, expected: u64, value: &[u8], expiry: Expiry) -> Result<CasOutcome> {
        check_key(key)?;
        check_value(value)?;
        let ttl = expiry_param(expiry)?;
        // Versions are positive bigints: a larger one was never issued.
        let Ok(expected) = i64::try_from(expected) else {
            return self.conflict_or_missing(key).await;
        };
        let params: [Param<'_>; 4] = [
            (&key, Type::TEXT),
            (&expected, Type::INT8),
            (&value, Type::BYTEA),
            (&ttl, Type::INT8),
        ];
        let rows = self.query(&self.inner.sql.kv_cas, &params, true).await?;
        match kind_of(&rows, "compare_and_set")? {
            (0, row) => Ok(CasOutcome::Written {
                version: version_of(row, 1, "compare_and_set")?,
            }),
            (1, row) => Ok(CasOutcome::Conflict(Versioned {
                value: row.try_get(2).map_err(|_| bad_reply("compare_and_set"))?,
                version: version_of(row, 1, "compare_and_set")?,
            })),
            _ => Ok(CasOutcome::Missing),
        }
    }

    async fn delete(&self, key: &str, expected: u64) -> Result<DeleteOutcome> {
        check_key(key)?;
        let expected = i64::try_from(expected).unwrap_or(-1);
        let params: [Param<'_>; 2] = [(&key, Type::TEXT), (&expected, Type::INT8)];
        let rows = self.query(&self.inner.sql.kv_delete, &params, true).await?;
        match kind_of(&rows, "delete")? {
            (0, _) => Ok(DeleteOutcome::Deleted),
            (1, row) => Ok(DeleteOutcome::Conflict {
                current_version: version_of(row, 1, "delete")?,
            }),
            _ => Ok(DeleteOutcome::Missing),
        }
    }

    fn name(&self) -> &str {
        BACKEND
    }
}

impl PostgresBackend {
    /// A CAS against a version that cannot exist: the key's state.
    async fn conflict_or_missing(&self, key: &str) -> Result<CasOutcome> {
        Ok(match self.get(key).await? {
            Some(current) => CasOutcome::Conflict(current),
            None => CasOutcome::Missing,
        })
    }
}
