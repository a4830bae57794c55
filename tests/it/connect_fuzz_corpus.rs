//! The `connect_url` fuzz target's corpus (`fuzz/corpus/connect_url`,
//! minimized, with every input its runs found), replayed through
//! [`verrou::connect::check_url`] on the stable toolchain: a target or a typed error
//! for each, never a panic; and the `redact_url` target's corpus
//! (`fuzz/corpus/redact_url`) through its property: a redacted URL never
//! depends on a byte of its user-info; and the `backend_configs` target's
//! corpus through each backend crate's own grammar: no piece of a password
//! in any error, `Debug` or description.
#![cfg(all(
    feature = "memory",
    feature = "redis-lua-tls",
    feature = "tair-tls",
    feature = "redlock"
))]
#![allow(clippy::panic, missing_docs)]

use std::path::Path;

/// Every input of the corpus `fuzz/corpus/<target>`, with its path.
fn corpus(target: &str) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut inputs = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.map(|e| e.path()).unwrap_or_else(|e| panic!("{e}"));
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        inputs.push((path, data));
    }
    assert!(!inputs.is_empty(), "empty corpus in {}", dir.display());
    inputs
}

#[test]
fn the_url_fuzz_corpus_replays_without_a_panic() {
    for (_, data) in corpus("connect_url") {
        if let Ok(url) = std::str::from_utf8(&data) {
            let _ = verrou::connect::check_url(url);
        }
    }
}

#[test]
fn the_redaction_fuzz_corpus_never_shows_the_user_info() {
    for (path, data) in corpus("redact_url") {
        if let Err(e) = lock_testkit::redaction::user_info_is_hidden(&data) {
            panic!("{}: {e}", path.display());
        }
    }
}

#[cfg(all(feature = "postgres", feature = "etcd", feature = "nats"))]
#[test]
fn the_config_fuzz_corpus_never_shows_a_password() {
    use lock_testkit::redaction::config_hides_password;
    for (path, data) in corpus("backend_configs") {
        for check in [
            config_hides_password::<verrou::memory::MemoryConfig>(&data),
            config_hides_password::<verrou::redis_lua::RedisLuaConfig>(&data),
            config_hides_password::<verrou::tair::TairConfig>(&data),
            config_hides_password::<verrou::redlock::RedlockConfig>(&data),
            config_hides_password::<verrou::postgres::PostgresConfig>(&data),
            config_hides_password::<verrou::etcd::EtcdConfig>(&data),
            config_hides_password::<verrou::nats::NatsConfig>(&data),
        ] {
            if let Err(e) = check {
                panic!("{}: {e}", path.display());
            }
        }
    }
}
