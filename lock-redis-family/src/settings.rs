//! The settings both Redis-family builders share — timeouts, replica
//! acknowledgement, the connections kept for it, release notifications —
//! with one set of defaults and one check.

use std::time::Duration;

use lock_core::{Error, ReplicaAck, Result};

/// Default time to open a connection (TCP, TLS, `HELLO`/`AUTH`): 2 s, as on
/// the PostgreSQL backend.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Default time to wait for one reply: 2 s, the lock manager's default
/// `op_timeout` (which bounds every call the manager makes anyway), as on
/// the PostgreSQL backend.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

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

    /// Refuses zero timeouts, an invalid replica acknowledgement and no
    /// connection for it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the setting.
    pub fn check(&self) -> Result<()> {
        if self.connect_timeout.is_zero() {
            return Err(Error::invalid("connect_timeout must be above zero"));
        }
        if self.response_timeout.is_zero() {
            return Err(Error::invalid("response_timeout must be above zero"));
        }
        if let Some(ack) = &self.replica_ack {
            ack.validate()?;
        }
        if self.ack_connections == 0 {
            return Err(Error::invalid("ack_connections must be at least 1"));
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
        ] {
            let e = bad.check().err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains("must be"), "{bad:?}: {e}");
        }
    }
}
