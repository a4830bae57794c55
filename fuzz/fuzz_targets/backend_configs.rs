//! Every backend crate's own URL grammar (`BackendConfig::from_url`):
//! any input gives a config or a typed error, never a panic, and no piece
//! of a password shows in the error, the config's `Debug` or its
//! description (`lock_testkit::redaction::config_hides_password`).
#![no_main]

use lock_testkit::redaction::config_hides_password;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let checks = [
        config_hides_password::<verrou::memory::MemoryConfig>(data),
        config_hides_password::<verrou::redis_lua::RedisLuaConfig>(data),
        config_hides_password::<verrou::tair::TairConfig>(data),
        config_hides_password::<verrou::redlock::RedlockConfig>(data),
        config_hides_password::<verrou::postgres::PostgresConfig>(data),
        config_hides_password::<verrou::etcd::EtcdConfig>(data),
        config_hides_password::<verrou::nats::NatsConfig>(data),
    ];
    for check in checks {
        if let Err(e) = check {
            panic!("{e}");
        }
    }
});
