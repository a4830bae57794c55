//! Semaphores, read-write locks, multi-key locks and leader election
//! (`sql/kinds.sql`): one statement per operation, as the mutex.

use std::time::Duration;

use async_trait::async_trait;
use lock_core::raw::validate_identity;
use lock_core::raw::{ElectionBackend, MultiLockBackend, PermitRequest, RwLockBackend, SemaphoreBackend};
use lock_core::raw::{conversion_not_held, size_mismatch};
use lock_core::{AcquireOutcome, Lease, ReleaseOutcome, RenewOutcome};
use lock_core::{Error, LeaderInfo, LockToken, Result, RwMode};
use tokio_postgres::types::Type;

use crate::conn::Op;
use crate::error::bad_reply;
use crate::schema::lease_sql;
use crate::{
    Param, PostgresBackend, acquire_outcome, check_key, outcome_code, release_outcome, renew_outcome, ttl_param,
};

/// How long a semaphore holder released while missing stays refused (its
/// late acquire, overtaken by the clean-up, must not take permits nobody
/// owns). Tokens are never reused, so refusing one is harmless.
pub const GONE_WINDOW: Duration = Duration::from_secs(60);

/// The statements of the kinds, for one schema.
#[derive(Debug)]
pub(crate) struct KindStatements {
    sem_acquire: String,
    sem_release: String,
    sem_renew: String,
    rw_acquire: String,
    rw_release: String,
    rw_renew: String,
    rw_convert: String,
    multi_acquire: String,
    multi_release: String,
    multi_renew: String,
    lead: [String; 3],
    leader: String,
}

impl KindStatements {
    pub(crate) fn new(s: &str) -> Self {
        let holder_renew = |kind: &str, roles: &str| {
            format!(
                "WITH renewed AS (UPDATE {s}.holders SET expires_at = clock_timestamp() + $3::int8 * interval '1 millisecond' \
                   WHERE kind = '{kind}' AND name = $1 AND holder = $2 AND role IN ({roles}) \
                   AND expires_at > clock_timestamp() RETURNING 1) \
                 SELECT CASE WHEN EXISTS (SELECT 1 FROM renewed) THEN 0 ELSE 2 END"
            )
        };
        KindStatements {
            sem_acquire: format!("SELECT fence, retry_ms, stored_size FROM {s}.sem_acquire($1, $2, $3, $4, $5, $6)"),
            sem_release: format!("SELECT {s}.sem_release($1, $2, $3)"),
            sem_renew: holder_renew("s", "'s'"),
            rw_acquire: format!("SELECT fence, retry_ms FROM {s}.rw_acquire($1, $2, $3, $4, $5)"),
            // Drops the intent too; released only when a live hold went;
            // the name's row goes when nobody holds it any more.
            rw_release: format!("SELECT {s}.rw_release($1, $2)"),
            rw_renew: holder_renew("w", "'r', 'u', 'w'"),
            rw_convert: format!("SELECT fence, retry_ms FROM {s}.rw_convert($1, $2, $3, $4)"),
            multi_acquire: format!("SELECT fence, retry_ms FROM {s}.multi_acquire($1, $2, $3)"),
            multi_release: format!(
                "WITH gone AS (DELETE FROM {s}.locks WHERE key = ANY($1) AND owner = $2 \
                   RETURNING expires_at > clock_timestamp() AS live) \
                 SELECT CASE WHEN (SELECT count(*) FROM gone WHERE live) = cardinality($1::text[]) THEN 0 \
                   WHEN EXISTS (SELECT 1 FROM {s}.locks WHERE key = ANY($1) AND owner <> $2 \
                     AND expires_at > clock_timestamp()) THEN 1 \
                   ELSE 2 END"
            ),
            // All or nothing: renewed only when every key is still ours.
            multi_renew: format!(
                "WITH mine AS (SELECT count(*) AS n FROM {s}.locks WHERE key = ANY($1) AND owner = $2 \
                   AND expires_at > clock_timestamp()), \
                 renewed AS (UPDATE {s}.locks SET expires_at = clock_timestamp() + $3::int8 * interval '1 millisecond' \
                   WHERE key = ANY($1) AND owner = $2 AND expires_at > clock_timestamp() \
                   AND (SELECT n FROM mine) = cardinality($1::text[]) RETURNING 1) \
                 SELECT CASE WHEN (SELECT count(*) FROM renewed) = cardinality($1::text[]) THEN 0 \
                   WHEN EXISTS (SELECT 1 FROM {s}.locks WHERE key = ANY($1) AND owner <> $2 \
                     AND expires_at > clock_timestamp()) THEN 1 \
                   ELSE 2 END"
            ),
            lead: lease_sql(s, "leaders", true),
            leader: format!(
                "SELECT identity, fence FROM {s}.leaders WHERE key = $1 AND expires_at > clock_timestamp()"
            ),
        }
    }
}

impl PostgresBackend {
    fn kinds(&self) -> &KindStatements {
        &self.inner.sql.kinds
    }

