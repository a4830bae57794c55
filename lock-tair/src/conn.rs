//! Connections: building fred clients, sending commands with this backend's
//! per-command options, and mapping fred errors into `lock_core::Error`.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fred::clients::{Client, WithOptions};
use fred::error::{Error as FredError, ErrorKind};
use fred::interfaces::ClientLike;
use fred::types::config::{Config, ConnectionConfig, Options, PerformanceConfig, TcpConfig, UnresponsiveConfig};
use fred::types::{Builder, ClusterHash, CustomCommand, Value};
use lock_core::{Error, Result};

use crate::builder::TairBuilder;

/// Backend name in errors, logs and capabilities.
pub(crate) const NAME: &str = "tair";

/// Whether a command may change data: decides `outcome_unknown` on
/// transport errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
    /// A write script: it may have written before failing (Redis does not
    /// roll a script back), so any error leaves the outcome unknown.
    Script,
}

/// A client that applies this backend's per-command options (one attempt,
/// its timeout) to every command. Built once: `with_options` per call would
/// clone the client and the options each time.
pub(crate) type OptionsClient = WithOptions<Client>;

/// A few clients used in turn.
pub(crate) struct Clients {
    list: Vec<OptionsClient>,
    next: AtomicUsize,
}

impl Clients {
    pub(crate) fn new(list: Vec<Client>, options: &Options) -> Result<Self> {
        if list.is_empty() {
            return Err(Error::invalid("a fred pool with no clients"));
        }
        Ok(Clients {
            list: list.iter().map(|client| client.with_options(options)).collect(),
            next: AtomicUsize::new(0),
        })
    }

