//! Timers armed per pair: a Linux uprobe on tokio's timer-wheel insertion
//! (`tokio::runtime::time::Handle::reregister`, which every `Sleep` and
//! `Timeout` goes through each time it is armed) of this very binary,
//! counted by the kernel (tracefs `uprobe_profile`). Every tokio timer of
//! the process is counted, whoever arms it: the manager's, a client
//! library's response timeouts, a background task's.
//!
//! A probe hit traps into the kernel (about a microsecond), so the probe is
//! enabled only in a counting window of its own, after a row's measured
//! rounds, never while throughput or CPU is measured. Where tracefs or the
//! symbol is missing (not root, not Linux, a stripped binary) the counts
//! are absent and the table says so; nothing fails.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use object::{Object as _, ObjectSection as _, ObjectSymbol as _};

/// The uprobe group of every probe this binary makes.
const GROUP: &str = "verrou_bench";
/// The probed function: where an armed tokio timer enters the wheel.
const SYMBOL_PARTS: [&str; 2] = ["tokio..runtime..time..handle..Handle", "10reregister"];

/// An installed, removable uprobe on this binary's timer arming.
pub struct TimerProbe {
    tracefs: PathBuf,
    event: String,
}

impl TimerProbe {
    /// Installs the probe (disabled); why not, when it cannot be.
    pub fn install() -> Result<Self, String> {
        let tracefs = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.join("uprobe_events").exists())
            .ok_or("no tracefs with uprobe_events (mount tracefs, run as root)")?;
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let offset = reregister_offset(&exe)?;
        remove_stale(&tracefs);
        let event = format!("timer_{}", std::process::id());
        append(
            &tracefs.join("uprobe_events"),
            &format!("p:{GROUP}/{event} {}:{offset:#x}", exe.display()),
        )?;
        Ok(TimerProbe { tracefs, event })
    }

    /// Turns counting on or off.
    pub fn enable(&self, on: bool) -> Result<(), String> {
        let path = self.tracefs.join("events").join(GROUP).join(&self.event).join("enable");
        std::fs::write(&path, if on { "1" } else { "0" }).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Hits so far (counted while enabled).
    pub fn hits(&self) -> Option<u64> {
        let profile = std::fs::read_to_string(self.tracefs.join("uprobe_profile")).ok()?;
        // `<file> <event> <hits>`; some kernels write the event with its group.
        let grouped = format!("{GROUP}/{}", self.event);
        profile.lines().find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                [_, event, hits, ..] if *event == self.event || *event == grouped => hits.parse().ok(),
                _ => None,
            }
        })
    }
}

impl Drop for TimerProbe {
    fn drop(&mut self) {
        let _ = self.enable(false);
        let _ = append(
            &self.tracefs.join("uprobe_events"),
            &format!("-:{GROUP}/{}", self.event),
        );
    }
}

/// Removes probes a killed earlier run left behind (a probe left enabled
/// would slow every later run of the binary).
fn remove_stale(tracefs: &Path) {
    let Ok(events) = std::fs::read_to_string(tracefs.join("uprobe_events")) else {
        return;
    };
    for line in events.lines() {
        let Some(name) = line
            .split_whitespace()
            .next()
            .and_then(|p| p.split_once(':'))
            .map(|(_, n)| n.to_owned())
            .filter(|n| n.starts_with(&format!("{GROUP}/")))
        else {
            continue;
        };
        let _ = std::fs::write(tracefs.join("events").join(&name).join("enable"), "0");
        let _ = append(&tracefs.join("uprobe_events"), &format!("-:{name}"));
    }
}

fn append(path: &Path, line: &str) -> Result<(), String> {
    let mut file = OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    writeln!(file, "{line}").map_err(|e| format!("{}: {e}", path.display()))
}

/// The file offset of tokio's `reregister` in `exe` (a uprobe's address).
fn reregister_offset(exe: &Path) -> Result<u64, String> {
    let data = std::fs::read(exe).map_err(|e| format!("{}: {e}", exe.display()))?;
    let file = object::File::parse(&*data).map_err(|e| format!("{}: {e}", exe.display()))?;
    let symbol = file
        .symbols()
        .find(|s| s.name().is_ok_and(|n| SYMBOL_PARTS.iter().all(|p| n.contains(p))))
        .ok_or("tokio's timer symbol is not in the binary (stripped?)")?;
    let index = symbol.section_index().ok_or("the timer symbol has no section")?;
    let section = file.section_by_index(index).map_err(|e| e.to_string())?;
    let (file_start, _) = section
        .file_range()
        .ok_or("the timer symbol's section has no file range")?;
    symbol
        .address()
        .checked_sub(section.address())
        .map(|within| file_start + within)
        .ok_or_else(|| "the timer symbol lies before its section".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timer_symbol_is_found_in_this_binary() {
        // Test binaries link tokio's timer too; the offset lies in the file.
        let exe = std::env::current_exe().expect("current_exe");
        let offset = reregister_offset(&exe).expect("symbol");
        let len = std::fs::metadata(&exe).expect("metadata").len();
        assert!(offset > 0 && offset < len, "{offset} of {len}");
    }
}
