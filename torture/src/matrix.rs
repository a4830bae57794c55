//! SAFETY.md's first screen: a backend × fault matrix built from the rows of
//! its Results table, so that a full run writes it from its own results and
//! `--matrix FILE` rebuilds it from a committed file's table.

use std::fmt::Write as _;

/// Heading of the matrix's section.
const HEADING: &str = "## At a glance";
/// Heading of the results table the matrix is built from.
const RESULTS: &str = "## Results";

/// A column's name, and whether a (lowercased) fault text belongs to it.
type Column = (&'static str, fn(&str) -> bool);

/// The fault columns, in order; a row lands in the first whose test matches
/// its fault text (lowercased), `other` when none does.
const COLUMNS: [Column; 9] = [
    ("no fault", |f| f == "none"),
    ("client process killed", |f| f.contains("kill -9")),
    ("client process stopped", |f| f.contains("sigstop")),
    ("client stalled", |f| f.contains("stalled")),
    ("failover", |f| f.contains("promoted")),
    ("network cut", |f| f.contains("partitioned") || f.contains("blackholed")),
    ("data lost", |f| {
        f.contains("without data") || f.contains("restarted empty")
    }),
    ("server killed, restarted", |f| f.contains("killed")),
    ("server paused", |f| f.contains("paused")),
];
const OTHER: &str = "other";
/// The columns as shown: server-side faults first, then the clients'.
const SHOWN: [&str; 9] = [
    "no fault",
    "server paused",
    "server killed, restarted",
    "data lost",
    "failover",
    "network cut",
    "client stalled",
    "client process killed",
    "client process stopped",
];

/// One row of the Results table, as much of it as the matrix needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Backend label (`redis-lua (Sentinel)` for a row through Redis
    /// Sentinel: the matrix gives those a line of their own).
    pub backend: String,
    /// Fault text.
    pub fault: String,
    /// Critical sections the row ran.
    pub sections: u64,
    /// The claim's label (`claimed safe`, `documented unsafe`, …).
    pub claim: String,
    /// The result cell (`holds`, `**VIOLATED**: …`, …).
    pub result: String,
}

/// What a row shows, in the order a cell lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    Violated,
    Safe,
    Fenced,
    Unsafe,
}

impl Verdict {
    fn of(row: &Row) -> Option<Verdict> {
        if row.result.starts_with("**VIOLATED**") {
            return Some(Verdict::Violated);
        }
        match row.claim.as_str() {
            "claimed safe" => Some(Verdict::Safe),
            "claimed safe with fencing" => Some(Verdict::Fenced),
            "documented unsafe" => Some(Verdict::Unsafe),
            _ => None, // the control row
        }
    }

    fn label(self) -> &'static str {
        match self {
            Verdict::Violated => "**VIOLATED**",
            Verdict::Safe => "safe",
            Verdict::Fenced => "fenced",
            Verdict::Unsafe => "unsafe",
        }
    }
}

fn column(fault: &str) -> &'static str {
    let f = fault.to_lowercase();
    COLUMNS
        .iter()
        .find(|(_, matches)| matches(&f))
        .map_or(OTHER, |(name, _)| name)
}

/// What tells a row apart from the others of its cell: the replication
/// setting, the standby, or how many Redlock nodes the fault hit.
fn qualifier(fault: &str) -> Option<String> {
    if fault.contains("ReplicaAck") {
        return Some("ReplicaAck".to_owned());
    }
    if fault.contains("asynchronous standby") {
        return Some("async standby".to_owned());
    }
    if fault.contains("synchronous standby") {
        return Some("sync standby".to_owned());
    }
    let words: Vec<&str> = fault.split_whitespace().collect();
    words
        .windows(3)
        .find(|w| w[1] == "of" && w[0].parse::<u32>().is_ok() && w[2].parse::<u32>().is_ok())
        .map(|w| format!("{} of {}", w[0], w[2]))
}

