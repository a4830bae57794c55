//! Every public async fn of the library crates and lock-testkit documents its
//! cancel safety: a `# Cancel safety` section on the fn, or, for a trait
//! method, on the fn or on its trait. The conformance case functions are left
//! out: they are test bodies, public only for the macros that run them.

#![allow(clippy::expect_used, clippy::panic)]

use crate::support;

use support::{rust_files, workspace};

const LIBRARY_SOURCES: [&str; 8] = [
    "lock-postgres/src",
    "src",
    "lock-core/src",
    "lock-memory/src",
    "lock-redis-lua/src",
    "lock-tair/src",
    "lock-redlock/src",
    "lock-testkit/src",
];

/// The conformance case files (`lock-testkit/src/conformance/*_cases.rs`,
/// and `*_cases/*.rs` where one is split by concern).
fn is_case_file(path: &std::path::Path) -> bool {
    let in_conformance = path.parent().is_some_and(|dir| dir.ends_with("conformance"));
    let case_file = path
        .file_name()
        .is_some_and(|name| name.to_string_lossy().ends_with("_cases.rs"));
    // A case file split by concern: `conformance/lock_cases/<concern>.rs`.
    let in_case_dir = path.parent().is_some_and(|dir| {
        dir.parent().is_some_and(|d| d.ends_with("conformance"))
            && dir
                .file_name()
                .is_some_and(|name| name.to_string_lossy().ends_with("_cases"))
    });
    (in_conformance && case_file) || in_case_dir
}

const SECTION: &str = "# Cancel safety";

/// The doc comment right above line `at`, attributes skipped.
fn docs_above(lines: &[&str], at: usize) -> String {
    let mut docs = Vec::new();
    for line in lines[..at].iter().rev().map(|l| l.trim()) {
        if line.starts_with("///") {
            docs.push(line);
        } else if !line.starts_with("#[") {
            break;
        }
    }
    docs.join("\n")
}

/// `file:line: signature` of each public async fn in `source` without a
/// cancel-safety section, and how many have one.
fn undocumented(file: &str, source: &str) -> (Vec<String>, usize) {
    let lines: Vec<&str> = source.lines().collect();
    let (mut missing, mut documented) = (Vec::new(), 0);
    // Brace depth, and the open `pub trait` (its depth, whether its docs
    // have the section).
    let mut depth = 0usize;
    let mut open_trait: Option<(usize, bool)> = None;
    for (i, line) in lines.iter().enumerate() {
        let code = line.trim();
        let next = lines.get(i + 1).map_or("", |l| l.trim());
        if code == "#[cfg(test)]" && next.starts_with("mod ") {
            break; // unit tests are last in a file
        }
        if code.starts_with("pub trait ") {
            open_trait = Some((depth, docs_above(&lines, i).contains(SECTION)));
        }
        let checked = if code.starts_with("pub async fn ") {
            Some(false)
        } else if code.starts_with("async fn ") {
            open_trait
                .filter(|(trait_depth, _)| depth == trait_depth + 1)
                .map(|(_, trait_documented)| trait_documented)
        } else {
            None
        };
        match checked {
            Some(true) => documented += 1,
            Some(false) if docs_above(&lines, i).contains(SECTION) => documented += 1,
            Some(false) => missing.push(format!("{file}:{}: {code}", i + 1)),
            None => {}
        }
        depth = (depth + line.matches('{').count()).saturating_sub(line.matches('}').count());
        if open_trait.is_some_and(|(trait_depth, _)| depth <= trait_depth && line.contains('}')) {
            open_trait = None;
        }
    }
    (missing, documented)
}

#[test]
fn every_public_async_fn_documents_cancel_safety() {
    let mut files = Vec::new();
    for dir in LIBRARY_SOURCES {
        rust_files(&workspace().join(dir), &mut files);
    }
    let (mut missing, mut documented) = (Vec::new(), 0);
    for file in files.iter().filter(|f| !is_case_file(f)) {
        let source = std::fs::read_to_string(file).expect("read");
        let name = file.strip_prefix(workspace()).unwrap_or(file).display().to_string();
        let (m, d) = undocumented(&name, &source);
        missing.extend(m);
        documented += d;
    }
    assert!(documented > 90, "found the public async fns ({documented})");
    assert!(
        missing.is_empty(),
        "public async fns without a `{SECTION}` section:\n{}",
        missing.join("\n")
    );
}

/// The check itself: a missing section is reported, a trait's section
/// covers its methods, unit tests are skipped.
#[test]
fn the_check_finds_a_missing_section() {
    let source = "\
/// Waits.
pub async fn bare() {}

/// Waits.
///
/// # Cancel safety
///
/// Safe.
#[must_use]
pub async fn covered() {}

/// # Cancel safety
///
/// Every method: safe.
pub trait Documented {
    async fn inherits(&self);
}

pub trait Undocumented {
    async fn alone(&self);
}

#[cfg(test)]
mod tests {
    pub async fn helper() {}
}
";
    let (missing, documented) = undocumented("x.rs", source);
    assert_eq!(
        missing,
        ["x.rs:2: pub async fn bare() {}", "x.rs:20: async fn alone(&self);"]
    );
    assert_eq!(documented, 2);
}