    /// One statement about `token` on `name`: a clean-up (a release) goes
    /// on the connection of the token's unanswered grant, if any.
    async fn holder_call(
        &self,
        sql: &str,
        name: &str,
        token: &LockToken,
        ttl: Option<i64>,
        cleanup: bool,
    ) -> Result<i32> {
        check_key(name)?;
        let owner: &[u8] = token.as_bytes();
        let ms = ttl.unwrap_or_default();
        let params: [Param<'_>; 3] = [(&name, Type::TEXT), (&owner, Type::BYTEA), (&ms, Type::INT8)];
        let op = if cleanup { Op::Cleanup(owner) } else { Op::Write };
        let rows = self.run(sql, &params, op).await?;
        outcome_code(&rows, "the statement")
    }
}

/// The key set as the server gets it (the manager dedups and sorts it).
fn key_list<'a>(keys: &[&'a str]) -> Result<Vec<&'a str>> {
    if keys.is_empty() {
        return Err(Error::invalid("a multi-key lock needs at least one key"));
    }
    let mut list = keys.to_vec();
    list.iter().try_for_each(|k| check_key(k))?;
    list.sort_unstable();
    list.dedup();
    Ok(list)
}

#[async_trait]
impl SemaphoreBackend for PostgresBackend {
    /// One `SELECT` of the live holders.
    async fn inspect_permits(&self, name: &str) -> Result<lock_core::PermitsInfo> {
        self.inspect_permits(name).await
    }

    async fn acquire_permits(
        &self,
        name: &str,
        holder: &LockToken,
        request: PermitRequest,
        ttl: Duration,
    ) -> Result<AcquireOutcome> {
        check_key(name)?;
        request.validate()?;
        let ms = ttl_param(ttl)?;
        let owner: &[u8] = holder.as_bytes();
        let (size, permits) = (
            i32::try_from(request.size).map_err(|_| Error::invalid("size out of range"))?,
            i32::try_from(request.permits).map_err(|_| Error::invalid("permits out of range"))?,
        );
        let waiting = request.waiting;
        let params: [Param<'_>; 6] = [
            (&name, Type::TEXT),
            (&owner, Type::BYTEA),
            (&size, Type::INT4),
            (&permits, Type::INT4),
            (&waiting, Type::BOOL),
            (&ms, Type::INT8),
        ];
        let rows = self.run(&self.kinds().sem_acquire, &params, Op::Grant(owner)).await?;
        let row = rows.first().ok_or_else(|| bad_reply("acquire_permits"))?;
        if let Some(stored) = row
            .try_get::<_, Option<i32>>(2)
            .map_err(|_| bad_reply("acquire_permits"))?
        {
            return Err(size_mismatch(name, request.size, u64::try_from(stored).unwrap_or(0)));
        }
        acquire_outcome(&rows)
    }

    async fn release_permits(&self, name: &str, holder: &LockToken) -> Result<ReleaseOutcome> {
        let gone = i64::try_from(GONE_WINDOW.as_millis()).unwrap_or(i64::MAX);
        let code = self
            .holder_call(&self.kinds().sem_release, name, holder, Some(gone), true)
            .await?;
        Ok(release_outcome(code))
    }

    async fn renew_permits(&self, name: &str, holder: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        let ms = ttl_param(ttl)?;
        let code = self
            .holder_call(&self.kinds().sem_renew, name, holder, Some(ms), false)
            .await?;
        Ok(renew_outcome(code))
    }
}

fn rw_role(mode: RwMode) -> i8 {
    match mode {
        RwMode::Read => b'r' as i8,
        RwMode::Upgradeable => b'u' as i8,
        RwMode::Write => b'w' as i8,
    }
}

impl PostgresBackend {
    /// `rw_convert`: `token`'s hold of `name` becomes `to`.
    async fn convert_rw(&self, name: &str, token: &LockToken, to: RwMode, ttl: Duration) -> Result<AcquireOutcome> {
        check_key(name)?;
        let ms = ttl_param(ttl)?;
        let owner: &[u8] = token.as_bytes();
        let role = rw_role(to);
        let params: [Param<'_>; 4] = [
            (&name, Type::TEXT),
            (&owner, Type::BYTEA),
            (&role, Type::CHAR),
            (&ms, Type::INT8),
        ];
        let rows = self.run(&self.kinds().rw_convert, &params, Op::Grant(owner)).await?;
        let not_held = rows
            .first()
            .map(|row| row.try_get::<_, Option<i64>>(1))
            .transpose()
            .map_err(|_| bad_reply("rw_convert"))?
            .flatten()
            == Some(-1);
        if not_held {
            return Err(conversion_not_held(name));
        }
        Ok(match acquire_outcome(&rows)? {
            AcquireOutcome::Acquired(_) if to != RwMode::Write => AcquireOutcome::Acquired(Lease::new()),
            outcome => outcome,
        })
    }
}

#[async_trait]
impl RwLockBackend for PostgresBackend {
    /// One `SELECT` of the live holders.
    async fn inspect_rw(&self, name: &str) -> Result<lock_core::RwInfo> {
        self.inspect_rw(name).await
    }

