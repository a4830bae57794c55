//! Replica acknowledgement ([`crate::ReplicaAck`]): the write connection a
//! `WAIT` must follow, the `WAIT` itself, and the shortfall rules for
//! acquires, renewals and versioned writes.

use fred::clients::Client;
use fred::interfaces::{ClientLike, EventInterface};
use fred::types::{ClusterHash, CustomCommand, Value};
use fred::util::redis_keyslot;
use lock_core::RenewOutcome;
use lock_core::{Error, LockBackend, LockToken, OnShortfall, ReplicaAck, Replication, Result};

use crate::TairBackend;
use crate::conn::{NAME, OptionsClient};
use crate::replies;

/// What a write connection is: the shared one, or a dedicated WAIT one.
pub(crate) struct Writer<'a> {
    pub(crate) client: &'a OptionsClient,
    pub(crate) ack: Option<&'a ReplicaAck>,
    /// With `ack`: reconnects of `client` since before the write. A `WAIT`
    /// on a connection that has run no command yet has no write offset and
    /// confirms at once; fred's connection set-up (PING, CLIENT ID, INFO)
    /// gives a new connection the primary's current offset on Redis 7.0, so
    /// this is a defence for servers or clients that do otherwise
    /// (`tests/it/wait_reconnect.rs` checks the end-to-end behaviour).
    reconnects: Option<tokio::sync::broadcast::Receiver<fred::types::config::Server>>,
}

impl Writer<'_> {
    /// True when the connection reconnected since the writer was taken.
    pub(crate) fn reconnected(&mut self) -> bool {
        self.reconnects
            .as_mut()
            .is_some_and(|rx| !matches!(rx.try_recv(), Err(tokio::sync::broadcast::error::TryRecvError::Empty)))
    }
}

