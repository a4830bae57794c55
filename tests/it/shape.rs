//! The workspace's shape, read from the sources: what an application
//! touches is reachable from the crate root, so the project's own
//! applications (the command and the examples) import nothing from `raw`;
//! each lock-core item has one path; limits are constants of the types they
//! bound; no task-local state in lock-core; no library file over 600
//! lines.

#![allow(clippy::expect_used, clippy::panic)]

use crate::support::{rust_files, workspace};

/// The Rust files of `dir` that name `raw` through `verrou` or `lock_core`
/// (`verrou::raw::…`, or `raw` inside a `use verrou::{…}` list, however
/// the list is laid out over lines).
fn raw_paths(dir: &str) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(&workspace().join(dir), &mut files);
    assert!(!files.is_empty(), "no sources under {dir}");
    let mut found = Vec::new();
    for file in files {
        let source = std::fs::read_to_string(&file).expect("read a source file");
        let flat: String = source.split_whitespace().collect();
        let lists = ["verrou::{", "lock_core::{"].iter().flat_map(|open| {
            flat.match_indices(open)
                .map(|(at, _)| &flat[at..flat[at..].find("};").map_or(flat.len(), |end| at + end)])
        });
        let in_list = lists.into_iter().any(|list| {
            list.split(|c: char| !c.is_alphanumeric() && c != '_')
                .any(|w| w == "raw")
        });
        if in_list || flat.contains("verrou::raw") || flat.contains("lock_core::raw") {
            found.push(file.display().to_string());
        }
    }
    found
}

#[test]
fn the_command_and_the_examples_import_nothing_from_raw() {
    for dir in ["cli/src", "cli/tests", "examples"] {
        let found = raw_paths(dir);
        assert!(found.is_empty(), "applications reach into `raw`:\n{}", found.join("\n"));
    }
}

/// The modules lock-core may keep public, each holding items found under
/// it only (ARCHITECTURE.md says why).
const PUBLIC_MODULES: [&str; 3] = ["raw", "layers", "observe"];

#[test]
fn lock_core_items_have_one_path() {
    let lib = std::fs::read_to_string(workspace().join("lock-core/src/lib.rs")).expect("read lock-core/src/lib.rs");
    let public: Vec<&str> = lib
        .lines()
        .filter_map(|line| line.trim().strip_prefix("pub mod "))
        .map(|rest| rest.trim_end_matches([';', '{', ' ']))
        .collect();
    let extra: Vec<&&str> = public.iter().filter(|m| !PUBLIC_MODULES.contains(m)).collect();
    assert!(
        extra.is_empty(),
        "lock-core modules reachable besides the root: {extra:?}"
    );
    // What the public modules hold is not re-exported at the root too.
    for module in ["layers", "observe"] {
        assert!(
            !lib.contains(&format!("pub use {module}::")),
            "lock-core re-exports items of `{module}` at its root"
        );
    }
}

/// The names a crate root re-exports, outside its `raw` module, from the
/// `pub use` statements of `lib.rs`.
fn root_names(lib: &str) -> Vec<String> {
    let before_raw = lib.split("pub mod raw").next().unwrap_or(lib);
    let flat: String = before_raw.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut names = Vec::new();
    for statement in flat.split("pub use ").skip(1) {
        let statement = statement.split(';').next().unwrap_or_default();
        let items = statement.rsplit_once('{').map_or(statement, |(_, list)| list);
        for item in items.split(',') {
            let item = item.trim().trim_end_matches('}').trim();
            let name = item.rsplit("::").next().unwrap_or(item);
            let name = name.rsplit(" as ").next().unwrap_or(name);
            if !name.is_empty() {
                names.push(name.to_owned());
            }
        }
    }
    names
}

/// Left for the facade's `connect` and the backends' builders until their
/// rework (issue 38) names `LockOptions::MAX_TIMEOUT` or `raw::MAX_TIMEOUT`.
const TRANSITIONAL: [&str; 1] = ["MAX_TIMEOUT"];

