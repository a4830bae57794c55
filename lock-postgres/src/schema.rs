//! The schema (shipped as `sql/schema.sql`), schema names, and every
//! statement the backend sends, with the schema name filled in once.

use lock_core::{Error, Result};

/// The SQL that creates everything the backend uses, for the default schema
/// `verrou` (safe to run again). Put it in your migrations and build with
/// [`PostgresBuilder::create_schema(false)`](crate::PostgresBuilder::create_schema);
/// [`schema_sql`] gives it for another schema name.
pub const SCHEMA_SQL: &str = concat!(
    include_str!("../sql/schema.sql"),
    "\n",
    include_str!("../sql/kinds.sql")
);

/// The schema used unless [`PostgresBuilder::schema`](crate::PostgresBuilder::schema) says otherwise.
pub const DEFAULT_SCHEMA: &str = "verrou";

/// The longest identifier PostgreSQL keeps (longer ones are truncated).
const MAX_IDENTIFIER: usize = 63;

/// Check a schema name: 1 to 63 characters, a lower-case ASCII letter or
/// `_` first, then lower-case letters, digits or `_` (so it means the same
/// quoted or not, and never needs escaping).
///
/// # Errors
/// [`Error::InvalidArgument`] naming the rule broken.
pub fn validate_identifier(name: &str) -> Result<()> {
    let ok_first = name.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let ok_rest = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !ok_first || !ok_rest || name.len() > MAX_IDENTIFIER {
        return Err(Error::invalid(format!(
            "schema name {name:?} must be 1 to {MAX_IDENTIFIER} characters: a lower-case ASCII letter or `_`, \
             then lower-case letters, digits or `_`"
        )));
    }
    Ok(())
}

/// [`SCHEMA_SQL`] for the schema `name`.
///
/// # Errors
/// [`Error::InvalidArgument`] for a name [`validate_identifier`] refuses.
pub fn schema_sql(name: &str) -> Result<String> {
    validate_identifier(name)?;
    Ok(SCHEMA_SQL.replace("\"verrou\"", &format!("\"{name}\"")))
}

/// The statements of a plain lock, as the backend sends them (each one
/// statement, unprepared, with typed parameters; the backend wraps each in
/// a READ COMMITTED transaction with `synchronous_commit` at least `local`,
/// see the crate's *Server settings*): what a client without verrou would
/// send to do the same; the benchmark's raw tokio-postgres rows send
/// exactly these, as autocommit statements.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatements {
    /// What opens each write's transaction, pipelined before the statement
    /// and followed by `COMMIT`: READ COMMITTED, and `synchronous_commit`
    /// raised to `on` when the session says `off` (see *Server settings*
    /// in the crate's documentation).
    pub begin: &'static str,
    /// Acquire: `$1` key (`text`), `$2` owner token (`bytea`), `$3` TTL in
    /// ms (`int8`). One row (fence, NULL) when taken; (NULL, the holder's
    /// remaining ms) when held; no row when the holder just went away.
    pub acquire: String,
    /// Acquire with notifications (the default): also `$4`, whether the
    /// caller waited for the key lately (`bool`); answers as `acquire`, and
    /// marks a lease held by another as waited for.
    pub acquire_marking: String,
    /// Release without notifications: `$1` key, `$2` owner. Answers 0
    /// released, 1 held by another, 2 missing.
    pub release: String,
    /// Release with notifications: also `$3`, the [`LockStatements::channel`].
    pub release_notify: String,
    /// Renew: `$1` key, `$2` owner, `$3` TTL in ms; answers as the release.
    pub renew: String,
    /// Renew many: `$1` keys (`text[]`), `$2` owners (`bytea[]`), `$3` TTL in
    /// ms; one answer per item, in order.
    pub renew_many: String,
    /// The `NOTIFY` channel of the schema.
    pub channel: String,
}

/// Every statement of the backend, for one schema.
#[derive(Debug)]
pub(crate) struct Statements {
    pub schema: String,
    pub acquire: String,
    pub acquire_marking: String,
    pub release: String,
    pub release_notify: String,
    pub renew: String,
    pub renew_many: String,
    pub inspect: String,
    pub kv_get: String,
    pub kv_create: String,
    pub kv_cas: String,
    pub kv_delete: String,
    pub acquire_fair: String,
    pub leave_queue: String,
    pub leave_queue_notify: String,
    pub exists: String,
    pub sweep: String,
    pub kinds: crate::kinds::KindStatements,
}

/// Milliseconds (a bigint parameter) from the server's clock.
macro_rules! from_now {
    ($param:literal) => {
        concat!("clock_timestamp() + ", $param, "::int8 * interval '1 millisecond'")
    };
}

