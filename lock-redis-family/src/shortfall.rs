//! The rule both Redis-family backends apply to a renewal under replica
//! acknowledgement (`WAIT` after the write).

use lock_core::{Error, Result};
use lock_core::{RenewOutcome, ReplicaAck, Replication};

/// A renewal of `key` on the primary that `acknowledged` replicas have:
/// below `ack.replicas`, an outcome-unknown error of `backend`, whatever
/// [`ReplicaAck::on_shortfall`] says. The guard's deadline then stays where
/// the last confirmed grant or renewal put it: a failover would bring back
/// the older expiry, which the holder must not outlive.
///
/// # Errors
/// [`Error::Backend`] (outcome unknown) for a shortfall.
pub fn renewal_shortfall(backend: &str, key: &str, acknowledged: u32, ack: &ReplicaAck) -> Result<()> {
    if acknowledged >= ack.replicas {
        return Ok(());
    }
    Err(Error::outcome_unknown(
        backend,
        format!(
            "renewed {key:?} on the primary, but only {acknowledged} of {} replicas acknowledged within {:?}: not \
             counted as renewed (a failover would bring back the older expiry)",
            ack.replicas, ack.timeout
        ),
    ))
}

/// `outcome` of a renewal of `key`, unless it renewed and `WAIT` counted
/// too few replicas (`replication`, under `ack`): then
/// [`renewal_shortfall`]'s error.
///
/// # Errors
/// As [`renewal_shortfall`].
pub fn counted_renewal(
    backend: &str,
    key: &str,
    outcome: RenewOutcome,
    replication: Option<Replication>,
    ack: Option<&ReplicaAck>,
) -> Result<RenewOutcome> {
    match (outcome, replication, ack) {
        (RenewOutcome::Renewed, Some(Replication::Unconfirmed { acknowledged, .. }), Some(ack)) => {
            renewal_shortfall(backend, key, acknowledged, ack).map(|()| outcome)
        }
        _ => Ok(outcome),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn only_a_renewal_short_of_replicas_is_refused() {
        let ack = ReplicaAck::new(2, Duration::from_millis(100));
        let short = Some(Replication::Unconfirmed {
            acknowledged: 1,
            requested: 2,
        });
        let counted = counted_renewal("b", "k", RenewOutcome::Renewed, short, Some(&ack));
        assert!(counted.as_ref().is_err_and(Error::is_outcome_unknown), "{counted:?}");
        let confirmed = Some(Replication::Confirmed { replicas: 2 });
        assert!(counted_renewal("b", "k", RenewOutcome::Renewed, confirmed, Some(&ack)).is_ok());
        // Nothing renewed: nothing to confirm.
        assert!(counted_renewal("b", "k", RenewOutcome::Missing, short, Some(&ack)).is_ok());
        assert!(renewal_shortfall("b", "k", 2, &ack).is_ok());
        assert!(renewal_shortfall("b", "k", 1, &ack).is_err());
    }
}
