//! The lease backend's replies as lock outcomes.

use std::time::Duration;

use lock_core::{AcquireOutcome, FencingToken, Lease, ReleaseOutcome, RenewOutcome, Result};
use tokio_postgres::Row;

use crate::error::bad_reply;

/// The one small integer a release or renew statement answers.
pub(crate) fn outcome_code(rows: &[Row], what: &str) -> Result<i32> {
    rows.first()
        .and_then(|r| r.try_get::<_, i32>(0).ok())
        .ok_or_else(|| bad_reply(what))
}

pub(crate) fn release_outcome(code: i32) -> ReleaseOutcome {
    match code {
        0 => ReleaseOutcome::Released,
        1 => ReleaseOutcome::HeldByOther,
        _ => ReleaseOutcome::Missing,
    }
}

pub(crate) fn renew_outcome(code: i32) -> RenewOutcome {
    match code {
        0 => RenewOutcome::Renewed,
        1 => RenewOutcome::HeldByOther,
        _ => RenewOutcome::Missing,
    }
}

/// An acquire's reply: a fencing token when taken, else the holder's
/// remaining TTL (no row when the holder's row went away meanwhile).
pub(crate) fn acquire_outcome(rows: &[Row]) -> Result<AcquireOutcome> {
    let Some(row) = rows.first() else {
        return Ok(AcquireOutcome::Held { retry_after: None });
    };
    let fence: Option<i64> = row.try_get(0).map_err(|_| bad_reply("acquire"))?;
    if let Some(fence) = fence {
        let fence = u64::try_from(fence).map_err(|_| bad_reply("acquire"))?;
        return Ok(AcquireOutcome::Acquired(
            Lease::new().with_fencing_token(Some(FencingToken(fence))),
        ));
    }
    let left: Option<i64> = row.try_get(1).map_err(|_| bad_reply("acquire"))?;
    Ok(AcquireOutcome::Held {
        retry_after: left.and_then(|ms| u64::try_from(ms).ok()).map(Duration::from_millis),
    })
}