#[test]
fn limits_are_constants_of_the_types_they_bound() {
    for lib in ["src/lib.rs", "lock-core/src/lib.rs"] {
        let source = std::fs::read_to_string(workspace().join(lib)).expect("read lib.rs");
        let names = root_names(&source);
        assert!(
            names.iter().any(|n| n == "LockOptions"),
            "{lib}: no root names read: {names:?}"
        );
        let free: Vec<&String> = names
            .iter()
            .filter(|n| {
                n.len() > 1
                    && n.chars()
                        .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
            })
            .filter(|n| !TRANSITIONAL.contains(&n.as_str()))
            .collect();
        assert!(free.is_empty(), "{lib}: free constants at the root: {free:?}");
    }
    assert_eq!(
        verrou::LockOptions::MAX_TTL,
        std::time::Duration::from_secs(365 * 24 * 3600)
    );
    assert!(verrou::Fairness::MIN_CLAIM < verrou::Fairness::DEFAULT_CLAIM);
    assert_eq!(verrou::Semaphore::MAX_PERMITS, 1 << 20);
    assert_eq!(verrou::MultiLockManager::MAX_KEYS, 64);
    assert_eq!(verrou::ElectionManager::MAX_IDENTITY, 4096);
}

#[test]
fn lock_core_keeps_no_task_local_state() {
    let mut files = Vec::new();
    rust_files(&workspace().join("lock-core/src"), &mut files);
    assert!(!files.is_empty(), "no lock-core sources");
    let found: Vec<String> = files
        .iter()
        .filter(|file| {
            let source = std::fs::read_to_string(file).expect("read a source file");
            source.contains("task_local!")
        })
        .map(|file| file.display().to_string())
        .collect();
    assert!(
        found.is_empty(),
        "task-local state in lock-core (pass it explicitly): {found:?}"
    );
}

/// The longest a library source file may be: past it, split by concern.
const MAX_LINES: usize = 600;

#[test]
fn no_library_file_is_over_600_lines() {
    let root = workspace();
    let mut libraries = vec![root.join("src")];
    for entry in std::fs::read_dir(root).expect("read the workspace").flatten() {
        let src = entry.path().join("src");
        if src.join("lib.rs").is_file() {
            libraries.push(src);
        }
    }
    assert!(libraries.len() > 5, "library crates found: {libraries:?}");
    let mut over = Vec::new();
    for src in libraries {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in files {
            let lines = std::fs::read_to_string(&file)
                .expect("read a source file")
                .lines()
                .count();
            let name = file.strip_prefix(root).unwrap_or(&file).display().to_string();
            if lines > MAX_LINES {
                over.push(format!("{name}: {lines} lines"));
            }
        }
    }
    assert!(
        over.is_empty(),
        "library files over {MAX_LINES} lines:\n{}",
        over.join("\n")
    );
}

/// A public signature's client type is reachable through the crate that
/// uses it (this compiles only when it is).
#[cfg(feature = "etcd")]
#[allow(dead_code)]
fn etcd_client_type(backend: &verrou::etcd::EtcdBackend) -> &verrou::etcd::etcd_client::Client {
    backend.client()
}

#[test]
fn debug_impls_say_they_hide_fields() {
    let root = workspace();
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    for entry in std::fs::read_dir(root).expect("read the workspace").flatten() {
        if entry.file_name().to_string_lossy().starts_with("lock-") {
            rust_files(&entry.path().join("src"), &mut files);
        }
    }
    let mut found = Vec::new();
    for file in files {
        let name = file.strip_prefix(root).unwrap_or(&file).display().to_string();
        let source = std::fs::read_to_string(&file).expect("read a source file");
        let flat: String = source.split_whitespace().collect();
        // A hand-written `debug_struct` that ends with `.finish()`: a
        // reader cannot tell the fields shown are not all of them.
        for (at, _) in flat.match_indices("debug_struct(") {
            let rest = &flat[at..];
            let plain = rest.find(".finish()");
            let marked = rest.find(".finish_non_exhaustive()");
            if plain.is_some_and(|p| marked.is_none_or(|m| p < m)) {
                found.push(name.clone());
            }
        }
    }
    assert!(found.is_empty(), "Debug impls that end with .finish(): {found:?}");
}
