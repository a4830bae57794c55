//! The configuration contract for `redlock://?quorum=M&node=URL&node=URL…`:
//! [`RedlockConfig`] and [`RedlockConnector`]. A node's URL is any other
//! scheme's, parsed and connected by its own crate through the facade's
//! [`SchemeTable`] (this crate depends on no backend).

use std::time::Duration;

use lock_core::raw::{
    BackendConfig, Connected, Connector, SchemeTable, UrlParts, async_trait, parse_duration, parse_number, redact_url,
};
use lock_core::{Error, Result};

use crate::options::RedlockOptions;
use crate::{LazyNode, Redlock};

/// The parameters of `redlock://`.
pub const REDLOCK_PARAMS: &[&str] = &["node", "quorum", "node_timeout", "drift_factor"];

/// Most nodes a `redlock://` URL may list.
pub const MAX_NODES: usize = 64;

/// The configuration of a [`Redlock`] built from a URL: its nodes' URLs
/// and its options. Unlike the other backends there is no
/// `Redlock::connect(url)`: the nodes are other backends, which only the
/// facade (`verrou::connect`) or a [`SchemeTable`] can connect.
///
/// ```
/// use lock_core::raw::BackendConfig;
/// use lock_redlock::RedlockConfig;
///
/// let config = RedlockConfig::from_url(
///     "redlock://?quorum=2&node=redis://a:6379&node=redis://:secret@b:6379&node=tair://c:6379",
/// )?;
/// assert_eq!(config.nodes().len(), 3);
/// assert_eq!(config.quorum, Some(2));
/// assert!(!config.description().contains("secret"));
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct RedlockConfig {
    /// The nodes' URLs (may hold passwords: never printed).
    nodes: Vec<String>,
    /// `quorum`: nodes that must agree (default a majority).
    pub quorum: Option<usize>,
    /// `node_timeout`: one fixed per-node timeout (default `ttl × 0.05`
    /// clamped to 10 ms ..= 1 s).
    pub node_timeout: Option<Duration>,
    /// `drift_factor`: from 0 up to (not including) 0.5 (default 0.01).
    pub drift_factor: f64,
}

impl Default for RedlockConfig {
    fn default() -> Self {
        RedlockConfig {
            nodes: Vec::new(),
            quorum: None,
            node_timeout: None,
            drift_factor: RedlockOptions::default().drift_factor,
        }
    }
}

impl std::fmt::Debug for RedlockConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockConfig")
            .field("nodes", &self.nodes.iter().map(|n| redact_url(n)).collect::<Vec<_>>())
            .field("quorum", &self.quorum)
            .field("node_timeout", &self.node_timeout)
            .field("drift_factor", &self.drift_factor)
            .finish_non_exhaustive()
    }
}

impl RedlockConfig {
    /// The nodes' URLs.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// Adds a node's URL (checked by [`RedlockConnector`] with the table
    /// that connects it).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a `redlock://` node, or past
    /// [`MAX_NODES`].
    pub fn add_node(&mut self, url: &str) -> Result<()> {
        if url.to_ascii_lowercase().starts_with("redlock:") {
            return Err(Error::invalid(
                "a redlock:// node cannot itself be redlock://: list every server as its own node=",
            ));
        }
        if self.nodes.len() >= MAX_NODES {
            return Err(Error::invalid(format!("redlock:// takes at most {MAX_NODES} nodes")));
        }
        self.nodes.push(url.to_owned());
        Ok(())
    }

    /// The options this config stands for.
    pub fn options(&self) -> RedlockOptions {
        let mut options = RedlockOptions::default().drift_factor(self.drift_factor);
        if let Some(m) = self.quorum {
            options = options.quorum(m);
        }
        if let Some(t) = self.node_timeout {
            options = options.node_timeout(t);
        }
        options
    }

    /// Each node checked by its own crate through `table`.
    ///
    /// # Errors
    /// The first node's error, saying which node.
    pub fn check_nodes(&self, table: &SchemeTable) -> Result<()> {
        for (i, node) in self.nodes.iter().enumerate() {
            table.check(node).map_err(|e| match e {
                Error::InvalidArgument(m) => Error::invalid(format!("redlock node {}: {m}", i + 1)),
                other => other,
            })?;
        }
        Ok(())
    }
}