    async fn try_acquire_rw(
        &self,
        name: &str,
        mode: RwMode,
        waiting: bool,
        token: &LockToken,
        ttl: Duration,
    ) -> Result<AcquireOutcome> {
        check_key(name)?;
        let ms = ttl_param(ttl)?;
        let owner: &[u8] = token.as_bytes();
        let role = rw_role(mode);
        let params: [Param<'_>; 5] = [
            (&name, Type::TEXT),
            (&owner, Type::BYTEA),
            (&role, Type::CHAR),
            (&waiting, Type::BOOL),
            (&ms, Type::INT8),
        ];
        let rows = self.run(&self.kinds().rw_acquire, &params, Op::Grant(owner)).await?;
        // Writers carry a fencing token; readers none (their fence column is 0).
        Ok(match acquire_outcome(&rows)? {
            AcquireOutcome::Acquired(_) if mode != RwMode::Write => AcquireOutcome::Acquired(Lease::new()),
            outcome => outcome,
        })
    }

    async fn release_rw(&self, name: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        let code = self
            .holder_call(&self.kinds().rw_release, name, token, None, true)
            .await?;
        Ok(release_outcome(code))
    }

    async fn renew_rw(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        let ms = ttl_param(ttl)?;
        let code = self
            .holder_call(&self.kinds().rw_renew, name, token, Some(ms), false)
            .await?;
        Ok(renew_outcome(code))
    }

    async fn upgrade_rw(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.convert_rw(name, token, RwMode::Write, ttl).await
    }

    async fn downgrade_rw(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.convert_rw(name, token, RwMode::Upgradeable, ttl).await
    }
}

#[async_trait]
impl MultiLockBackend for PostgresBackend {
    async fn try_acquire_all(&self, keys: &[&str], token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        let keys = key_list(keys)?;
        let ms = ttl_param(ttl)?;
        let owner: &[u8] = token.as_bytes();
        let params: [Param<'_>; 3] = [(&keys, Type::TEXT_ARRAY), (&owner, Type::BYTEA), (&ms, Type::INT8)];
        let rows = self.run(&self.kinds().multi_acquire, &params, Op::Grant(owner)).await?;
        // The set's token is the highest of its keys' (see multi_acquire).
        acquire_outcome(&rows)
    }

    async fn release_all(&self, keys: &[&str], token: &LockToken) -> Result<ReleaseOutcome> {
        let keys = key_list(keys)?;
        let owner: &[u8] = token.as_bytes();
        let params: [Param<'_>; 2] = [(&keys, Type::TEXT_ARRAY), (&owner, Type::BYTEA)];
        let rows = self
            .run(&self.kinds().multi_release, &params, Op::Cleanup(owner))
            .await?;
        outcome_code(&rows, "release_all").map(release_outcome)
    }

    async fn renew_all(&self, keys: &[&str], token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        let keys = key_list(keys)?;
        let ms = ttl_param(ttl)?;
        let owner: &[u8] = token.as_bytes();
        let params: [Param<'_>; 3] = [(&keys, Type::TEXT_ARRAY), (&owner, Type::BYTEA), (&ms, Type::INT8)];
        let rows = self.query(&self.kinds().multi_renew, &params, true).await?;
        outcome_code(&rows, "renew_all").map(renew_outcome)
    }
}

#[async_trait]
impl ElectionBackend for PostgresBackend {
    async fn try_lead(&self, name: &str, token: &LockToken, identity: &[u8], ttl: Duration) -> Result<AcquireOutcome> {
        check_key(name)?;
        validate_identity(identity)?;
        let ms = ttl_param(ttl)?;
        let owner: &[u8] = token.as_bytes();
        let params: [Param<'_>; 4] = [
            (&name, Type::TEXT),
            (&owner, Type::BYTEA),
            (&ms, Type::INT8),
            (&identity, Type::BYTEA),
        ];
        let rows = self.run(&self.kinds().lead[0], &params, Op::Grant(owner)).await?;
        acquire_outcome(&rows)
    }

    async fn resign(&self, name: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        check_key(name)?;
        let owner: &[u8] = token.as_bytes();
        let params: [Param<'_>; 2] = [(&name, Type::TEXT), (&owner, Type::BYTEA)];
        let rows = self.run(&self.kinds().lead[1], &params, Op::Cleanup(owner)).await?;
        outcome_code(&rows, "resign").map(release_outcome)
    }

    async fn renew_lead(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        let ms = ttl_param(ttl)?;
        let code = self
            .holder_call(&self.kinds().lead[2], name, token, Some(ms), false)
            .await?;
        Ok(renew_outcome(code))
    }

    async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>> {
        check_key(name)?;
        let params: [Param<'_>; 1] = [(&name, Type::TEXT)];
        let rows = self.query(&self.kinds().leader, &params, false).await?;
        let Some(row) = rows.first() else { return Ok(None) };
        let identity: Vec<u8> = row.try_get(0).map_err(|_| bad_reply("leader"))?;
        let term: i64 = row.try_get(1).map_err(|_| bad_reply("leader"))?;
        let term = u64::try_from(term).map_err(|_| bad_reply("leader"))?;
        Ok(Some(LeaderInfo::new(identity, term)))
    }
}
