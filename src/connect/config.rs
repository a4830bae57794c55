//! [`ConnectConfig`]: the URL and its parameters as a serde struct, for
//! applications that keep connection settings in their own config file.

use std::collections::BTreeMap;

use lock_core::Result;
use serde::{Deserialize, Serialize};

use super::backend::Backend;

/// A connect URL plus any of its query parameters as separate fields
/// (feature `serde`). The fields take the URL's parameter names and go
/// through the same checks: an unknown field is an error, not ignored.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> verrou::Result<()> {
/// // e.g. from TOML: url = "redis://cache:6379"
/// //                 <parameter> = <value>   (the backend's URL parameters)
/// let config = verrou::ConnectConfig::new("memory://");
/// let backend = config.connect().await?;
/// # drop(backend);
/// # Ok(()) }
/// ```
#[derive(Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct ConnectConfig {
    /// The URL, e.g. `redis://host:6379` (parameters may be in it too).
    pub url: String,
    /// Query parameters by name; a list repeats the parameter.
    #[serde(flatten)]
    pub params: BTreeMap<String, ParamValue>,
}

/// One parameter value of a [`ConnectConfig`].
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum ParamValue {
    /// `name = true`.
    Bool(bool),
    /// `name = 2`.
    Int(u64),
    /// `name = 0.01`.
    Float(f64),
    /// `name = "500ms"`.
    Text(String),
    /// `name = ["a", "b"]`: the parameter repeated.
    List(Vec<String>),
}

impl std::fmt::Debug for ConnectConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Node URLs may carry passwords: only their names are shown.
        f.debug_struct("ConnectConfig")
            .field("url", &lock_core::raw::redact_url(&self.url))
            .field("params", &self.params.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl ConnectConfig {
    /// A config with just a URL.
    pub fn new(url: impl Into<String>) -> Self {
        ConnectConfig {
            url: url.into(),
            params: BTreeMap::new(),
        }
    }

    /// The one URL this config stands for (parameters appended, encoded).
    pub fn to_url(&self) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (name, value) in &self.params {
            match value {
                ParamValue::Bool(b) => query.append_pair(name, &b.to_string()),
                ParamValue::Int(n) => query.append_pair(name, &n.to_string()),
                ParamValue::Float(x) => query.append_pair(name, &x.to_string()),
                ParamValue::Text(t) => query.append_pair(name, t),
                ParamValue::List(items) => {
                    for item in items {
                        query.append_pair(name, item);
                    }
                    &mut query
                }
            };
        }
        let query = query.finish();
        if query.is_empty() {
            self.url.clone()
        } else if self.url.contains('?') {
            format!("{}&{query}", self.url)
        } else {
            format!("{}?{query}", self.url)
        }
    }

    /// Connect as [`crate::connect()`] does with [`ConnectConfig::to_url`].
    ///
    /// # Errors
    /// As [`crate::connect()`].
    ///
    /// # Cancel safety
    /// As [`crate::connect()`].
    pub async fn connect(&self) -> Result<Backend> {
        super::dispatch::connect(&self.to_url()).await
    }
}