/// The rows of `safety`'s Results table (empty when it has none).
pub fn rows_from_results(safety: &str) -> Vec<Row> {
    let Some(section) = safety.split(&format!("\n{RESULTS}\n")).nth(1) else {
        return Vec::new();
    };
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // header and separator
        .filter_map(|line| {
            let cells: Vec<&str> = line
                .split(" | ")
                .map(|c| c.trim_matches(|ch| ch == '|' || ch == ' '))
                .collect();
            // backend | topology | fault | acquisitions | … | claim | result
            if cells.len() < 11 {
                return None;
            }
            let sections = cells[3].split_whitespace().next()?.parse().ok()?;
            // Through Redis Sentinel: a line of its own per backend.
            let backend = if cells[1].starts_with("Sentinel") {
                format!("{} (Sentinel)", cells[0])
            } else {
                cells[0].to_owned()
            };
            Some(Row {
                backend,
                fault: cells[2].to_owned(),
                sections,
                claim: cells[cells.len() - 2].to_owned(),
                result: cells[cells.len() - 1].to_owned(),
            })
        })
        .collect()
}

/// One cell: each verdict with its critical sections, and what sets its
/// rows apart when the cell has more than one verdict.
fn cell(rows: &[&Row]) -> String {
    let mut verdicts: Vec<Verdict> = rows.iter().filter_map(|r| Verdict::of(r)).collect();
    verdicts.sort();
    verdicts.dedup();
    if verdicts.is_empty() {
        return "—".to_owned();
    }
    let parts: Vec<String> = verdicts
        .iter()
        .map(|&v| {
            let of_v: Vec<&&Row> = rows.iter().filter(|r| Verdict::of(r) == Some(v)).collect();
            let sections: u64 = of_v.iter().map(|r| r.sections).sum();
            let mut quals: Vec<String> = of_v.iter().filter_map(|r| qualifier(&r.fault)).collect();
            quals.dedup();
            if verdicts.len() > 1 && !quals.is_empty() {
                format!("{} {sections} ({})", v.label(), quals.join(", "))
            } else {
                format!("{} {sections}", v.label())
            }
        })
        .collect();
    parts.join(" · ")
}

/// The matrix section (heading, table, reading guide), from `rows`.
pub fn section(rows: &[Row]) -> String {
    let rows: Vec<&Row> = rows.iter().filter(|r| Verdict::of(r).is_some()).collect();
    let mut backends: Vec<&str> = Vec::new();
    for r in &rows {
        if !backends.contains(&r.backend.as_str()) {
            backends.push(&r.backend);
        }
    }
    let mut columns: Vec<&str> = SHOWN.to_vec();
    if rows.iter().any(|r| column(&r.fault) == OTHER) {
        columns.push(OTHER);
    }
    let mut md = String::new();
    let _ = writeln!(md, "{HEADING}\n");
    let _ = writeln!(md, "| backend | {} |", columns.join(" | "));
    let _ = writeln!(md, "|---|{}", "---|".repeat(columns.len()));
    for backend in backends {
        let cells: Vec<String> = columns
            .iter()
            .map(|col| {
                let in_cell: Vec<&Row> = rows
                    .iter()
                    .filter(|r| r.backend == backend && column(&r.fault) == *col)
                    .copied()
                    .collect();
                cell(&in_cell)
            })
            .collect();
        let _ = writeln!(md, "| {backend} | {} |", cells.join(" | "));
    }
    let _ = writeln!(
        md,
        "\nHow to read it: each cell sums the rows of [Results](#results) for that backend and kind of fault. \
         *safe N*: every check held in rows claimed safe, over N critical sections in all; *fenced N*: claimed \
         safe with fencing (a stalled or stopped holder overlaps the next one, and the fencing token rejected \
         every stale write); *unsafe N*: documented unsafe, measured over N sections (see *Documented unsafe \
         rows*); **VIOLATED**: a claim broke in this run; —: not tested. Where a cell has several verdicts, the \
         parentheses say which rows they are (`ReplicaAck`, the standby, how many Redlock nodes the fault hit). \
         A cell holds only under the conditions of its rows (4 clients, 300 ms TTLs, the fault as described in \
         Results); the lock kinds' rows are in *Lock kinds*, the leak checks in *Soak*. Generated by \
         `verrou-torture` from the Results table (`--matrix SAFETY.md` rebuilds it from a committed file)."
    );
    md
}

