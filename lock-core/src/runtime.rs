//! The one check every public call that needs tokio makes first: timers,
//! renewals and background clean-up releases all run on the caller's
//! runtime, so a call made outside one gets a typed error, never a panic
//! and never a grant that nobody could release.

use crate::error::{Error, Result};

/// The current tokio runtime.
///
/// # Errors
/// [`Error::InvalidArgument`] outside a tokio runtime.
pub(crate) fn current() -> Result<tokio::runtime::Handle> {
    tokio::runtime::Handle::try_current().map_err(|_| {
        Error::invalid(
            "verrou must be called from inside a tokio runtime (its timeouts, renewals and clean-up releases run there)",
        )
    })
}
