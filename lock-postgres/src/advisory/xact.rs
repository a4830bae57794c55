//! Transaction-scoped advisory locks on the caller's own transaction: the
//! form to reach for when the lock guards a change to the same database.
//! The lock is released by the transaction's commit or rollback, so the
//! change and the lock end together; no session is kept, and it works
//! through PgBouncer in transaction mode.

use std::time::Duration;

use lock_core::raw::validate_key;
use lock_core::{Error, Result};
use tokio_postgres::GenericClient;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use super::{BACKEND, advisory_key};

/// Takes `key`'s transaction-scoped advisory lock
/// (`pg_try_advisory_xact_lock` of [`advisory_key`]) if it is free, on
/// `tx`, which should be a transaction (`tokio_postgres::Transaction`, or
/// a `deadpool_postgres` one): outside one, the lock would end with the
/// statement's own implicit transaction at once. `true` when taken; it is
/// held until `tx` commits or rolls back. Excludes the same key's
/// [`AdvisoryBackend`](super::AdvisoryBackend) locks (one `bigint` space).
///
/// # Errors
/// [`Error::InvalidArgument`] for a bad key; [`Error::Backend`] when the
/// statement fails (the transaction is then aborted: roll it back).
///
/// # Cancel safety
/// Dropping the future leaves the lock taken or not; either way it ends
/// with the transaction.
pub async fn try_xact_lock<C: GenericClient + Sync>(tx: &C, key: &str) -> Result<bool> {
    validate_key(key)?;
    let row = tx
        .query_one("SELECT pg_try_advisory_xact_lock($1::int8)", &[&advisory_key(key)])
        .await
        .map_err(|e| xact_error(e, key, Duration::ZERO))?;
    row.try_get(0)
        .map_err(|_| Error::backend(BACKEND, "unexpected reply to pg_try_advisory_xact_lock"))
}

/// Waits up to `timeout` for `key`'s transaction-scoped advisory lock
/// (`pg_advisory_xact_lock` under `lock_timeout` set `LOCAL` for the wait,
/// then put back to the transaction's own value), on `tx`, which should be
/// a transaction (see [`try_xact_lock`]). Held until `tx` commits or rolls
/// back. The wait is the server's: no polling, and waiters are granted in
/// the server's lock-queue order.
///
/// # Errors
/// [`Error::InvalidArgument`] for a bad key or a timeout below one
/// millisecond or above [`MAX_TIMEOUT`](lock_core::raw::MAX_TIMEOUT);
/// [`Error::Timeout`] when the lock was not granted within `timeout`;
/// [`Error::Backend`] when a statement fails. After either error the
/// transaction is aborted: roll it back.
///
/// # Cancel safety
/// Dropping the future while the server waits leaves the wait running on
/// the connection until it is granted or times out (the transaction is the
/// caller's: roll it back or drop it); nothing outlives the transaction.
pub async fn xact_lock<C: GenericClient + Sync>(tx: &C, key: &str, timeout: Duration) -> Result<()> {
    validate_key(key)?;
    if timeout < Duration::from_millis(1) || timeout > lock_core::raw::MAX_TIMEOUT {
        return Err(Error::invalid(format!(
            "the wait for a transaction lock must be from 1 ms to {} days, got {timeout:?}",
            lock_core::raw::MAX_TIMEOUT.as_secs() / 86_400
        )));
    }
    let ms = format!("{}ms", timeout.as_millis());
    let id = advisory_key(key);
    // Pipelined: the transaction's own lock_timeout, the wait's, the wait.
    let (set_params, wait_params): ([&(dyn ToSql + Sync); 1], [&(dyn ToSql + Sync); 1]) = ([&ms], [&id]);
    let (before, set, wait) = futures::join!(
        tx.query_one("SELECT current_setting('lock_timeout')", &[]),
        tx.query_one("SELECT set_config('lock_timeout', $1, true)", &set_params),
        tx.execute("SELECT pg_advisory_xact_lock($1::int8)", &wait_params),
    );
    let map = |e| xact_error(e, key, timeout);
    let before: String = before.map_err(map)?.try_get(0).map_err(|_| bad_reply())?;
    set.map_err(map)?;
    wait.map_err(map)?;
    tx.query_one("SELECT set_config('lock_timeout', $1, true)", &[&before])
        .await
        .map_err(map)?;
    Ok(())
}

fn bad_reply() -> Error {
    Error::backend(BACKEND, "unexpected reply to a transaction lock statement")
}

/// `lock_timeout` is the wait running out; anything else a failed statement.
fn xact_error(e: tokio_postgres::Error, key: &str, waited: Duration) -> Error {
    if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
        return Error::Timeout {
            key: key.to_owned(),
            waited,
        };
    }
    let message = match e.as_db_error() {
        Some(db) => format!("server error {}: {}", db.code().code(), db.message()),
        None => format!("connection failed: {e}"),
    };
    Error::backend(BACKEND, message).with_source(e)
}