impl BackendConfig for RedlockConfig {
    const SCHEMES: &'static [&'static str] = &["redlock"];
    const PARAMS: &'static [&'static str] = REDLOCK_PARAMS;

    fn from_url(url: &str) -> Result<Self> {
        // A password with an unencoded `/`, `?` or `#` can be cut into what
        // a message quotes as a host or a value: hidden here.
        Self::parse_url(url).map_err(|e| lock_core::raw::hide_quoted_url_text(e, url))
    }
    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        match key {
            "node" => self.add_node(value)?,
            "quorum" => self.quorum = Some(parse_number(key, value, 1, MAX_NODES as u64)?),
            "node_timeout" => self.node_timeout = Some(parse_duration(key, value)?),
            "drift_factor" => match value.parse::<f64>() {
                Ok(x) if (0.0..0.5).contains(&x) => self.drift_factor = x,
                _ => {
                    return Err(Error::invalid(format!(
                        "drift_factor `{value}` is not a number from 0 up to (not including) 0.5: write e.g. \
                         drift_factor=0.01"
                    )));
                }
            },
            other => {
                return Err(Error::invalid(format!(
                    "unknown parameter `{other}` for redlock://: the parameters are node (repeated), quorum, \
                     node_timeout, drift_factor (percent-encode a node's own parameters, e.g. \
                     node=redis://a:6379%3Ffencing%3Dtrue)"
                )));
            }
        }
        Ok(())
    }

    fn validate(&self) -> Result<()> {
        let n = self.nodes.len();
        if n < 2 {
            return Err(Error::invalid(format!(
                "redlock:// needs at least 2 nodes (3 or more for fault tolerance), got {n}: add node=URL parameters"
            )));
        }
        if !(0.0..0.5).contains(&self.drift_factor) {
            return Err(Error::invalid(format!(
                "drift_factor must be from 0 up to (not including) 0.5, got {}",
                self.drift_factor
            )));
        }
        if let Some(m) = self.quorum {
            if m > n {
                return Err(Error::invalid(format!(
                    "redlock:// quorum {m} is above the {n} nodes: use a quorum from {} to {n}",
                    n / 2 + 1
                )));
            }
            if 2 * m <= n {
                return Err(Error::invalid(format!(
                    "redlock:// quorum {m} of {n} nodes is not a majority (two clients could both reach it): use a \
                     quorum from {} to {n}",
                    n / 2 + 1
                )));
            }
        }
        self.options().validate(n).map(drop)
    }

    fn description(&self) -> String {
        let names: Vec<String> = self.nodes.iter().map(|n| redact_url(n)).collect();
        format!("redlock://[{}]", names.join(", "))
    }
}

impl RedlockConfig {
    /// [`BackendConfig::from_url`] before its errors' quoted URL text is
    /// hidden.
    fn parse_url(url: &str) -> Result<Self> {
        let parts = UrlParts::parse(url, &["node"])?;
        if parts.scheme != "redlock" {
            return Err(Error::invalid(format!("{}:// is not redlock://", parts.scheme)));
        }
        if parts.user_info.is_some() || !parts.hosts.is_empty() || !matches!(parts.path.as_str(), "" | "/") {
            return Err(Error::invalid(
                "redlock:// takes no host: list its nodes as parameters, e.g. \
                 redlock://?quorum=2&node=redis://a:6379&node=redis://b:6379&node=tair://c:6379",
            ));
        }
        let mut config = RedlockConfig::default();
        for (name, value) in &parts.params {
            config.set(name, value)?;
        }
        config.validate()?;
        Ok(config)
    }
}

/// The facade's entry for `redlock://`: each node goes through the table.
#[derive(Debug, Clone, Copy, Default)]
pub struct RedlockConnector;

#[async_trait]
impl Connector for RedlockConnector {
    fn check(&self, url: &str, table: &SchemeTable) -> Result<()> {
        RedlockConfig::from_url(url)?.check_nodes(table)
    }

    async fn connect(&self, url: &str, table: &SchemeTable) -> Result<Connected> {
        let config = RedlockConfig::from_url(url)?;
        config.check_nodes(table)?;
        // Every node connects in the background; the backend starts once a
        // quorum has (see `Redlock::connect`): a minority down at start only
        // costs failed votes until it answers.
        let mut nodes = Vec::with_capacity(config.nodes.len());
        let mut in_process = false;
        for node in &config.nodes {
            in_process |= node.to_ascii_lowercase().starts_with("memory:");
            let (table, url) = (table.clone(), node.clone());
            nodes.push(LazyNode::spawn(redact_url(node), move || {
                let (table, url) = (table.clone(), url.clone());
                async move { table.connect(&url).await.map(|c| c.locks) }
            })?);
        }
        let redlock = Redlock::connect(nodes, config.options()).await?;
        let names = redlock.node_names().join(", ");
        Ok(Connected::locks_only(std::sync::Arc::new(redlock), format!("redlock://[{names}]")).in_process(in_process))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redlock_urls_parse_and_hide_their_nodes_passwords() {
        let config = RedlockConfig::from_url(
            "redlock://?quorum=2&node=redis://u:hunter2@a:1&node=tair://b:2&node=redis://c:3%3Ffencing%3Dtrue",
        );
        let Ok(config) = config else {
            unreachable!("{config:?}");
        };
        assert_eq!(config.nodes().len(), 3);
        assert_eq!(config.nodes()[2], "redis://c:3?fencing=true");
        assert_eq!(config.quorum, Some(2));
        for shown in [format!("{config:?}"), config.description()] {
            assert!(!shown.contains("hunter2"), "{shown}");
        }
        for (bad, expected) in [
            (
                "redlock://?node=redis://a&node=redis://b&drift_factor=NaN",
                "drift_factor",
            ),
            (
                "redlock://?node=redis://a&node=redis://b&drift_factor=0.9",
                "drift_factor",
            ),
            (
                "redlock://?node=redis://a&node=redis://b&quorum=18446744073709551616",
                "quorum",
            ),
            (
                "redlock://?node=redis://a&node=redis://b&node_timeout=0s",
                "node_timeout",
            ),
            ("redlock://?node=redis://a&node=redis://b&quorum=2&quorum=1", "twice"),
        ] {
            match RedlockConfig::from_url(bad) {
                Err(Error::InvalidArgument(m)) => assert!(m.contains(expected), "{bad}: {m}"),
                other => unreachable!("{bad}: {other:?}"),
            }
        }
    }
}
