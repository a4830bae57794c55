//! Reading what a server wrote: its log file and `INFO` replies.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

/// Parses `INFO` output into `field -> value`.
pub(crate) fn parse_info(text: &str) -> HashMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

pub(crate) fn read_from(path: &Path, offset: u64) -> String {
    let bytes = fs::read(path).unwrap_or_default();
    let start = usize::try_from(offset).unwrap_or(0).min(bytes.len());
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

pub(crate) fn tail(path: &Path, n: usize) -> String {
    tail_of(&read_from(path, 0), n)
}

pub(crate) fn tail_of(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_parsing() {
        let m = parse_info("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n\r\nx:a:b\r\n");
        assert_eq!(m.get("role").map(String::as_str), Some("master"));
        assert_eq!(m.get("x").map(String::as_str), Some("a:b"));
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn tails() {
        assert_eq!(tail_of("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail_of("a", 5), "a");
    }
}
