//! The settings both Redis-family builders share — timeouts, replica
//! acknowledgement, the connections kept for it, release notifications —
//! with one set of defaults and one check.

use std::time::Duration;

use lock_core::raw::MAX_TIMEOUT;
use lock_core::{Error, ReplicaAck, Result};

/// Default time to open a connection (TCP, TLS, `HELLO`/`AUTH`): 2 s, as on
/// the PostgreSQL backend.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Default time to wait for one reply: 2 s, the lock manager's default
/// `op_timeout` (which bounds every call the manager makes anyway), as on
/// the PostgreSQL backend.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Most connections dedicated to write + `WAIT` pairs (`ack_connections`):
/// each is a server connection (a Redis server accepts 10 000 by default),
/// and the pools size their slot lists by it.
pub const MAX_ACK_CONNECTIONS: usize = 1024;

/// The range of `connect_timeout` and `response_timeout`: above zero and at
/// most [`MAX_TIMEOUT`] (the bound of the manager's `op_timeout`, which cuts
/// every call anyway), so the sums the backends wait for (`2 × connect +
/// response + WAIT`) stay far from overflowing.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `name` and the range.
pub fn check_timeout(name: &str, timeout: Duration) -> Result<()> {
    if timeout.is_zero() || timeout > MAX_TIMEOUT {
        return Err(Error::invalid(format!(
            "{name} must be above zero and at most {} days, got {timeout:?}",
            MAX_TIMEOUT.as_secs() / 86_400
        )));
    }
    Ok(())
}

/// A Redis-family builder's shared settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Time to open a connection.
    pub connect_timeout: Duration,
    /// Time to wait for each reply.
    pub response_timeout: Duration,
    /// `WAIT` after writes, when set.
    pub replica_ack: Option<ReplicaAck>,
    /// Connections dedicated to write + `WAIT` pairs.
    pub ack_connections: usize,
    /// Release notifications: `None` leaves them on where the backend can
    /// offer them (one server), off elsewhere.
    pub release_notifications: Option<bool>,
}

impl Settings {
    /// The defaults, with the backend's own number of `WAIT` connections.
    pub fn new(ack_connections: usize) -> Self {
        Settings {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            replica_ack: None,
            ack_connections,
            release_notifications: None,
        }
    }

    /// Refuses timeouts out of [`check_timeout`]'s range, an invalid
    /// replica acknowledgement, and `ack_connections` outside 1 ..=
    /// [`MAX_ACK_CONNECTIONS`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the setting and its range.
    pub fn check(&self) -> Result<()> {
        check_timeout("connect_timeout", self.connect_timeout)?;
        check_timeout("response_timeout", self.response_timeout)?;
        if let Some(ack) = &self.replica_ack {
            ack.validate()?;
        }
        if !(1..=MAX_ACK_CONNECTIONS).contains(&self.ack_connections) {
            return Err(Error::invalid(format!(
                "ack_connections must be from 1 to {MAX_ACK_CONNECTIONS}, got {}",
                self.ack_connections
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_timeouts_and_no_ack_connection_are_refused() {
        assert!(Settings::new(2).check().is_ok());
        for bad in [
            Settings {
                connect_timeout: Duration::ZERO,
                ..Settings::new(2)
            },
            Settings {
                response_timeout: Duration::ZERO,
                ..Settings::new(2)
            },
            Settings::new(0),
            Settings::new(MAX_ACK_CONNECTIONS + 1),
            Settings::new(usize::MAX),
            Settings {
                connect_timeout: Duration::MAX,
                ..Settings::new(2)
            },
            Settings {
                response_timeout: MAX_TIMEOUT + Duration::from_nanos(1),
                ..Settings::new(2)
            },
        ] {
            let e = bad.check().err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains("must be"), "{bad:?}: {e}");
        }
    }
}