impl TairBackend {
    pub(crate) fn writer(&self) -> Writer<'_> {
        match &self.inner.ack {
            Some((clients, ack)) => {
                let client = clients.next();
                Writer {
                    client,
                    ack: Some(ack),
                    reconnects: Some(client.reconnect_rx()),
                }
            }
            None => Writer {
                client: self.inner.commands.next(),
                ack: None,
                reconnects: None,
            },
        }
    }

    /// `WAIT replicas timeout` on the writer's connection, routed to `key`'s
    /// node. A failed WAIT, or one after the connection was replaced since
    /// the write, counts as no acknowledgement.
    pub(crate) async fn wait_for_replicas(&self, writer: &mut Writer<'_>, key: &str, ack: &ReplicaAck) -> u32 {
        let acknowledged = self.wait_on(writer.client, key, ack).await;
        if acknowledged > 0 && writer.reconnected() {
            tracing::debug!(
                key,
                "the write connection reconnected between the write and WAIT; counted as no acknowledgement"
            );
            return 0;
        }
        acknowledged
    }

    pub(crate) async fn wait_on(&self, client: &Client, key: &str, ack: &ReplicaAck) -> u32 {
        let slot = redis_keyslot(key.as_bytes());
        let mut options = self.inner.options.clone();
        options.timeout = Some(ack.timeout.saturating_add(self.inner.response_timeout));
        let timeout_ms = i64::try_from(ack.timeout.as_millis()).unwrap_or(i64::MAX).max(1);
        let command = CustomCommand::new_static("WAIT", ClusterHash::Custom(slot), false);
        let args: Vec<Value> = vec![i64::from(ack.replicas).into(), timeout_ms.into()];
        match client.with_options(&options).custom::<Value, _>(command, args).await {
            Ok(reply) => replies::wait(&reply).unwrap_or_else(|| {
                tracing::warn!(?reply, "unexpected WAIT reply; counted as no acknowledgement");
                0
            }),
            Err(e) => {
                tracing::debug!(key, error = %e, "WAIT failed; counted as no acknowledgement");
                0
            }
        }
    }

    /// After a batched renewal: one WAIT per server written to (one on a
    /// single server), and the shortfall policy for the keys it renewed.
    pub(crate) async fn confirm_renewals(
        &self,
        writer: &mut Writer<'_>,
        ack: &ReplicaAck,
        items: &[(&str, &LockToken)],
        chunks: &[Vec<usize>],
        outcomes: &mut [Vec<Result<RenewOutcome>>],
    ) {
        let renewed: Vec<usize> = outcomes
            .iter()
            .enumerate()
            .filter(|(_, o)| o.iter().any(|r| matches!(r, Ok(RenewOutcome::Renewed))))
            .map(|(c, _)| c)
            .collect();
        let key_of = |c: usize| {
            chunks
                .get(c)
                .and_then(|chunk| chunk.first())
                .map_or("", |&i| items[i].0)
        };
        // A chunk is one hash slot: on a cluster, WAIT on each chunk's node
        // (chunks of one node are waited on more than once, concurrently).
        let waits: Vec<usize> = if self.inner.clustered {
            renewed.clone()
        } else {
            renewed.first().copied().into_iter().collect()
        };
        let client = writer.client;
        let acks = futures::future::join_all(waits.iter().map(|&c| self.wait_on(client, key_of(c), ack))).await;
        let replaced = writer.reconnected();
        for &c in &renewed {
            let acknowledged = if replaced {
                0
            } else if self.inner.clustered {
                waits
                    .iter()
                    .position(|&w| w == c)
                    .and_then(|p| acks.get(p).copied())
                    .unwrap_or(0)
            } else {
                acks.first().copied().unwrap_or(0)
            };
            let (Some(chunk), Some(results)) = (chunks.get(c), outcomes.get_mut(c)) else {
                continue;
            };
            for (&i, result) in chunk.iter().zip(results.iter_mut()) {
                if matches!(result, Ok(RenewOutcome::Renewed))
                    && let Err(e) = renewal_shortfall(ack, acknowledged, items[i].0)
                {
                    *result = Err(e);
                }
            }
        }
    }

    /// After a granted acquire: WAIT, and apply the shortfall policy.
    pub(crate) async fn confirm_acquire(
        &self,
        writer: &mut Writer<'_>,
        key: &str,
        token: &LockToken,
    ) -> Result<Replication> {
        let Some(ack) = writer.ack else {
            return Ok(Replication::NotChecked);
        };
        let acknowledged = self.wait_for_replicas(writer, key, ack).await;
        if acknowledged >= ack.replicas {
            return Ok(Replication::Confirmed { replicas: acknowledged });
        }
        match ack.on_shortfall {
            OnShortfall::MarkUnconfirmed => Ok(Replication::Unconfirmed {
                acknowledged,
                requested: ack.replicas,
            }),
            _ => {
                let message = format!(
                    "only {acknowledged} of {} replicas acknowledged the acquire of {key:?} within {:?}",
                    ack.replicas, ack.timeout
                );
                match self.release(key, token).await {
                    Ok(_) => Err(Error::backend(NAME, format!("{message}; released it"))),
                    Err(e) => {
                        Err(Error::outcome_unknown(NAME, format!("{message}; releasing it failed")).with_source(e))
                    }
                }
            }
        }
    }

    /// After a successful versioned write: WAIT, and apply the shortfall policy.
    pub(crate) async fn confirm_write(&self, writer: &mut Writer<'_>, what: &str, key: &str) -> Result<()> {
        let Some(ack) = writer.ack else { return Ok(()) };
        let acknowledged = self.wait_for_replicas(writer, key, ack).await;
        if acknowledged >= ack.replicas {
            return Ok(());
        }
        let message = format!(
            "{what} on {key:?} is written on the primary, but only {acknowledged} of {} replicas acknowledged it \
             within {:?}: a failover could lose it",
            ack.replicas, ack.timeout
        );
        match ack.on_shortfall {
            OnShortfall::MarkUnconfirmed => {
                tracing::warn!("{message}");
                Ok(())
            }
            _ => Err(Error::outcome_unknown(NAME, message)),
        }
    }
}

/// A renewal on the primary that `acknowledged` replicas have (the rule
/// of [`lock_redis_family::shortfall::renewal_shortfall`]).
pub(crate) fn renewal_shortfall(ack: &ReplicaAck, acknowledged: u32, key: &str) -> Result<()> {
    lock_redis_family::shortfall::renewal_shortfall(NAME, key, acknowledged, ack)
}
