//! Mapping tokio-postgres and pool errors onto [`lock_core::Error`].

use lock_core::Error;
use tokio_postgres::error::SqlState;

/// Backend name in errors and capabilities.
pub(crate) const BACKEND: &str = "postgres";

/// Why the server refused the backend's statements outright: the setup is
/// wrong, and retrying will not help. Carried as the source of an
/// [`Error::Backend`]; [`refusal`] finds it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The schema's tables or functions are missing (not created, or
    /// another schema name).
    #[error("the lock tables are missing in schema {schema:?}: {detail}")]
    MissingSchema {
        /// The configured schema.
        schema: String,
        /// The server's message.
        detail: String,
    },
    /// The database user may not read or write the tables (or create them).
    #[error("permission denied: {detail}")]
    MissingPrivilege {
        /// The server's message.
        detail: String,
    },
    /// The server is a read-only standby (or the session is read-only).
    #[error("the server is read-only (a standby?): {detail}")]
    ReadOnly {
        /// The server's message.
        detail: String,
    },
}

/// The [`Refusal`] behind `err`, if the server refused the setup.
pub fn refusal(err: &Error) -> Option<&Refusal> {
    let mut source = std::error::Error::source(err);
    while let Some(e) = source {
        if let Some(r) = e.downcast_ref::<Refusal>() {
            return Some(r);
        }
        source = e.source();
    }
    None
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
            Some(Refusal::MissingSchema {
                schema: schema.to_owned(),
                detail: format!(
                    "{detail} (build with create_schema(true), or apply lock_postgres::schema_sql({schema:?}))"
                ),
            })
        } else if *code == SqlState::INSUFFICIENT_PRIVILEGE {
            Some(Refusal::MissingPrivilege { detail })
        } else if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
            Some(Refusal::ReadOnly { detail })
        } else {
            None
        };
        if let Some(r) = refusal {
            return Error::backend(BACKEND, r.to_string()).with_source(r);
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
