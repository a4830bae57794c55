//! What every backend's URL grammar needs: the split into scheme,
//! credentials, hosts, path and parameters, the value parsers with their
//! bounds, and hiding quoted URL text when a URL holds credentials.
//!
//! Hand-parsed rather than with the `url` crate: several schemes list many
//! hosts in one authority (`redis+cluster://a:1,b:2`, `etcd://a,b,c`), which
//! a standard URL cannot express, and one splitter keeps one behaviour for
//! every malformed URL (a password is never cut into a "host" that an error
//! would quote: the authority ends at the *last* `@` before the path).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::redact::redact_url;
use crate::validate::MAX_TIMEOUT;

/// A URL cut into its parts; nothing decoded but the query.
#[derive(Clone, PartialEq, Eq)]
pub struct UrlParts {
    /// Lowercase, without `://`.
    pub scheme: String,
    /// What stands before the authority's last `@` (percent-encoded, never
    /// printed), if anything.
    pub user_info: Option<String>,
    /// The hosts as written (`h1:p1,h2` or empty).
    pub hosts: String,
    /// From the first `/` after the hosts to the query (may be empty).
    pub path: String,
    /// The query parameters, decoded, in order.
    pub params: Vec<(String, String)>,
}

impl std::fmt::Debug for UrlParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UrlParts")
            .field("scheme", &self.scheme)
            .field("user_info", &self.user_info.as_ref().map(|_| "***"))
            .field("hosts", &self.hosts)
            .field("path", &self.path)
            .field("params", &self.params.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl UrlParts {
    /// Splits `url`; `repeatable` names the parameters that may be given
    /// more than once (any other given twice with different values is
    /// refused: which one would win is a guess).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a URL without `scheme://`, with a
    /// `#fragment`, or with a conflicting repeat.
    pub fn parse(url: &str, repeatable: &[&str]) -> Result<UrlParts> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(Error::invalid(format!(
                "URL {} has no scheme: write SCHEME://…",
                redact_url(url)
            )));
        };
        let scheme = scheme.to_ascii_lowercase();
        if rest.contains('#') {
            return Err(Error::invalid(format!(
                "URL {} has a #fragment: remove it (percent-encode a '#' in a password as %23)",
                redact_url(url)
            )));
        }
        let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
        // The authority ends at the first `/` after its last `@`: a password
        // may hold an unencoded `/`.
        let host_start = before_query.rfind('@').map_or(0, |at| at + 1);
        let (authority, path) = match before_query[host_start..].find('/') {
            Some(i) => before_query.split_at(host_start + i),
            None => (before_query, ""),
        };
        let (user_info, hosts) = match authority.rfind('@') {
            Some(at) => (Some(authority[..at].to_owned()), &authority[at + 1..]),
            None => (None, authority),
        };
        let params: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes()).into_owned().collect();
        refuse_conflicting_repeats(&scheme, &params, repeatable)?;
        Ok(UrlParts {
            scheme,
            user_info,
            hosts: hosts.to_owned(),
            path: path.to_owned(),
            params,
        })
    }

    /// The user name and password, percent-decoded (`None` without
    /// credentials; an empty user for a password-only `:secret@`, and an
    /// empty password for `user@`).
    pub fn credentials(&self) -> Option<(String, String)> {
        let info = self.user_info.as_deref()?;
        Some(match info.split_once(':') {
            Some((user, password)) => (percent_decode(user), percent_decode(password)),
            None => (percent_decode(info), String::new()),
        })
    }
}

/// Refuses a parameter given twice with different values; the same value
/// twice says it once. Values are not quoted: some hold URLs with
/// passwords.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the parameter.
pub fn refuse_conflicting_repeats(scheme: &str, params: &[(String, String)], repeatable: &[&str]) -> Result<()> {
    for (i, (name, value)) in params.iter().enumerate() {
        if repeatable.contains(&name.as_str()) {
            continue;
        }
        if params[..i].iter().any(|(n, v)| n == name && v != value) {
            return Err(Error::invalid(format!(
                "{scheme}:// parameter {name} is given twice with different values: keep one"
            )));
        }
    }
    Ok(())
}

/// The error for a parameter a scheme does not take.
pub fn unknown_parameter(scheme: &str, name: &str, params: &[&str]) -> Error {
    if params.is_empty() {
        return Error::invalid(format!(
            "unknown parameter `{name}` for {scheme}://: it takes no parameters"
        ));
    }
    Error::invalid(format!(
        "unknown parameter `{name}` for {scheme}://: the parameters are {}",
        params.join(", ")
    ))
}

/// `text` with its percent-escapes decoded (`+` and `&` kept as they are).
pub fn percent_decode(text: &str) -> String {
    let query = format!("x={}", text.replace('+', "%2B").replace('&', "%26"));
    form_urlencoded::parse(query.as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

/// `err` with every `quoted` piece of `url` hidden when `url` holds a `@`
/// (credentials may be in it). A password with an unencoded `/`, `?`, `#`
/// or `@` can be cut into what looks like a host, a path or a parameter,
/// and messages quote those to say what to fix; with a `@` anywhere in the
/// URL they say it without the quote.
pub fn hide_quoted_url_text(err: Error, url: &str) -> Error {
    let Error::InvalidArgument(message) = &err else {
        return err;
    };
    if !url.contains('@') {
        return err;
    }
    let decoded = percent_decode(url);
    let parts: Vec<&str> = message.split('`').collect();
    let mut shown = String::with_capacity(message.len());
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            shown.push('`');
        }
        // Odd parts are quoted when a closing backtick follows.
        let quoted = i % 2 == 1 && i + 1 < parts.len();
        if quoted && !part.is_empty() && (url.contains(part) || decoded.contains(part)) {
            shown.push_str("***");
        } else {
            shown.push_str(part);
        }
    }
    Error::InvalidArgument(shown)
}