/// `safety` with its matrix section rebuilt from its own Results table:
/// replaced where it is, else inserted after the title.
///
/// # Errors
/// When `safety` has no Results rows or no title line.
pub fn with_matrix(safety: &str) -> Result<String, String> {
    let rows = rows_from_results(safety);
    if rows.is_empty() {
        return Err(format!("no rows in a `{RESULTS}` table"));
    }
    let section = section(&rows);
    if let Some(start) = safety.find(&format!("\n{HEADING}\n")) {
        let body = start + 1;
        let end = safety[body + HEADING.len()..]
            .find("\n## ")
            .map_or(safety.len(), |i| body + HEADING.len() + i + 1);
        return Ok(format!("{}{section}\n{}", &safety[..body], &safety[end..]));
    }
    let title_end = safety
        .find('\n')
        .filter(|_| safety.starts_with("# "))
        .ok_or("no `# ` title line")?;
    let rest = safety[title_end..].trim_start_matches('\n');
    Ok(format!("{}\n\n{section}\n{rest}", &safety[..title_end]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESULTS_TABLE: &str = "\
## Results

| backend | topology | fault | acquisitions | overlaps | stale writes accepted / rejected | late loss signals | linearizable | recovery | claim | result |
|---|---|---|---|---|---|---|---|---|---|---|
| control (no lock) | in-process | bodies run without the lock | 543 (0 cancelled) | **382** (max 577 ms) | 118 / — (no fencing) | 0 | — | — | control: must overlap | checker sees overlaps |
| redis-lua | 1 server | none | 514 (0 cancelled) | 0 | 0 / 0 | 0 | yes | — | claimed safe | holds |
| redis-lua | primary + replica | replica lagging 1×TTL, primary killed, replica promoted | 517 (1 cancelled) | 0 | 0 / 0 | 0 | **no** | 9 ms | documented unsafe | unsafe, as documented |
| redis-lua | primary + replica | replica lagging 1×TTL, primary killed, replica promoted; ReplicaAck(1) | 508 (1 cancelled) | 0 | 0 / 0 | 0 | yes | 79 ms | claimed safe | holds |
| redis-lua | Sentinel: primary + 2 replicas, 3 sentinels | primary killed (SIGKILL), a replica promoted by the sentinels; ReplicaAck(1) | 530 (0 cancelled) | 0 | 0 / 0 | 0 | yes | 900 ms | claimed safe | holds |
| redis-lua | Sentinel: primary + 2 replicas, 3 sentinels | primary paused until the sentinels promoted a replica, then 3×TTL more; resumed, it is demoted; ReplicaAck(1) | 520 (0 cancelled) | 0 | 0 / 0 | 0 | yes | 9 ms | claimed safe | holds |
| redis-lua | Sentinel: primary + 2 replicas, 3 sentinels | primary killed (SIGKILL), a replica promoted by the sentinels | 510 (0 cancelled) | 0 | 0 / 0 | 0 | **no** | 900 ms | documented unsafe | unsafe, as documented |
| redlock | 5 servers | 1 of 5 nodes killed, restarted empty after TTL | 526 (0 cancelled) | 0 | 0 / — (no fencing) | 0 | — | 6 ms | claimed safe | holds |
| redlock | 5 servers | 3 of 5 nodes restarted empty at once | 515 (2 cancelled) | **2** (max 14 ms) | 0 / — (no fencing) | 0 | — | 39 ms | documented unsafe | unsafe, as documented |
| redlock | 5 servers | client runtime stalled 3×TTL (GC pause) | 520 (0 cancelled) | 0 | 2 / — (no fencing) | 0 | — | 10 ms | claimed safe with fencing | **VIOLATED**: stale write accepted |
";

    fn doc() -> String {
        format!("# Safety under faults\n\n## How the rows run\n\nText.\n\n{RESULTS_TABLE}\n## Soak\n\nrows\n")
    }

    #[test]
    fn rows_are_read_from_the_results_table() {
        let rows = rows_from_results(&doc());
        assert_eq!(rows.len(), 10);
        assert_eq!(rows[1].backend, "redis-lua");
        assert_eq!(rows[1].fault, "none");
        assert_eq!(rows[1].sections, 514);
        assert_eq!(rows[1].claim, "claimed safe");
        assert_eq!(rows[4].backend, "redis-lua (Sentinel)");
        assert_eq!(rows[9].result, "**VIOLATED**: stale write accepted");
    }

    #[test]
    fn cells_sum_sections_per_verdict_and_say_which_rows() {
        let s = section(&rows_from_results(&doc()));
        let line = |backend: &str| {
            s.lines()
                .find(|l| l.starts_with(&format!("| {backend} |")))
                .unwrap_or_default()
                .to_owned()
        };
        assert!(!s.contains("control"), "the control row is no backend: {s}");
        let lua: Vec<String> = line("redis-lua").split(" | ").map(str::to_owned).collect();
        assert_eq!(lua[1], "safe 514", "{s}"); // no fault
        assert_eq!(lua[5], "safe 508 (ReplicaAck) · unsafe 517", "{s}"); // failover
        assert_eq!(lua[8], "—", "{s}"); // not tested
        // The Sentinel rows: a line of their own, every fault a failover.
        let sentinel: Vec<String> = line("redis-lua (Sentinel)").split(" | ").map(str::to_owned).collect();
        assert_eq!(sentinel[5], "safe 1050 (ReplicaAck) · unsafe 510", "{s}");
        assert!(sentinel[1..5].iter().chain(&sentinel[6..9]).all(|c| c == "—"), "{s}");
        let redlock: Vec<String> = line("redlock").split(" | ").map(str::to_owned).collect();
        assert_eq!(redlock[4], "safe 526 (1 of 5) · unsafe 515 (3 of 5)", "{s}"); // data lost
        assert_eq!(redlock[7], "**VIOLATED** 520", "{s}"); // client stalled
        assert!(!s.contains("| other |"), "every fault has a column: {s}");
        let mut matched: Vec<&str> = COLUMNS.iter().map(|(name, _)| *name).collect();
        matched.sort_unstable();
        let mut shown = SHOWN.to_vec();
        shown.sort_unstable();
        assert_eq!(matched, shown, "every column is shown");
    }

    #[test]
    fn the_matrix_is_inserted_after_the_title_then_replaced_in_place() {
        let once = with_matrix(&doc()).expect("a matrix");
        assert!(
            once.starts_with("# Safety under faults\n\n## At a glance\n\n| backend |"),
            "{once}"
        );
        assert!(once.contains("\n## How the rows run\n\nText."), "{once}");
        assert_eq!(with_matrix(&once).expect("again"), once, "rebuilding is idempotent");
        // A changed row changes the matrix in place, nothing else.
        let changed = once.replace("| 514 (0 cancelled) |", "| 600 (0 cancelled) |");
        let rebuilt = with_matrix(&changed).expect("rebuilt");
        assert!(rebuilt.contains("| redis-lua | safe 600 |"), "{rebuilt}");
        assert_eq!(rebuilt.matches(HEADING).count(), 1);
        assert!(with_matrix("# Title\n\nno table\n").is_err());
    }

    /// The committed SAFETY.md's first screen is the matrix of its own
    /// Results table: `verrou-torture --matrix SAFETY.md` changes nothing.
    #[test]
    fn the_committed_safety_md_opens_with_its_matrix() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../SAFETY.md");
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed.starts_with("# Safety under faults\n\n## At a glance\n"),
            "{path}"
        );
        assert_eq!(with_matrix(&committed).as_deref(), Ok(committed.as_str()));
        let first_screen: Vec<&str> = committed.lines().take(14).collect();
        assert!(
            first_screen.iter().any(|l| l.starts_with("| etcd |")),
            "{first_screen:#?}"
        );
    }
}
