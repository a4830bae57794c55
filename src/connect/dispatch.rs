//! [`connect`] and [`check_url`]: the URL's scheme picks the backend crate
//! (through [`super::table`]), which reads the rest.

use lock_core::Result;

use super::backend::Backend;
use super::table::TABLE;

/// Parse `url`, connect the backend it names (eagerly: a wrong address or
/// password fails here) and return it.
///
/// Starting during an outage: a single server or cluster that is down
/// fails here with [`lock_core::Error::Backend`] — at once when the
/// connection is refused, after the backend's connect timeout when the server accepts
/// but does not answer (paused, overloaded); nothing is retried in the
/// background, so retry `connect` (or restart the process). A `redlock://`
/// URL starts once a quorum of its nodes has connected (or failed its first
/// attempt): the nodes that failed keep connecting in the background, count
/// as failed votes until they answer, and are used from then on
/// (`verrou::redlock::LazyNode`); fewer than a quorum is an
/// [`lock_core::Error::Backend`] naming each node's failure.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> verrou::Result<()> {
/// let backend = verrou::connect("memory://").await?;
/// let locks = backend.manager(verrou::LockOptions::default())?;
/// locks.lock("job").await?.release().await?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`lock_core::Error::InvalidArgument`] for a malformed URL or parameter
/// (the message says what to fix); [`lock_core::Error::Unsupported`] for a
/// scheme whose Cargo feature is off (the message names the feature);
/// [`lock_core::Error::Backend`] when a server cannot be reached or refuses
/// the credentials.
///
/// # Cancel safety
/// Cancelling drops the connections made so far; nothing is written.
pub async fn connect(url: &str) -> Result<Backend> {
    let connected = TABLE.connect(url).await?;
    Ok(Backend::from(connected))
}

/// Check `url` without connecting: the same errors as [`connect`] for
/// malformed URLs, out-of-range or conflicting parameters and disabled
/// features.
///
/// # Errors
/// As [`connect`], except [`lock_core::Error::Backend`].
pub fn check_url(url: &str) -> Result<()> {
    TABLE.check(url)
}