/// A new fencing token for `key` of `table`, drawn under a transaction-scoped
/// advisory lock on (table, key): every statement drawing one for the key
/// waits for the transaction that drew the previous one, so the tokens of a
/// key grow in the order its grants commit. (Drawn without it, `nextval` in
/// `VALUES` runs before the insert waits on a concurrent release or acquire
/// of the key, and a token drawn early could be granted after a higher one.)
/// `pg_advisory_xact_lock` answers `void`; the `CASE` orders the two calls.
/// `sql/schema.sql` (fair acquire) and `sql/kinds.sql` (multi-key acquire)
/// write the same expression.
pub(crate) fn fence_sql(s: &str, table: &str, key: &str) -> String {
    format!(
        "CASE WHEN pg_advisory_xact_lock(hashtext('{s}.{table}'), hashtext({key}))::text IS NOT NULL \
         THEN nextval('{s}.fence_seq') END"
    )
}

/// Acquire, release and renew of a table of leases with the columns of
/// `locks` (key, owner, fence, expires_at); `identity` adds that column
/// (the `leaders` table), set from parameter `$4`.
pub(crate) fn lease_sql(s: &str, table: &str, identity: bool) -> [String; 3] {
    let (col, val, set) = if identity {
        (", identity", ", $4", ", identity = excluded.identity")
    } else {
        ("", "", "")
    };
    [
        // Take the key if free, expired, or already ours (a re-sent
        // acquire keeps its fencing token); otherwise report how long the
        // holder has left. `taken` is empty exactly when the conflicting
        // row was live and someone else's. The token is drawn under a
        // transaction lock on the key, so that acquires of one key draw in
        // the order they are granted: drawn before waiting on a concurrent
        // release or acquire of the key, it could be granted after a
        // higher one (see `fence_sql`).
        format!(
            "WITH taken AS (\
               INSERT INTO {s}.{table} AS l (key, owner, fence, expires_at{col}) \
               VALUES ($1, $2, {}, {}{val}) \
               ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, \
                 fence = CASE WHEN l.owner = excluded.owner THEN l.fence ELSE excluded.fence END, \
                 expires_at = excluded.expires_at{set} \
               WHERE l.expires_at <= clock_timestamp() OR l.owner = excluded.owner \
               RETURNING l.fence) \
             SELECT fence, NULL::int8 FROM taken \
             UNION ALL \
             SELECT NULL::int8, GREATEST(0, CEIL(EXTRACT(EPOCH FROM h.expires_at - clock_timestamp()) * 1000))::int8 \
             FROM {s}.{table} h WHERE h.key = $1 AND NOT EXISTS (SELECT 1 FROM taken)",
            fence_sql(s, table, "$1"),
            from_now!("$3")
        ),
        // 0 released, 1 held by another, 2 missing. Our own expired row is
        // deleted too (tidy), but answers missing. Committed without
        // waiting for its flush (`quick`): a release lost in a crash or a
        // failover brings the lease back until its expiry, never a second
        // holder, and the next grant's commit, which waits, flushes the
        // release before it (the log is written in order). A hand-off then
        // waits for one flush, the grant's, instead of two.
        format!(
            "WITH quick AS (SELECT set_config('synchronous_commit', 'off', true)), \
             gone AS (DELETE FROM {s}.{table} WHERE key = $1 AND owner = $2 \
               RETURNING expires_at > clock_timestamp() AS live) \
             SELECT CASE WHEN EXISTS (SELECT 1 FROM gone WHERE live) THEN 0 \
               WHEN EXISTS (SELECT 1 FROM gone) THEN 2 \
               WHEN EXISTS (SELECT 1 FROM {s}.{table} WHERE key = $1 AND expires_at > clock_timestamp()) THEN 1 \
               ELSE 2 END FROM quick"
        ),
        format!(
            "WITH renewed AS (UPDATE {s}.{table} SET expires_at = {} \
               WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp() RETURNING 1) \
             SELECT CASE WHEN EXISTS (SELECT 1 FROM renewed) THEN 0 \
               WHEN EXISTS (SELECT 1 FROM {s}.{table} WHERE key = $1 AND owner <> $2 \
                 AND expires_at > clock_timestamp()) THEN 1 \
               ELSE 2 END",
            from_now!("$3")
        ),
    ]
}

