//! Through Redis Sentinel: the sentinels' `+switch-master` announcements,
//! followed so that the backend's clients leave a primary the sentinels
//! have replaced. fred finds the primary again after a lost connection or
//! a `READONLY` reply only; a primary paused (or cut off) past a failover
//! that comes back answers as a primary until the sentinels demote it,
//! which they do only seconds after they see it again, and every write
//! there meanwhile fails its replica acknowledgement (or, without one, is
//! lost with it).

use std::sync::Weak;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
use fred::types::Builder;
use fred::types::config::{Config, ConnectionConfig, Server, ServerConfig};
use tokio::sync::broadcast::error::RecvError;
use tokio::task::AbortHandle;

use crate::notify::Notifier;

/// The channel on which sentinels announce a new primary.
const SWITCH_MASTER: &str = "+switch-master";
/// Pause before subscribing again after a sentinel's connection ended.
const RESUBSCRIBE: Duration = Duration::from_millis(500);

/// The subscription's task, stopped when this is dropped (with the backend).
#[derive(Debug)]
pub(crate) struct Follower(AbortHandle);

impl Drop for Follower {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// For a Sentinel URL (`redis-sentinel://…` as fred reads it), subscribes
/// to `+switch-master` on the first sentinel that takes the subscription
/// (the next one when its connection ends), in a task of its own; when the
/// sentinels announce a new primary for the URL's master, every client of
/// `clients` reconnects (through the sentinels, to the new primary), and
/// so does the pub/sub connection of `notifier`, if it is open.
/// `None` for any other URL.
pub(crate) fn follow(
    url: &str,
    clients: Vec<Client>,
    notifier: Option<Weak<Notifier>>,
    timeout: Duration,
) -> Option<Follower> {
    let config = Config::from_url(url).ok()?;
    let ServerConfig::Sentinel {
        hosts, service_name, ..
    } = &config.server
    else {
        return None;
    };
    let sentinels: Vec<Config> = hosts.iter().map(|server| sentinel_config(&config, server)).collect();
    let task = tokio::spawn(run(sentinels, service_name.clone(), clients, notifier, timeout));
    Some(Follower(task.abort_handle()))
}

/// One sentinel's connection settings: its address, the sentinels'
/// credentials, the URL's TLS.
fn sentinel_config(config: &Config, server: &Server) -> Config {
    let (username, password) = match &config.server {
        ServerConfig::Sentinel { username, password, .. } => (username.clone(), password.clone()),
        _ => (None, None),
    };
    Config {
        server: ServerConfig::Centralized { server: server.clone() },
        username,
        password,
        #[cfg(feature = "tls")]
        tls: config.tls.clone(),
        ..Config::default()
    }
}

async fn run(
    sentinels: Vec<Config>,
    master: String,
    clients: Vec<Client>,
    notifier: Option<Weak<Notifier>>,
    timeout: Duration,
) {
    let mut next = 0;
    loop {
        let Some(config) = sentinels.get(next) else { return };
        next = (next + 1) % sentinels.len();
        // No reconnect policy: its connection task ends with the connection.
        let built = Builder::from_config(config.clone())
            .with_connection_config(|c: &mut ConnectionConfig| {
                c.connection_timeout = timeout;
                c.internal_command_timeout = timeout;
            })
            .build();
        if let Ok(sub) = built {
            let mut messages = sub.message_rx();
            if let Ok(Ok(mut connection)) = tokio::time::timeout(timeout, sub.init()).await {
                if let Ok(Ok(())) = tokio::time::timeout(timeout, sub.subscribe(SWITCH_MASTER)).await {
                    loop {
                        tokio::select! {
                            _ = &mut connection => break,
                            msg = messages.recv() => match msg {
                                Ok(msg) => {
                                    let payload = msg.value.as_string().unwrap_or_default();
                                    if msg.channel == SWITCH_MASTER && is_switch_of(&payload, &master) {
                                        reconnect(&clients, notifier.as_ref(), timeout).await;
                                    }
                                }
                                Err(RecvError::Lagged(_)) => {}
                                Err(RecvError::Closed) => break,
                            },
                        }
                    }
                }
                let _ = tokio::time::timeout(timeout, sub.quit()).await;
            }
        }
        tokio::time::sleep(RESUBSCRIBE).await;
    }
}

/// Every client reconnects (each bounded): fred asks the sentinels for the
/// primary and checks its `ROLE` on the new connection. The notifier's
/// pub/sub connection too, if open: its reader subscribes again after the
/// reconnect, on the new primary, where releases publish.
async fn reconnect(clients: &[Client], notifier: Option<&Weak<Notifier>>, timeout: Duration) {
    tracing::info!("the sentinels announced a new primary: reconnecting");
    let bound = timeout.saturating_mul(2);
    let notifier = notifier.and_then(Weak::upgrade);
    let pubsub = notifier.as_ref().and_then(|n| n.open_client());
    futures::future::join_all(
        clients
            .iter()
            .chain(pubsub)
            .map(|c| tokio::time::timeout(bound, c.force_reconnection())),
    )
    .await;
}

/// Whether a `+switch-master` payload (`<name> <old-ip> <old-port>
/// <new-ip> <new-port>`) is about `master`.
fn is_switch_of(payload: &str, master: &str) -> bool {
    let words: Vec<&str> = payload.split_whitespace().collect();
    words.len() == 5 && words[0] == master
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_is_about_its_own_master_only() {
        assert!(is_switch_of("verrou 127.0.0.1 7001 127.0.0.1 7002", "verrou"));
        assert!(!is_switch_of("other 127.0.0.1 7001 127.0.0.1 7002", "verrou"));
        assert!(!is_switch_of("verrou 127.0.0.1 7001", "verrou"));
    }

    #[tokio::test]
    async fn only_a_sentinel_url_is_followed() {
        assert!(follow("redis://127.0.0.1:6379", Vec::new(), None, Duration::from_millis(100)).is_none());
        assert!(
            follow(
                "redis-sentinel://127.0.0.1:1?node=127.0.0.1:2&sentinelServiceName=verrou",
                Vec::new(),
                None,
                Duration::from_millis(100)
            )
            .is_some()
        );
    }
}
