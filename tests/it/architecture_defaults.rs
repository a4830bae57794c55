//! ARCHITECTURE.md's table of constructors, schemes and defaults says what
//! each backend's config type says.
#![allow(clippy::panic)]

use std::time::Duration;

use verrou::raw::BackendConfig;

/// The table's row for `backend`, cell by cell.
fn row(backend: &str) -> Vec<String> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/ARCHITECTURE.md"))
        .unwrap_or_else(|e| panic!("ARCHITECTURE.md: {e}"));
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("| {backend} | `")))
        .unwrap_or_else(|| panic!("no row for {backend} in ARCHITECTURE.md's defaults table"));
    line.trim_matches('|')
        .split(" | ")
        .map(|c| c.trim().to_owned())
        .collect()
}

fn schemes(row: &[String]) -> Vec<String> {
    row[2].split(", ").map(str::to_owned).collect()
}

fn duration(cell: &str) -> Option<Duration> {
    (cell != "—").then(|| humantime::parse_duration(cell).unwrap_or_else(|e| panic!("{cell}: {e}")))
}

fn check<C: BackendConfig>(backend: &str, config_name: &str) -> Vec<String> {
    let row = row(backend);
    assert_eq!(row[1], format!("`{config_name}`"), "{backend}: config type");
    assert_eq!(schemes(&row), C::SCHEMES, "{backend}: schemes");
    row
}

#[test]
fn the_table_says_what_the_configs_say() {
    check::<verrou::memory::MemoryConfig>("memory", "MemoryConfig");

    let row = check::<verrou::redis_lua::RedisLuaConfig>("redis-lua", "RedisLuaConfig");
    let c = verrou::redis_lua::RedisLuaConfig::default();
    assert_eq!(duration(&row[3]), Some(c.connect_timeout));
    assert_eq!(duration(&row[4]), Some(c.response_timeout));
    assert!(row[5].contains(&format!("ack_connections={}", c.ack_connections)));
    assert!(row[5].contains(&format!("fencing={}", c.fencing)));

    let row = check::<verrou::tair::TairConfig>("tair", "TairConfig");
    let c = verrou::tair::TairConfig::default();
    assert_eq!(duration(&row[3]), Some(c.connect_timeout));
    assert_eq!(duration(&row[4]), Some(c.response_timeout));
    assert!(row[5].contains(&format!("ack_connections={}", c.ack_connections)));
    assert!(row[5].contains(&format!("fencing={}", c.fencing)));

    let row = check::<verrou::redlock::RedlockConfig>("redlock", "RedlockConfig");
    let c = verrou::redlock::RedlockConfig::default();
    assert!(row[5].contains(&format!("drift_factor={}", c.drift_factor)));
    assert_eq!(c.quorum, None, "a majority");

    let row = check::<verrou::postgres::PostgresConfig>("postgres", "PostgresConfig");
    let c = verrou::postgres::PostgresConfig::default();
    assert_eq!(duration(&row[3]), Some(c.connect_timeout));
    assert_eq!(duration(&row[4]), Some(c.response_timeout));
    assert!(row[5].contains(&format!("pool_size={}", c.pool_size)));
    assert!(row[5].contains(&format!("schema={}", c.schema)));
    assert!(row[5].contains(&format!("create_schema={}", c.create_schema)));
    assert!(row[5].contains("release_notifications=true") && c.release_notifications.is_none());
    assert!(row[5].contains("mode=lease") && c.mode == verrou::postgres::PostgresMode::Lease);
    assert!(row[5].contains("fencing=false") && c.fencing.is_none());

    let row = check::<verrou::etcd::EtcdConfig>("etcd", "EtcdConfig");
    let c = verrou::etcd::EtcdConfig::default();
    assert_eq!(duration(&row[3]), Some(c.connect_timeout));
    assert_eq!(duration(&row[4]), Some(c.response_timeout));
    assert!(row[5].contains(&format!("namespace={}", c.namespace)));

    let row = check::<verrou::nats::NatsConfig>("nats", "NatsConfig");
    let c = verrou::nats::NatsConfig::default();
    assert_eq!(duration(&row[3]), Some(c.connect_timeout));
    assert_eq!(duration(&row[4]), Some(c.response_timeout));
    assert!(row[5].contains(&format!("bucket={}", c.bucket)));
    assert!(row[5].contains(&format!("replicas={}", c.replicas)));
    assert!(row[5].contains(&format!("marker_ttl={}s", c.marker_ttl.as_secs())));
}

/// Every URL in the README, the guide and the command's README that names
/// a scheme passes `check_url` (the spellings users copy keep working).
#[test]
fn the_documented_urls_are_valid() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut checked = 0;
    for doc in ["README.md", "docs/guide.md", "cli/README.md"] {
        let text = std::fs::read_to_string(format!("{root}/{doc}")).unwrap_or_else(|e| panic!("{doc}: {e}"));
        for url in documented_urls(&text) {
            verrou::connect::check_url(&url).unwrap_or_else(|e| panic!("{doc}: {url}: {e}"));
            checked += 1;
        }
    }
    assert!(checked >= 5, "only {checked} URLs found in the docs");
}

/// URLs inside backticks or quotes, with a known scheme and no placeholder
/// (`HOST`, `…`).
fn documented_urls(text: &str) -> Vec<String> {
    let schemes = verrou::connect::schemes();
    let mut urls = Vec::new();
    for piece in text.split(['`', '"']) {
        let Some((scheme, _)) = piece.split_once("://") else {
            continue;
        };
        let known = schemes.split(", ").any(|s| s == format!("{scheme}://"));
        let placeholder = piece.contains(['…', '[', '<', ' '])
            || piece.chars().any(|c| c.is_ascii_uppercase())
            || piece.ends_with("://");
        if known && !placeholder {
            urls.push(piece.to_owned());
        }
    }
    urls
}

/// The facade only dispatches: no backend's parameter name appears in
/// `src/` (quoted, or as `name=`); each backend crate owns its grammar.
#[test]
fn the_facade_names_no_backend_parameter() {
    let params: Vec<&str> = [
        verrou::memory::MemoryConfig::PARAMS,
        verrou::redis_lua::RedisLuaConfig::PARAMS,
        verrou::tair::TairConfig::PARAMS,
        verrou::redlock::RedlockConfig::PARAMS,
        verrou::postgres::PostgresConfig::PARAMS,
        verrou::etcd::EtcdConfig::PARAMS,
        verrou::nats::NatsConfig::PARAMS,
    ]
    .concat();
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
    let mut files = vec![std::path::PathBuf::from(src)];
    let mut found = Vec::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())) {
                files.push(entry.unwrap_or_else(|e| panic!("{e}")).path());
            }
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for name in &params {
            if text.contains(&format!("`{name}`")) || text.contains(&format!("{name}=")) {
                found.push(format!("{}: {name}", path.display()));
            }
        }
    }
    assert!(found.is_empty(), "backend parameters named in src/: {found:?}");
}