    pub(crate) fn next(&self) -> &OptionsClient {
        if self.list.len() == 1 {
            return &self.list[0];
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.list.len();
        &self.list[i]
    }

    pub(crate) fn first(&self) -> &OptionsClient {
        &self.list[0]
    }

    pub(crate) fn all(&self) -> &[OptionsClient] {
        &self.list
    }
}

/// The commands this backend sends with the key first, built once. On a
/// cluster fred routes them by their first key (the slot is only computed
/// there). Scripts are not here: fred applies a `CustomCommand`'s hash
/// policy only when it is a fixed slot, so they are built per call.
pub(crate) struct Commands {
    pub(crate) set: CustomCommand,
    pub(crate) cad: CustomCommand,
    pub(crate) cas: CustomCommand,
    pub(crate) pttl: CustomCommand,
    pub(crate) exget: CustomCommand,
    pub(crate) exset: CustomCommand,
    pub(crate) excas: CustomCommand,
    pub(crate) excad: CustomCommand,
}

/// See [`Commands`].
pub(crate) static COMMANDS: LazyLock<Commands> = LazyLock::new(|| {
    let keyed = |name: &'static str| CustomCommand::new_static(name, ClusterHash::FirstKey, false);
    Commands {
        set: keyed("SET"),
        cad: keyed("CAD"),
        cas: keyed("CAS"),
        pttl: keyed("PTTL"),
        exget: keyed("EXGET"),
        exset: keyed("EXSET"),
        excas: keyed("EXCAS"),
        excad: keyed("EXCAD"),
    }
});

/// A fred client built from a URL with this backend's settings: a reconnect
/// policy (without one fred never reconnects), one write attempt (a write is
/// never silently re-sent after a reconnect), and timeouts everywhere.
pub(crate) fn build_client(url: &str, tair: &TairBuilder, longest_wait: Duration) -> Result<Client> {
    #[allow(unused_mut)] // set again only with the `tls` feature
    let mut config = Config::from_url(url).map_err(|e| Error::invalid(format!("bad Tair URL: {}", e.details())))?;
    #[cfg(feature = "tls")]
    if let Some(pem) = &tair.tls_root_certs {
        config.tls = Some(crate::builder::tls_connector(pem)?.into());
    }
    let mut builder = Builder::from_config(config);
    let connect_timeout = tair.settings.connect_timeout;
    // A connection whose oldest request waits this long is closed and
    // re-opened (a stopped server, a silently dropped route).
    let unresponsive = tair
        .settings
        .response_timeout
        .saturating_mul(2)
        .saturating_add(longest_wait);
    builder
        .with_connection_config(|c: &mut ConnectionConfig| {
            c.connection_timeout = connect_timeout;
            c.internal_command_timeout = connect_timeout;
            c.max_command_attempts = 1;
            c.tcp = TcpConfig {
                nodelay: Some(true),
                ..TcpConfig::default()
            };
            c.unresponsive = UnresponsiveConfig {
                max_timeout: Some(unresponsive),
                interval: (unresponsive / 4).clamp(Duration::from_millis(20), Duration::from_secs(2)),
            };
        })
        .with_performance_config(|p: &mut PerformanceConfig| {
            p.default_command_timeout = tair.settings.response_timeout;
        })
        .set_policy(tair.reconnect.clone());
    builder
        .build()
        .map_err(|e| Error::invalid(format!("cannot build the Tair client: {}", e.details())))
}

/// Connect `client` unless it already is, within `timeout`.
pub(crate) async fn ensure_connected(client: &Client, timeout: Duration) -> Result<()> {
    if client.is_connected() {
        return Ok(());
    }
    match tokio::time::timeout(timeout, client.init()).await {
        Ok(Ok(_connection_task)) => Ok(()),
        Ok(Err(e)) => {
            let _ = client.quit().await;
            Err(Error::backend(NAME, format!("cannot connect: {}", e.details())).with_source(e))
        }
        Err(_) => {
            let _ = client.quit().await;
            Err(Error::backend(NAME, format!("cannot connect within {timeout:?}")))
        }
    }
}

/// Per-command options: one attempt, this backend's timeout.
pub(crate) fn command_options(timeout: Duration) -> Options {
    Options {
        max_attempts: Some(1),
        timeout: Some(timeout),
        ..Options::default()
    }
}

/// Send `command args…` (see [`Commands`] for the routing on a cluster).
/// While the client is reconnecting, [`connected`] first: the command is
/// then never queued behind the reconnection.
pub(crate) async fn send(
    client: &OptionsClient,
    command: &CustomCommand,
    args: Vec<Value>,
) -> Result<Value, FredError> {
    if !client.is_connected() {
        connected(client).await?;
    }
    client.custom(command.clone(), args).await.map_err(|e| {
        if !is_server_reply(&e) && !client.is_connected() {
            // Say why a command timed out: the server is unreachable.
            FredError::new(
                e.kind().clone(),
                format!("{} (not connected to the server; reconnecting)", e.details()),
            )
        } else {
            e
        }
    })
}

/// How an error of [`connected`] starts: nothing was sent.
const NOT_SENT: &str = "not sent";

/// Waits for the client's next connection attempt, bounded by its command
/// timeout. A command queued while fred reconnects waited out its timeout
/// when the server was down and came back outcome-unknown (and could still
/// run after a later reconnect); this way a dead server's refusal comes
/// back as soon as an attempt fails, as a definite error: nothing was sent.
///
/// # Errors
/// The failed attempt, or no connection within the timeout ([`is_not_sent`]).
pub(crate) async fn connected(client: &OptionsClient) -> Result<(), FredError> {
    let timeout = client.options().timeout.unwrap_or(crate::DEFAULT_RESPONSE_TIMEOUT);
    let attempt = tokio::time::timeout(timeout, client.wait_for_connect()).await;
    if client.is_connected() {
        return Ok(());
    }
    let why = match attempt {
        Ok(Err(e)) => e.details().to_owned(),
        Ok(Ok(())) => "the new connection closed at once".to_owned(),
        Err(_) => format!("no connection within {timeout:?}"),
    };
    Err(FredError::new(
        ErrorKind::IO,
        format!("{NOT_SENT}: not connected to the server ({why}); reconnecting"),
    ))
}

/// An error of [`connected`]: the command was never sent.
fn is_not_sent(e: &FredError) -> bool {
    e.details().starts_with(NOT_SENT)
}

/// True when the error is a reply from the server (the command ran and was
/// refused, or was refused before running), as opposed to a transport
/// failure after which a write may or may not have happened. Server replies
/// start with an upper-case code (`ERR`, `WRONGTYPE`, `NOSCRIPT`, `BUSY`,
/// `READONLY`, …); fred's own messages do not.
fn is_server_reply(e: &FredError) -> bool {
    if matches!(e.kind(), ErrorKind::IO | ErrorKind::Timeout | ErrorKind::Canceled) {
        return false;
    }
    let code = e.details().split_whitespace().next().unwrap_or("");
    code.len() >= 2 && code.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
}

/// `WRONGTYPE`: the key holds another kind of value. fred parses the
/// reply's code into [`ErrorKind::InvalidArgument`] (shared with its own
/// argument checks) and keeps the code as the first word of the details.
pub(crate) fn is_wrong_type(e: &FredError) -> bool {
    *e.kind() == ErrorKind::InvalidArgument && e.details().split_whitespace().next() == Some("WRONGTYPE")
}

/// `NOSCRIPT`: EVALSHA of a script the server does not have cached.
pub(crate) fn is_no_script(e: &FredError) -> bool {
    e.details().starts_with("NOSCRIPT")
}

fn is_unknown_command(e: &FredError) -> bool {
    let d = e.details();
    d.starts_with("ERR unknown command") || d.starts_with("ERR Unknown command")
}

/// The hint given with every missing-command error.
pub(crate) const MODULE_HINT: &str = "load the TairString module into the server (this workspace builds a \
     compatible one with `cargo build --release -p tair-module`: `--loadmodule target/release/libtair_module.so`) \
     or use the redis-lua backend";

/// Map a fred error of command `what` on `key` into `lock_core::Error`.
pub(crate) fn map_error(what: &str, key: &str, access: Access, e: FredError) -> Error {
    if access != Access::Script && is_wrong_type(&e) {
        return Error::invalid(format!(
            "{what} on {key:?}: the key holds another type of value (WRONGTYPE). Lock keys are plain strings and \
             versioned keys are exString values: never use one key name for both"
        ));
    }
    if is_unknown_command(&e) {
        let command = what.split_whitespace().next().unwrap_or(what);
        return Error::Unsupported {
            backend: NAME.into(),
            what: format!("command {command}; {MODULE_HINT}"),
        };
    }
    let unknown = !is_not_sent(&e)
        && match access {
            Access::Read => false,
            Access::Write => !is_server_reply(&e),
            Access::Script => true,
        };
    let message = format!("{what} on {key:?}: {}", e.details());
    let err = if unknown {
        Error::outcome_unknown(NAME, message)
    } else {
        Error::backend(NAME, message)
    };
    err.with_source(e)
}

/// A reply of an unexpected shape.
pub(crate) fn unexpected_reply(what: &str, key: &str, access: Access, reply: &Value) -> Error {
    let message = format!("{what} on {key:?}: unexpected reply {reply:?}");
    match access {
        // Something ran and answered oddly: we cannot say what it did.
        Access::Write | Access::Script => Error::outcome_unknown(NAME, message),
        Access::Read => Error::backend(NAME, message),
    }
}

/// The commands this backend needs, checked at connect.
pub(crate) const REQUIRED_COMMANDS: [&str; 6] = ["CAD", "CAS", "EXGET", "EXSET", "EXCAS", "EXCAD"];

/// Check with `COMMAND INFO` that every node has [`REQUIRED_COMMANDS`].
/// A server that refuses `COMMAND` itself is let through (the first use of a
/// missing command then reports it).
pub(crate) async fn check_commands(client: &Client, options: &Options) -> Result<()> {
    let servers = if client.is_clustered() {
        client.active_connections()
    } else {
        Vec::new()
    };
    let mut args: Vec<Value> = vec!["INFO".into()];
    args.extend(REQUIRED_COMMANDS.iter().map(|c| Value::from(*c)));
    let targets: Vec<Option<fred::types::config::Server>> = if servers.is_empty() {
        vec![None]
    } else {
        servers.into_iter().map(Some).collect()
    };
    for server in targets {
        let mut opts = options.clone();
        opts.cluster_node = server.clone();
        let command = CustomCommand::new_static("COMMAND", ClusterHash::Random, false);
        let reply: Value = match client.with_options(&opts).custom(command, args.clone()).await {
            Ok(v) => v,
            Err(e) if is_server_reply(&e) => {
                tracing::debug!(error = %e, "COMMAND INFO refused; TairString commands not checked");
                return Ok(());
            }
            Err(e) => {
                return Err(Error::backend(NAME, format!("COMMAND INFO at connect: {}", e.details())).with_source(e));
            }
        };
        let where_ = server.map(|s| format!(" on {s}")).unwrap_or_default();
        match crate::replies::missing_commands(&reply, &REQUIRED_COMMANDS) {
            Some(missing) if missing.is_empty() => {}
            Some(missing) => {
                return Err(Error::Unsupported {
                    backend: NAME.into(),
                    what: format!(
                        "the server{where_} has no {} command{}; {MODULE_HINT}",
                        missing.join(", "),
                        if missing.len() > 1 { "s" } else { "" }
                    ),
                });
            }
            None => {
                return Err(Error::backend(
                    NAME,
                    format!("COMMAND INFO{where_}: unexpected reply {reply:?}"),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_replies_are_told_from_transport_errors() {
        let server = FredError::new(ErrorKind::Unknown, "ERR syntax error");
        let wrongtype = FredError::new(ErrorKind::InvalidArgument, "WRONGTYPE Operation against a key");
        let timeout = FredError::new(ErrorKind::Timeout, "Request timed out.");
        let route = FredError::new(ErrorKind::Unknown, "Failed to route command.");
        assert!(is_server_reply(&server));
        assert!(is_server_reply(&wrongtype));
        assert!(!is_server_reply(&timeout));
        assert!(!is_server_reply(&route));
        assert!(!map_error("CAS", "k", Access::Write, server).is_outcome_unknown());
        assert!(map_error("CAS", "k", Access::Write, timeout.clone()).is_outcome_unknown());
        assert!(!map_error("EXGET", "k", Access::Read, timeout).is_outcome_unknown());
        assert!(matches!(
            map_error("EXGET", "k", Access::Read, wrongtype),
            Error::InvalidArgument(_)
        ));
        let unknown = FredError::new(
            ErrorKind::Unknown,
            "ERR unknown command 'CAD', with args beginning with: ",
        );
        let script_error = FredError::new(ErrorKind::Unknown, "ERR Error running script: @user_script:5");
        assert!(map_error("EVAL", "k", Access::Script, script_error).is_outcome_unknown());
        let script_wrongtype = FredError::new(ErrorKind::InvalidArgument, "WRONGTYPE Operation against a key");
        assert!(map_error("EVAL", "k", Access::Script, script_wrongtype).is_outcome_unknown());
        let err = map_error("CAD", "k", Access::Write, unknown);
        assert!(
            matches!(&err, Error::Unsupported { what, .. } if what.starts_with("command CAD")),
            "{err:?}"
        );
    }
}
