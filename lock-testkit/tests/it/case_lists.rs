//! Every conformance case function is in its macro's case list, and every
//! listed name is a case: a case missing from the list would otherwise
//! compile and silently never run.

#![allow(clippy::expect_used, clippy::panic)] // test helpers

use std::collections::BTreeSet;

const MACROS: &str = include_str!("../../src/conformance/macros.rs");

/// Names of the `pub async fn` cases of one case file, and of the shared
/// cases it re-exports (`pub use super::reserved_cases::name;`).
fn case_functions(source: &str) -> BTreeSet<String> {
    let defined = source
        .lines()
        .filter_map(|line| line.strip_prefix("pub async fn "))
        .map(|rest| rest.split('(').next().expect("a name").trim().to_owned());
    let shared = source
        .lines()
        .filter_map(|line| line.strip_prefix("pub use super::reserved_cases::"))
        .map(|rest| rest.trim_end_matches(';').trim().to_owned());
    defined.chain(shared).collect()
}

/// Names listed after `module:` in the `[module: case, ...]` list of `list_macro`.
fn listed_cases(list_macro: &str, module: &str) -> BTreeSet<String> {
    let start = MACROS
        .find(&format!("macro_rules! {list_macro}"))
        .unwrap_or_else(|| panic!("macro {list_macro} not found"));
    let body = &MACROS[start..];
    let marker = format!("{module}:");
    let from = body
        .find(&marker)
        .unwrap_or_else(|| panic!("no `{marker}` list in {list_macro}"))
        + marker.len();
    let to = from + body[from..].find(']').expect("end of the case list");
    body[from..to]
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect()
}

fn assert_same(file: &str, functions: &BTreeSet<String>, listed: &BTreeSet<String>) {
    let unlisted: Vec<_> = functions.difference(listed).collect();
    let unknown: Vec<_> = listed.difference(functions).collect();
    assert!(
        unlisted.is_empty() && unknown.is_empty(),
        "{file}: cases missing from the macro list (they would never run): {unlisted:?}; \
         listed names that are not cases: {unknown:?}"
    );
    assert!(
        functions.len() >= 4, // the fair suite has four
        "{file}: the parser found too few cases: {functions:?}"
    );
}

#[test]
fn every_lock_case_is_in_the_macro_list() {
    // The lock cases are grouped by concern in submodules of `lock_cases`.
    let functions: BTreeSet<String> = [
        include_str!("../../src/conformance/lock_cases.rs"),
        include_str!("../../src/conformance/lock_cases/exclusion.rs"),
        include_str!("../../src/conformance/lock_cases/lease.rs"),
        include_str!("../../src/conformance/lock_cases/cancellation.rs"),
        include_str!("../../src/conformance/lock_cases/outside_runtime.rs"),
        include_str!("../../src/conformance/lock_cases/unrenewed.rs"),
    ]
    .into_iter()
    .flat_map(case_functions)
    .collect();
    assert_same(
        "lock_cases.rs",
        &functions,
        &listed_cases("lock_conformance", "lock_cases"),
    );
}

#[test]
fn every_inspect_case_is_in_the_lock_macro() {
    let functions = case_functions(include_str!("../../src/conformance/inspect_cases.rs"));
    assert_same(
        "inspect_cases.rs",
        &functions,
        &listed_cases("lock_conformance", "inspect_cases"),
    );
}

#[test]
fn every_min_hold_case_is_in_the_lock_macro() {
    let functions = case_functions(include_str!("../../src/conformance/min_hold_cases.rs"));
    assert_same(
        "min_hold_cases.rs",
        &functions,
        &listed_cases("lock_conformance", "min_hold_cases"),
    );
}

#[test]
fn every_versioned_case_is_in_the_macro_list() {
    let functions = case_functions(include_str!("../../src/conformance/versioned_cases.rs"));
    assert_same(
        "versioned_cases.rs",
        &functions,
        &listed_cases("versioned_conformance", "versioned_cases"),
    );
}

#[test]
fn every_kind_case_is_in_its_macro_list() {
    let kinds = [
        ("fair", include_str!("../../src/conformance/fair_cases.rs")),
        ("semaphore", include_str!("../../src/conformance/semaphore_cases.rs")),
        ("multi", include_str!("../../src/conformance/multi_cases.rs")),
        ("rw", include_str!("../../src/conformance/rw_cases.rs")),
        ("election", include_str!("../../src/conformance/election_cases.rs")),
        ("renew_many", include_str!("../../src/conformance/renew_many_cases.rs")),
    ];
    for (kind, source) in kinds {
        let module = format!("{kind}_cases");
        let listed = listed_cases(&format!("{kind}_conformance"), &module);
        assert_same(&format!("{module}.rs"), &case_functions(source), &listed);
    }
}

#[test]
fn every_semaphore_token_case_is_in_the_semaphore_macro() {
    // A case file of its own, listed in `semaphore_conformance!` after the
    // main list (too few cases for `assert_same`'s parser check).
    let functions = case_functions(include_str!("../../src/conformance/semaphore_token_cases.rs"));
    let listed = listed_cases("semaphore_conformance", "semaphore_token_cases");
    assert!(!functions.is_empty(), "the parser found no case");
    assert_eq!(
        functions, listed,
        "semaphore_token_cases.rs and its list in semaphore_conformance!"
    );
}

#[test]
fn every_semaphore_inspect_case_is_in_the_semaphore_macro() {
    let functions = case_functions(include_str!("../../src/conformance/semaphore_inspect_cases.rs"));
    let listed = listed_cases("semaphore_conformance", "semaphore_inspect_cases");
    assert!(!functions.is_empty(), "the parser found no case");
    assert_eq!(
        functions, listed,
        "semaphore_inspect_cases.rs and its list in semaphore_conformance!"
    );
}

#[test]
fn every_rw_inspect_case_is_in_the_rw_macro() {
    let functions = case_functions(include_str!("../../src/conformance/rw_inspect_cases.rs"));
    let listed = listed_cases("rw_conformance", "rw_inspect_cases");
    assert!(!functions.is_empty(), "the parser found no case");
    assert_eq!(functions, listed, "rw_inspect_cases.rs and its list in rw_conformance!");
}
