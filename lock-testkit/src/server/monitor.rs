//! `MONITOR`, to see which commands clients send: one round trip per
//! operation means one command in the stream (commands run by scripts or
//! by modules are told apart, and left out).

use std::sync::atomic::{AtomicU64, Ordering};

use super::error::{HarnessError, HarnessResult};
use super::process::RedisServer;
use super::resp_client::RespClient;

/// A connection in `MONITOR` mode on one server.
pub struct Monitor {
    client: RespClient,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor").finish_non_exhaustive()
    }
}

impl Monitor {
    /// Starts monitoring `server`: commands from now on are seen.
    ///
    /// # Errors
    /// Connection errors, or a server refusing `MONITOR`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops its connection.
    pub async fn start(server: &RedisServer) -> HarnessResult<Monitor> {
        let mut client = server.client().await?;
        let ok = client.cmd(&["MONITOR"]).await?;
        if ok.as_str() != Some("OK") {
            return Err(HarnessError::Protocol(format!("MONITOR answered {ok:?}")));
        }
        Ok(Monitor { client })
    }

    /// The commands clients sent since the last call (or the start), each
    /// as its arguments with the command name lowercased; commands run
    /// inside scripts (source `lua`) or by modules (`RedisModule_Call`,
    /// source `?:0` on Redis, empty on Valkey) are left out. Sends a marker (`ECHO`) through `server`
    /// and reads up to it, so nothing sent before this call is missed.
    ///
    /// # Errors
    /// Connection errors or an unreadable `MONITOR` line.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropping the future part-way loses the lines it has
    /// read, and a later call also returns this call's `ECHO` marker. Drop
    /// the monitor instead.
    pub async fn client_commands(&mut self, server: &RedisServer) -> HarnessResult<Vec<Vec<String>>> {
        static MARKERS: AtomicU64 = AtomicU64::new(0);
        let marker = format!("verrou-monitor-marker-{}", MARKERS.fetch_add(1, Ordering::Relaxed));
        server.cmd(&["ECHO", &marker]).await?;
        let mut seen = Vec::new();
        loop {
            let line = self.client.read().await?;
            let text = line
                .as_str()
                .ok_or_else(|| HarnessError::Protocol(format!("MONITOR line {line:?}")))?;
            let (source, args) = parse_line(text)?;
            if args.len() == 2 && args[0] == "echo" && args[1] == marker {
                return Ok(seen);
            }
            if source != "lua" && !source.starts_with('?') && !source.is_empty() {
                seen.push(args);
            }
        }
    }
}

/// `1701388800.123456 [0 127.0.0.1:54321] "SET" "k" "v"` → the source
/// (`127.0.0.1:54321`, or `lua` for script calls) and the arguments.
fn parse_line(line: &str) -> HarnessResult<(String, Vec<String>)> {
    let bad = || HarnessError::Protocol(format!("MONITOR line {line:?}"));
    let open = line.find('[').ok_or_else(bad)?;
    let close = open + line[open..].find(']').ok_or_else(bad)?;
    let source = line[open + 1..close].split(' ').nth(1).ok_or_else(bad)?.to_owned();
    let mut args = Vec::new();
    let mut chars = line[close + 1..].chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut arg = String::new();
        loop {
            match chars.next().ok_or_else(bad)? {
                '"' => break,
                '\\' => arg.push(chars.next().ok_or_else(bad)?),
                other => arg.push(other),
            }
        }
        args.push(arg);
    }
    if let Some(name) = args.first_mut() {
        *name = name.to_ascii_lowercase();
    }
    Ok((source, args))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::parse_line;

    #[test]
    fn monitor_lines() {
        let (source, args) = parse_line(r#"1701388800.123456 [0 127.0.0.1:54321] "SET" "k" "a \"b\"""#).unwrap();
        assert_eq!(source, "127.0.0.1:54321");
        assert_eq!(args, ["set", "k", "a \"b\""]);
        let (source, args) = parse_line(r#"1701388800.123456 [0 lua] "pexpire" "k" "100""#).unwrap();
        assert_eq!((source.as_str(), args.len()), ("lua", 3));
        let (source, _) = parse_line(r#"1796083396.641608 [0 ?:0] "GET" "k""#).unwrap();
        assert_eq!(source, "?:0");
        let (source, _) = parse_line(r#"1796094660.916087 [0 ] "GET" "k""#).unwrap();
        assert_eq!(source, "", "a module's call on Valkey");
    }
}