/// `host` (`name`, `name:port`, `[v6]`, `[v6]:port`) as `name:port`, with
/// `default_port` when it names none.
///
/// # Errors
/// [`Error::InvalidArgument`] for an empty host, an unclosed IPv6 bracket
/// or a port outside 1..=65535.
pub fn parse_host_port(scheme: &str, host: &str, default_port: u16) -> Result<String> {
    if host.is_empty() {
        return Err(Error::invalid(format!(
            "{scheme}:// URL has an empty host in its list: write HOST[:PORT],HOST[:PORT] without empty entries"
        )));
    }
    let (name, port) = if let Some(v6) = host.strip_prefix('[') {
        match v6.split_once(']') {
            Some((addr, "")) => (format!("[{addr}]"), None),
            Some((addr, port)) if port.starts_with(':') => (format!("[{addr}]"), Some(&port[1..])),
            _ => {
                return Err(Error::invalid(format!(
                    "{scheme}:// host `{host}` is not [IPv6]:PORT: close the bracket before the port"
                )));
            }
        }
    } else {
        match host.split_once(':') {
            Some((name, port)) => (name.to_owned(), Some(port)),
            None => (host.to_owned(), None),
        }
    };
    if name.is_empty() || name == "[]" {
        return Err(Error::invalid(format!(
            "{scheme}:// URL has a port but no host name in `{host}`: write HOST:PORT"
        )));
    }
    let port = match port {
        None => default_port,
        Some(p) => match p.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => {
                return Err(Error::invalid(format!(
                    "{scheme}:// host `{host}` has port `{p}`: a port is a number from 1 to 65535"
                )));
            }
        },
    };
    Ok(format!("{name}:{port}"))
}

/// A duration above zero and at most [`MAX_TIMEOUT`], the bound of every
/// timeout in verrou (the sums the backends wait for stay far from
/// overflowing): `500ms`, `2s`, `1m`.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `name` and the range.
pub fn parse_duration(name: &str, value: &str) -> Result<Duration> {
    let range = format!("above zero and at most {} days", MAX_TIMEOUT.as_secs() / 86_400);
    match humantime::parse_duration(value) {
        Ok(d) if !d.is_zero() && d <= MAX_TIMEOUT => Ok(d),
        Ok(_) => Err(Error::invalid(format!("{name} must be {range}, got `{value}`"))),
        Err(e) => Err(Error::invalid(format!(
            "{name} `{value}` is not a duration {range} ({e}): write e.g. {name}=500ms or {name}=2s"
        ))),
    }
}

/// A whole number from `min` to `max`, as the integer type the setting
/// takes (`max` must fit it).
///
/// # Errors
/// [`Error::InvalidArgument`] naming `name` and the range.
pub fn parse_number<T: TryFrom<u64>>(name: &str, value: &str, min: u64, max: u64) -> Result<T> {
    let out_of_range = || {
        Error::invalid(format!(
            "{name} must be a whole number from {min} to {max}, got `{value}`"
        ))
    };
    let n: u64 = value.parse().map_err(|_| out_of_range())?;
    if !(min..=max).contains(&n) {
        return Err(out_of_range());
    }
    T::try_from(n).map_err(|_| out_of_range())
}

/// `true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off`).
///
/// # Errors
/// [`Error::InvalidArgument`] naming `name`.
pub fn parse_bool(name: &str, value: &str) -> Result<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(Error::invalid(format!(
            "{name} `{value}` is not a boolean: write {name}=true or {name}=false"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_with_a_slash_stays_in_the_user_info() {
        let parts = UrlParts::parse("redis://app:s3cr/etPW@h:1/2?fencing=true", &[]).ok();
        let parts = parts.as_ref();
        assert_eq!(parts.map(|p| p.hosts.as_str()), Some("h:1"));
        assert_eq!(parts.map(|p| p.path.as_str()), Some("/2"));
        assert_eq!(
            parts.and_then(UrlParts::credentials),
            Some(("app".to_owned(), "s3cr/etPW".to_owned()))
        );
        assert!(!format!("{parts:?}").contains("s3cr"));
    }

    #[test]
    fn conflicting_repeats_are_refused() {
        assert!(UrlParts::parse("x://h?a=1&a=2", &[]).is_err());
        assert!(UrlParts::parse("x://h?a=1&a=1", &[]).is_ok());
        assert!(UrlParts::parse("x://h?node=1&node=2", &["node"]).is_ok());
    }

    #[test]
    fn numbers_and_durations_are_bounded() {
        assert!(parse_number::<usize>("n", "0", 1, 10).is_err());
        assert!(parse_number::<usize>("n", "11", 1, 10).is_err());
        assert!(parse_number::<usize>("n", "18446744073709551616", 1, 10).is_err());
        assert!(parse_number::<usize>("n", "NaN", 1, 10).is_err());
        assert_eq!(parse_number::<usize>("n", "10", 1, 10).ok(), Some(10));
        assert!(parse_duration("t", "0s").is_err());
        assert!(parse_duration("t", "18446744073709551615s").is_err());
        assert!(parse_duration("t", "NaN").is_err());
        assert_eq!(parse_duration("t", "2s").ok(), Some(Duration::from_secs(2)));
    }
}
