//! Absurd numbers in the URL are a configuration error (exit 78), never a
//! panic (exit 101), whichever backend's parameter carries them.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use crate::common::verrou;

/// `EX_CONFIG`, the command's exit code for an invalid argument.
const CONFIG: i32 = 78;

#[tokio::test]
async fn absurd_numbers_exit_with_the_config_code() {
    const MAX: &str = "18446744073709551615";
    for url in [
        format!("redis://127.0.0.1:1?replica_ack=1&replica_ack_timeout=1s&ack_connections={MAX}"),
        format!("redis://127.0.0.1:1?replica_ack=1&replica_ack_timeout=1s&response_timeout={MAX}s"),
        format!("redis+cluster://127.0.0.1:1?connect_timeout={MAX}s"),
        format!("tair://127.0.0.1:1?replica_ack=1&replica_ack_timeout=1s&response_timeout={MAX}s"),
        "tair://127.0.0.1:1?ack_connections=0".to_owned(),
        format!("postgres://app@127.0.0.1:1/db?pool_size={MAX}"),
        format!("postgres://app@127.0.0.1:1/db?response_timeout={MAX}s"),
        format!("etcd://127.0.0.1:1?response_timeout={MAX}s"),
        "redlock://?node=memory://&node=memory://&node=memory://&drift_factor=NaN".to_owned(),
        format!("redlock://?node=memory://&node=memory://&node=memory://&node_timeout={MAX}s"),
        "redis://127.0.0.1:1?fencing=true&fencing=false".to_owned(),
    ] {
        let out = verrou("")
            .env_remove("VERROU_URL")
            .args(["status", "--url", &url, "job"])
            .output()
            .await
            .expect("run verrou");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(CONFIG), "{url}: {stderr}");
    }
}
