//! Replica acknowledgement: a write and its `WAIT` on one dedicated
//! connection (one pipeline to one node in a cluster).

use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use deadpool_redis::redis::{self, Cmd, Value};
use lock_core::raw::ttl_millis;
use lock_core::{Error, LockToken, Replication, Result};

use crate::connection::{Conn, Dedicated, pool_error};
use crate::error::{Access, BACKEND, command_error, is_readonly, op_timeout};
use crate::keys;
use crate::replies::answered;
use crate::sentinel::{Discovery, Primary};
use crate::{Call, Inner, OnShortfall, ReplicaAck};

impl Inner {
    /// Runs a write on a dedicated connection and, when `wrote` says it
    /// wrote, WAITs on that same connection. Never used before a release.
    ///
    /// Boxed: its future (a pool checkout, the write, the `WAIT`) is large,
    /// and every caller's future would otherwise carry it even when replica
    /// acknowledgement is off.
    pub(crate) async fn exec_acked(
        &self,
        op: &str,
        key: &str,
        call: Call<'_>,
        ack: &ReplicaAck,
        wrote: impl Fn(&Value) -> bool + Send,
        acquire: Option<(&LockToken, Duration)>,
    ) -> Result<(Value, Option<Replication>)> {
        Box::pin(async move {
            // Through Sentinel, a demoted primary's READONLY (nothing ran):
            // once more, on the primary found again.
            let again = matches!(self.dedicated, Some(Dedicated::Sentinel(_))).then(|| call.clone());
            match self.exec_acked_unboxed(op, key, call, ack, &wrote, acquire).await {
                Err(e) if is_readonly(&e) => match again {
                    Some(call) => self.exec_acked_unboxed(op, key, call, ack, &wrote, acquire).await,
                    None => Err(e),
                },
                other => other,
            }
        })
        .await
    }

    async fn exec_acked_unboxed(
        &self,
        op: &str,
        key: &str,
        call: Call<'_>,
        ack: &ReplicaAck,
        wrote: impl Fn(&Value) -> bool,
        acquire: Option<(&LockToken, Duration)>,
    ) -> Result<(Value, Option<Replication>)> {
        let budget = self.call_budget();
        let wait = redis::cmd("WAIT")
            .arg(ack.replicas)
            .arg(ttl_millis(ack.timeout))
            .to_owned();
        let wait_budget = ack.timeout.saturating_add(self.response_timeout);
        // Through Sentinel: the primary found last, with its own pool.
        let mut primary = None;
        let forget = |primary: &Option<(&Arc<Discovery>, Arc<Primary>)>| {
            if let Some((d, p)) = primary {
                d.forget(&p.addr);
            }
        };
        let acknowledged = match &self.dedicated {
            None => {
                let value = self.exec_tracked(op, key, Access::Write, call, acquire).await?;
                return Ok((value, None));
            }
            Some(Dedicated::Standalone(_) | Dedicated::Sentinel(_)) => {
                let checkout = self.connect_timeout.saturating_add(self.response_timeout);
                let mut conn = match &self.dedicated {
                    Some(Dedicated::Sentinel(d)) => {
                        let (conn, p) = d.ack_connection(checkout).await?;
                        primary = Some((d, p));
                        conn
                    }
                    Some(Dedicated::Standalone(pool)) => match tokio::time::timeout(checkout, pool.get()).await {
                        Ok(r) => r.map_err(pool_error)?,
                        Err(_) => return Err(pool_error("no dedicated connection within the connect timeout")),
                    },
                    _ => return Err(pool_error("no pool of write + WAIT connections")),
                };
                if let Some((token, ttl)) = acquire {
                    // A clone keeps the connection open after the pool's copy is closed.
                    self.in_flight.start(token, Conn::Single((*conn).clone()), ttl);
                }
                let reply = tokio::time::timeout(budget, call.run(&mut conn)).await;
                if let (Some((token, _)), Ok(r)) = (acquire, &reply)
                    && answered(r)
                {
                    self.in_flight.settled(token);
                }
                let value = match reply {
                    Ok(Ok(v)) => v,
                    Ok(Err(e)) => {
                        if e.code().is_none() {
                            drop(deadpool_redis::Connection::take(conn));
                        }
                        if e.code().is_none_or(|c| c == "READONLY") {
                            forget(&primary);
                        }
                        return Err(command_error(e, op, key, Access::Write));
                    }
                    Err(_) => {
                        drop(deadpool_redis::Connection::take(conn));
                        forget(&primary);
                        return Err(op_timeout(op, key, budget, Access::Write));
                    }
                };
                if !wrote(&value) {
                    return Ok((value, None));
                }
                let acked = match tokio::time::timeout(wait_budget, wait.query_async::<i64>(&mut conn)).await {
                    Ok(Ok(n)) => n,
                    other => {
                        tracing::debug!(key, ok = other.is_ok(), "WAIT failed; counting no acknowledgement");
                        drop(deadpool_redis::Connection::take(conn));
                        0
                    }
                };
                (value, acked)
            }
            Some(Dedicated::Cluster(pool)) => {
                let mut conn = match tokio::time::timeout(
                    self.connect_timeout
                        .saturating_mul(2)
                        .saturating_add(self.response_timeout),
                    pool.get(),
                )
                .await
                {
                    Ok(r) => r.map_err(pool_error)?,
                    Err(_) => return Err(pool_error("no dedicated cluster connection within the connect timeout")),
                };
                if let Some((token, ttl)) = acquire {
                    self.in_flight.start(token, Conn::Cluster((*conn).clone()), ttl);
                }
                // Write and WAIT in one pipeline to one node: WAIT then runs on
                // the connection that made the write, even after a redirect
                // or a reconnect (alone, it could land on a connection that
                // wrote nothing and confirm at once).
                let both = budget + wait_budget;
                let reply = tokio::time::timeout(both, cluster_write_then_wait(&mut conn, &call, &wait, key)).await;
                if let (Some((token, _)), Ok(r)) = (acquire, &reply)
                    && answered(r)
                {
                    self.in_flight.settled(token);
                }
                let (value, waited) = match reply {
                    Ok(Ok(v)) => v,
                    Ok(Err(e)) => {
                        if e.code().is_none() {
                            drop(deadpool_redis::cluster::Connection::take(conn));
                        }
                        return Err(command_error(e, op, key, Access::Write));
                    }
                    Err(_) => {
                        drop(deadpool_redis::cluster::Connection::take(conn));
                        return Err(op_timeout(op, key, both, Access::Write));
                    }
                };
                if !wrote(&value) {
                    return Ok((value, None));
                }
                let acked = match waited {
                    Value::Int(n) => n,
                    other => {
                        tracing::debug!(key, reply = ?other, "WAIT failed; counting no acknowledgement");
                        0
                    }
                };
                (value, acked)
            }
        };
        let (value, acked) = acknowledged;
        let acked = u32::try_from(acked.max(0)).unwrap_or(u32::MAX);
        let replication = if acked >= ack.replicas {
            Replication::Confirmed { replicas: acked }
        } else {
            Replication::Unconfirmed {
                acknowledged: acked,
                requested: ack.replicas,
            }
        };
        Ok((value, Some(replication)))
    }