impl Statements {
    pub(crate) fn new(schema: &str) -> Result<Self> {
        validate_identifier(schema)?;
        let s = format!("\"{schema}\"");
        let [acquire, release, renew] = lease_sql(&s, "locks", false);
        Ok(Statements {
            schema: schema.to_owned(),
            acquire,
            // The acquire of a backend with notifications: also marks a
            // lease held by another as waited for (`sql/schema.sql`).
            acquire_marking: format!("SELECT fence, retry_ms FROM {s}.acquire_marking($1, $2, $3, $4)"),
            // The release, announcing a freed live lease on channel $3
            // (`sql/schema.sql`: the payload names the fair queue's head).
            release_notify: format!("SELECT {s}.release_notify($1, $2, $3)"),
            release,
            renew,
            // Primary-key lookups whatever the statistics (`sql/schema.sql`).
            renew_many: format!(
                "SELECT code FROM {s}.renew_many($1::text[], $2::bytea[], $3::int8) WITH ORDINALITY AS r(code, n) \
                 ORDER BY n"
            ),
            // A read: the live holder's fence and remaining ms, or no row.
            inspect: format!(
                "SELECT fence, GREATEST(0, CEIL(EXTRACT(EPOCH FROM expires_at - clock_timestamp()) * 1000))::int8 \
                 FROM {s}.locks WHERE key = $1 AND expires_at > clock_timestamp()"
            ),
            kv_get: format!(
                "SELECT value, version FROM {s}.kv WHERE key = $1 \
                 AND (expires_at IS NULL OR expires_at > clock_timestamp())"
            ),
            // A live key stays; an expired one is taken over.
            kv_create: format!(
                "INSERT INTO {s}.kv AS t (key, value, version, expires_at) \
                 VALUES ($1, $2, nextval('{s}.version_seq'), \
                   CASE WHEN $3::int8 IS NULL THEN NULL ELSE {} END) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value, version = excluded.version, \
                   expires_at = excluded.expires_at \
                 WHERE t.expires_at IS NOT NULL AND t.expires_at <= clock_timestamp() \
                 RETURNING version",
                from_now!("$3")
            ),
            kv_cas: format!("SELECT kind, version, value FROM {s}.kv_cas($1, $2, $3, $4)"),
            kv_delete: format!("SELECT kind, version FROM {s}.kv_delete($1, $2)"),
            acquire_fair: format!("SELECT fence, retry_ms FROM {s}.acquire_fair($1, $2, $3, $4, $5, $6)"),
            leave_queue: format!("DELETE FROM {s}.queue WHERE key = $1 AND waiter = $2"),
            // A waiter leaving a free key's queue wakes the next one (the
            // statement still sees the leaving waiter: skipped by name).
            leave_queue_notify: format!(
                "WITH left_queue AS (DELETE FROM {s}.queue WHERE key = $1 AND waiter = $2 RETURNING 1) \
                 SELECT {s}.wake($1, $2, $3, true) FROM left_queue WHERE NOT EXISTS \
                   (SELECT 1 FROM {s}.locks WHERE key = $1 AND expires_at > clock_timestamp())"
            ),
            kinds: crate::kinds::KindStatements::new(&s),
            sweep: format!("SELECT {s}.sweep($1)"),
            // Everything the backend needs, present? (First use and errors.)
            exists: format!(
                "SELECT to_regclass('{s}.locks') IS NOT NULL AND to_regclass('{s}.queue') IS NOT NULL \
                   AND to_regclass('{s}.kv') IS NOT NULL AND to_regclass('{s}.fence_seq') IS NOT NULL \
                   AND to_regclass('{s}.version_seq') IS NOT NULL \
                   AND to_regprocedure('{s}.kv_cas(text, bigint, bytea, bigint)') IS NOT NULL \
                   AND to_regprocedure('{s}.kv_delete(text, bigint)') IS NOT NULL \
                   AND to_regprocedure('{s}.acquire_fair(text, bytea, bigint, bytea, bigint, text)') IS NOT NULL \
                   AND to_regprocedure('{s}.release_notify(text, bytea, text)') IS NOT NULL \
                   AND to_regprocedure('{s}.acquire_marking(text, bytea, bigint, boolean)') IS NOT NULL \
                   AND to_regprocedure('{s}.wake_payload(text, bytea)') IS NOT NULL \
                   AND to_regprocedure('{s}.wake(text, bytea, text, boolean)') IS NOT NULL \
                   AND to_regprocedure('{s}.renew_many(text[], bytea[], bigint)') IS NOT NULL \
                   AND to_regclass('{s}.leaders') IS NOT NULL \
                   AND to_regprocedure('{s}.multi_acquire(text[], bytea, bigint)') IS NOT NULL \
                   AND to_regprocedure('{s}.rw_release(text, bytea)') IS NOT NULL \
                   AND to_regprocedure('{s}.rw_convert(text, bytea, \"char\", bigint)') IS NOT NULL \
                   AND to_regprocedure('{s}.forget_name(\"char\", text)') IS NOT NULL \
                   AND to_regprocedure('{s}.sweep(integer)') IS NOT NULL"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_checked() {
        for ok in ["verrou", "_x", "locks_2", &"a".repeat(63)] {
            assert!(validate_identifier(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Verrou", "1x", "a-b", "a\"b", "a b", "é", &"a".repeat(64)] {
            assert!(validate_identifier(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_schema_text_names_the_chosen_schema_only() {
        let sql = schema_sql("app_locks").expect("valid");
        assert!(!sql.contains("\"verrou\""));
        assert!(sql.contains("CREATE SCHEMA IF NOT EXISTS \"app_locks\";"));
        assert!(schema_sql("bad name").is_err());
    }
}
