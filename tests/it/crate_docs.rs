//! Every backend crate's docs open with an example that runs (a doc test
//! against a server lock-testkit starts, never `no_run` or `ignore`), and say
//! what the backend guarantees, its URL and its features; the facade's
//! `full` feature is every backend but etcd, as the README says.

#![allow(clippy::expect_used)]

use crate::support::workspace;

/// (crate, whether its example needs a server from the harness)
const BACKENDS: [(&str, bool); 7] = [
    ("lock-memory", false),
    ("lock-redis-lua", true),
    ("lock-tair", true),
    ("lock-postgres", true),
    ("lock-etcd", true),
    ("lock-nats", true),
    ("lock-redlock", true),
];

/// The crate-level docs of `krate`: its leading `//!` lines, prefix removed.
fn crate_docs(krate: &str) -> Vec<String> {
    let lib = std::fs::read_to_string(workspace().join(krate).join("src/lib.rs")).expect("lib.rs");
    lib.lines()
        .take_while(|l| l.starts_with("//!"))
        .map(|l| l.trim_start_matches("//!").trim_start_matches(' ').to_owned())
        .collect()
}

#[test]
fn every_backend_crate_opens_with_a_running_example() {
    for (krate, needs_server) in BACKENDS {
        let docs = crate_docs(krate);
        let first_heading = docs.iter().find(|l| l.starts_with("# ")).map(String::as_str);
        assert_eq!(first_heading, Some("# Example"), "{krate}'s docs open with an example");
        let fence = docs.iter().position(|l| l.starts_with("```")).expect("a code block");
        assert_eq!(
            docs[fence], "```",
            "{krate}: a plain doc test (runs; not no_run or ignore)"
        );
        let end = fence + 1 + docs[fence + 1..].iter().position(|l| l == "```").expect("its end");
        let code = docs[fence + 1..end].join("\n");
        for step in ["LockManager", ".lock(", ".release()", "fencing_token()"] {
            assert!(code.contains(step), "{krate}'s example has {step}:\n{code}");
        }
        assert_eq!(
            code.contains("# let") && code.contains("lock_testkit::server::"),
            needs_server,
            "{krate}: hidden lines start the harness's server where one is needed:\n{code}"
        );
        for section in ["# URL", "# Features"] {
            assert!(docs.iter().any(|l| l == section), "{krate} has a {section} section");
        }
        assert!(
            docs.iter()
                .any(|l| l.starts_with("# ") && l.to_lowercase().contains("guarantee")),
            "{krate} says what it guarantees"
        );
    }
}

#[test]
fn full_is_every_backend_but_etcd_as_the_readme_says() {
    let manifest = std::fs::read_to_string(workspace().join("Cargo.toml")).expect("Cargo.toml");
    let full = manifest
        .lines()
        .find_map(|l| l.strip_prefix("full = "))
        .expect("a full feature");
    let mut members: Vec<&str> = full
        .trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .map(|f| f.trim().trim_matches('"'))
        .collect();
    members.sort_unstable();
    assert_eq!(members, ["memory", "nats", "postgres", "redis-lua", "redlock", "tair"]);
    let readme = std::fs::read_to_string(workspace().join("README.md")).expect("README.md");
    let readme = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(readme.contains("So `full` leaves `etcd` out"), "the README says why");
    assert!(
        readme.contains("needs `protoc` to build"),
        "the backend table says what etcd needs"
    );
}