    /// Runs a versioned write, with WAIT if configured; a shortfall fails
    /// (outcome unknown: the write is on the primary only) or warns.
    pub(crate) async fn versioned_write(
        &self,
        op: &str,
        key: &str,
        call: Call<'_>,
        wrote: fn(&Value) -> bool,
    ) -> Result<Value> {
        let Some(ack) = &self.replica_ack else {
            return self.exec(op, key, Access::Write, call).await;
        };
        let (value, replication) = self.exec_acked(op, key, call, ack, wrote, None).await?;
        if let Some(Replication::Unconfirmed {
            acknowledged,
            requested,
        }) = replication
        {
            let message = format!(
                "{op} on {key:?} was written, but only {acknowledged} of {requested} replicas acknowledged it within \
                 {:?}: a failover could lose it",
                ack.timeout
            );
            match ack.on_shortfall {
                OnShortfall::MarkUnconfirmed => tracing::warn!(key, "{message}"),
                _ => return Err(Error::outcome_unknown(BACKEND, message)),
            }
        }
        Ok(value)
    }
}

/// Sends `call` and `wait` as one pipeline to the master of `key`'s slot,
/// following one ASK or MOVED redirect of the write (to the node that will
/// make it, with `ASKING` for ASK), and re-sending as EVAL after NOSCRIPT.
/// The write's reply (an error reply as `Err`) and WAIT's reply.
pub(crate) async fn cluster_write_then_wait(
    conn: &mut deadpool_redis::redis::cluster_async::ClusterConnection,
    call: &Call<'_>,
    wait: &Cmd,
    key: &str,
) -> redis::RedisResult<(Value, Value)> {
    let mut route = SingleNodeRoutingInfo::SpecificNode(Route::with_slot(keys::slot(key), SlotAddr::Master));
    let mut asking = false;
    let mut eval = false;
    for _ in 0..3 {
        let mut pipe = redis::pipe();
        if asking {
            pipe.add_command(redis::cmd("ASKING"));
        }
        pipe.add_command(match call {
            Call::Script { script, keys, args } => script.cmd(eval, keys, args),
            Call::Command(cmd) => cmd.clone(),
        });
        pipe.add_command(wait.clone());
        let count = if asking { 3 } else { 2 };
        let mut values = conn.route_pipeline(pipe, 0, count, route.clone()).await?;
        let (Some(waited), Some(written)) = (values.pop(), values.pop()) else {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "write + WAIT pipeline",
                "short reply".to_owned(),
            )));
        };
        match written.extract_error() {
            Ok(value) => return Ok((value, waited)),
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) && !eval => eval = true,
            Err(e) => {
                let Some((addr, _)) = e.redirect_node() else {
                    return Err(e);
                };
                let Some((host, port)) = addr.rsplit_once(':').and_then(|(h, p)| Some((h, p.parse().ok()?))) else {
                    return Err(e);
                };
                asking = e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::Ask);
                route = SingleNodeRoutingInfo::ByAddress {
                    host: host.to_owned(),
                    port,
                };
            }
        }
    }
    Err(redis::RedisError::from((
        redis::ErrorKind::Client,
        "write + WAIT pipeline",
        format!("too many redirects for {key:?}"),
    )))
}
