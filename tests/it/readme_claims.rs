//! Claims of the README, the guide and ARCHITECTURE.md checked against the
//! code: the README's size and backend table against the facade's features,
//! the guide's defaults table against `LockOptions::default()`, and "the
//! tests never use the default Redis port" (ARCHITECTURE.md) against the test
//! sources and the harness's port range.

#![allow(clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::Duration;

use support::{rust_files, workspace};
use verrou::{Backoff, LockOptions, Renewal};

/// The "verrou" column of the guide's `## Defaults` table (`docs/guide.md`,
/// `verrou::guide`), by setting.
fn readme_defaults() -> Vec<(String, String)> {
    let readme = std::fs::read_to_string(workspace().join("docs/guide.md")).expect("docs/guide.md");
    let section = readme.split("\n## Defaults\n").nth(1).expect("a Defaults section");
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // header and separator
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            (cells[1].to_owned(), cells[2].to_owned())
        })
        .collect()
}

fn secs(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

#[test]
fn the_readme_defaults_table_is_lock_options_default() {
    let o = LockOptions::default();
    let Backoff {
        initial, max, factor, ..
    } = o.backoff;
    let rows = readme_defaults();
    let settings: Vec<&str> = rows.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(
        settings,
        [
            "TTL",
            "renew interval",
            "acquire timeout",
            "backoff",
            "fairness",
            "drift allowance",
            "renew call timeout (`op_timeout`)",
            "release call timeout",
            "longest `acquire_timeout` / `op_timeout`"
        ],
        "every row of the table is checked below"
    );
    for (setting, value) in &rows {
        match setting.as_str() {
            "TTL" => assert_eq!(value, &secs(o.ttl)),
            "renew interval" => {
                assert_eq!(value, "TTL / 3");
                assert_eq!(o.renewal, Renewal::Auto { interval: o.ttl / 3 });
            }
            "acquire timeout" => assert_eq!(value, &secs(o.acquire_timeout)),
            "backoff" => {
                assert_eq!(factor, 2.0, "doubling");
                let head = format!("{} doubling to {}, full jitter", secs(initial), secs(max));
                assert!(value.starts_with(&head), "{value:?} vs {head:?}");
                // "capped by the holder's TTL": lock-core's lifecycle test
                // waiting_is_capped_by_the_holders_remaining_ttl.
            }
            "fairness" => {
                assert_eq!(o.fairness, lock_core::Fairness::Barging);
                assert_eq!(lock_core::Fairness::DEFAULT_CLAIM, Duration::from_secs(1));
                assert!(
                    value.starts_with(&format!(
                        "barging; `fair()`: FIFO queue on the server, entries live `claim` = {}",
                        secs(lock_core::Fairness::DEFAULT_CLAIM)
                    )),
                    "{value:?}"
                );
                // "polled every claim / 3": the manager's fair loop; the
                // fair conformance cases exercise it.
            }
            "drift allowance" => {
                assert_eq!(value, &format!("TTL × {} + 2 ms", o.drift_factor));
                assert_eq!(o.drift(o.ttl), o.ttl.mul_f64(o.drift_factor) + Duration::from_millis(2));
            }
            "renew call timeout (`op_timeout`)" => {
                // "capped by the remaining validity": the manager's renewer.
                assert!(value.starts_with(&format!("{},", secs(o.op_timeout))), "{value:?}");
            }
            "release call timeout" => {
                // "not capped": lock-core's lifecycle test
                // release_is_not_capped_by_the_remaining_validity.
                assert!(
                    value.starts_with(&format!("{} (`op_timeout`", secs(o.op_timeout))),
                    "{value:?}"
                );
            }
            "longest `acquire_timeout` / `op_timeout`" => {
                assert_eq!(
                    lock_core::LockOptions::MAX_TIMEOUT,
                    Duration::from_secs(365 * 24 * 3600)
                );
                assert!(value.starts_with("one year (`LockOptions::MAX_TIMEOUT`"), "{value:?}");
                // "longer is refused": lock-core's option_bounds tests.
            }
            other => panic!("unchecked row {other:?}"),
        }
    }
}

/// The tests reach servers only through the harness, which picks ports in
/// 12000..32000 (its unit test `ports_are_never_the_default_redis_port`);
/// no test source names the default port.
#[test]
fn no_test_names_the_default_redis_port() {
    let default_port = format!("{}{}", 63, 79);
    let mut files = Vec::new();
    for dir in ["tests", "lock-testkit/src"] {
        rust_files(&workspace().join(dir), &mut files);
    }
    for member in std::fs::read_dir(workspace()).expect("workspace").flatten() {
        rust_files(&member.path().join("tests"), &mut files);
    }
    assert!(files.len() > 30, "found the test sources: {files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read");
        assert!(
            !text.contains(&default_port),
            "{} names port {default_port}",
            file.display()
        );
    }
}

/// The README stays a front page (under 12 KB) whose backend table has a row
/// for every backend feature of the facade, each naming its feature.
#[test]
fn the_readme_is_short_and_its_table_names_every_backend_feature() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).expect("README.md");
    assert!(readme.len() < 12 * 1024, "README.md is {} bytes", readme.len());
    let table: Vec<&str> = readme
        .split("\n## Choose a backend\n")
        .nth(1)
        .expect("a Choose a backend section")
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .collect();
    let manifest = std::fs::read_to_string(workspace().join("Cargo.toml")).expect("Cargo.toml");
    let backends = ["memory", "redis-lua", "tair", "postgres", "etcd", "nats", "redlock"];
    for feature in backends {
        assert!(
            manifest.contains(&format!("\n{feature} = [\"dep:lock-")),
            "{feature} is a backend feature of the facade"
        );
        let rows: Vec<&&str> = table
            .iter()
            .filter(|row| {
                row.split('|')
                    .nth(6)
                    .is_some_and(|cell| cell.contains(&format!("`{feature}`")))
            })
            .collect();
        assert_eq!(rows.len(), 1, "one row with feature `{feature}`: {table:#?}");
    }
    assert_eq!(table.len(), backends.len(), "one row per backend");
    assert_eq!(
        manifest.matches(" = [\"dep:lock-").count(),
        backends.len(),
        "every backend feature is in the list above"
    );
}
