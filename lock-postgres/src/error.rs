//! Mapping tokio-postgres and pool errors onto [`lock_core::Error`].

use lock_core::{Error, RefusalReason};
use tokio_postgres::error::SqlState;

/// Backend name in errors and capabilities.
pub(crate) const BACKEND: &str = "postgres";

/// The message of a [`RefusalReason::MissingSchema`]: the schema, the
/// server's (or the build's) words, and what to apply.
pub(crate) fn missing_schema(schema: &str, detail: &str) -> String {
    format!(
        "in schema {schema:?}: {detail} (build with create_schema(true), or apply lock_postgres::schema_sql({schema:?}))"
    )
}

/// A failed statement. A server error means the statement (its own
/// transaction) was rolled back: nothing applied, unless the server went
/// away or gave up mid-way (classes 08, 57, 58, XX), where a write's
/// outcome is unknown; so is every transport failure of a write.
pub(crate) fn statement_error(e: tokio_postgres::Error, write: bool, schema: &str) -> Error {
    if let Some(db) = e.as_db_error() {
        let detail = db.message().to_owned();
        let code = db.code();
        let refusal = if *code == SqlState::UNDEFINED_TABLE
            || *code == SqlState::UNDEFINED_FUNCTION
            || *code == SqlState::INVALID_SCHEMA_NAME
        {
            Some((RefusalReason::MissingSchema, missing_schema(schema, &detail)))
        } else if *code == SqlState::INSUFFICIENT_PRIVILEGE {
            Some((RefusalReason::PermissionDenied, detail))
        } else if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
            Some((RefusalReason::ReadOnly, detail))
        } else {
            None
        };
        if let Some((reason, message)) = refusal {
            return Error::refused(BACKEND, reason, message);
        }
        let class = code.code().get(..2).unwrap_or_default();
        let unknown = write && matches!(class, "08" | "57" | "58" | "XX");
        let message = format!("server error {}: {}", code.code(), db.message());
        let err = if unknown {
            Error::outcome_unknown(BACKEND, message)
        } else {
            Error::backend(BACKEND, message)
        };
        return err.with_source(e);
    }
    let message = format!("connection failed: {e}");
    let err = if write {
        Error::outcome_unknown(BACKEND, message)
    } else {
        Error::backend(BACKEND, message)
    };
    err.with_source(e)
}

/// No connection could be had: nothing was sent.
pub(crate) fn pool_error(e: deadpool_postgres::PoolError) -> Error {
    Error::backend(BACKEND, format!("no connection: {e}")).with_source(e)
}

/// A reply that does not have the shape the statement gives.
pub(crate) fn bad_reply(what: &str) -> Error {
    Error::outcome_unknown(BACKEND, format!("unexpected reply to {what}"))
}
