//! cli/README.md against the command: its exit-code table lists exactly the
//! codes `verrou --help` lists.

#![allow(clippy::expect_used)]

use std::collections::BTreeSet;
use std::process::Command;

/// The codes of a table's first column (`126 / 127` is two).
fn readme_codes() -> BTreeSet<u8> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("cli/README.md");
    let section = readme.split("\n## Exit codes\n").nth(1).expect("an Exit codes section");
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .filter_map(|row| row.split('|').nth(1))
        .flat_map(|cell| {
            cell.split('/')
                .filter_map(|c| c.trim().parse().ok())
                .collect::<Vec<u8>>()
        })
        .collect()
}

/// The codes `verrou --help` lists under "Exit codes:".
fn help_codes() -> BTreeSet<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_verrou"))
        .arg("--help")
        .output()
        .expect("run verrou --help");
    let help = String::from_utf8(out.stdout).expect("utf-8 help");
    let section = help.split("Exit codes:").nth(1).expect("an exit-code table in --help");
    section
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

#[test]
fn the_readme_exit_codes_are_the_helps() {
    let readme = readme_codes();
    assert!(readme.len() >= 10, "found the table: {readme:?}");
    assert_eq!(readme, help_codes());
}
