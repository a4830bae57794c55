//! Locating binaries and modules through the environment.
//!
//! One test function: it changes process-wide environment variables.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use lock_testkit::server::{
    HarnessError, NATS_SERVER_ENV, NatsCluster, REDIS_SERVER_ENV, RedisServer, TAIR_MODULE_ENV, nats_server_binary,
    redis_cli_binary, redis_server_binary, tair_module_path,
};

fn set(key: &str, value: impl AsRef<std::ffi::OsStr>) {
    // SAFETY: this binary has a single test, and nothing else runs
    // concurrently that reads the environment.
    unsafe { std::env::set_var(key, value) }
}

fn unset(key: &str) {
    // SAFETY: as in `set`.
    unsafe { std::env::remove_var(key) }
}

fn restore(key: &str, value: Option<OsString>) {
    match value {
        Some(v) => set(key, v),
        None => unset(key),
    }
}

/// An executable script `dir/name` that runs `server` (same pid, via exec).
fn wrapper(dir: &Path, name: &str, server: &Path) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\nexec '{}' \"$@\"\n", server.display())).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test(flavor = "current_thread")]
async fn binaries_and_modules_come_from_the_environment() {
    let saved_server = std::env::var_os(REDIS_SERVER_ENV);
    let saved_module = std::env::var_os(TAIR_MODULE_ENV);
    let saved_target = std::env::var_os("CARGO_TARGET_DIR");
    let saved_path = std::env::var_os("PATH").unwrap();

    // Whatever this machine uses (the override, if set, else PATH's).
    let server = redis_server_binary().unwrap();
    assert!(server.is_absolute() && server.is_file(), "{}", server.display());
    let cli = redis_cli_binary().unwrap();
    assert!(cli.file_name().unwrap().to_string_lossy().ends_with("-cli"));

    // A missing override is an error saying what to install, not a skip.
    set(REDIS_SERVER_ENV, "/nonexistent/redis-server");
    let err = redis_server_binary().unwrap_err();
    assert!(matches!(err, HarnessError::NotFound { .. }));
    assert!(
        err.to_string().contains("apt-get install -y redis-server redis-tools"),
        "{err}"
    );
    let err = RedisServer::start().await.unwrap_err();
    assert!(matches!(err, HarnessError::NotFound { .. }), "{err}");

    // No override and nothing on PATH: the same advice.
    unset(REDIS_SERVER_ENV);
    let empty = tempfile::tempdir().unwrap();
    set("PATH", empty.path());
    let err = redis_server_binary().unwrap_err();
    assert!(
        err.to_string().contains("apt-get install -y redis-server redis-tools"),
        "{err}"
    );

    // Any compatible server, given by path: here a wrapper named like Valkey's.
    let bin = tempfile::tempdir().unwrap();
    let valkey = wrapper(bin.path(), "valkey-server", &server);
    set(REDIS_SERVER_ENV, &valkey);
    assert_eq!(redis_server_binary().unwrap(), valkey.canonicalize().unwrap());
    let started = RedisServer::start().await.unwrap();
    assert!(started.log_tail(100).contains("valkey-server"));
    assert_eq!(started.cmd(&["PING"]).await.unwrap().as_str(), Some("PONG"));
    started.restart_keeping_data().await.unwrap();
    let dir = started.dir().to_path_buf();
    drop(started);
    assert!(!dir.exists());

    // ... or by a bare name, looked up on PATH.
    let named = wrapper(bin.path(), "my-redis-server", &server);
    set("PATH", bin.path());
    set(REDIS_SERVER_ENV, "my-redis-server");
    assert_eq!(redis_server_binary().unwrap(), named);
    set("PATH", &saved_path);
    restore(REDIS_SERVER_ENV, saved_server);

    // The Tair module: an override must exist; the error says how to build.
    set(TAIR_MODULE_ENV, "/nonexistent/libtair_module.so");
    let err = tair_module_path().unwrap_err();
    assert!(
        err.to_string().contains("cargo build --release -p tair-module"),
        "{err}"
    );
    let err = RedisServer::builder().tair_module().start().await.unwrap_err();
    assert!(
        err.to_string().contains("cargo build --release -p tair-module"),
        "{err}"
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    set(TAIR_MODULE_ENV, file.path());
    assert_eq!(tair_module_path().unwrap(), file.path().canonicalize().unwrap());
    unset(TAIR_MODULE_ENV);

    // The default is the workspace's release build, or CARGO_TARGET_DIR's.
    set("CARGO_TARGET_DIR", empty.path());
    let err = tair_module_path().unwrap_err();
    let expected = empty.path().join("release").join("libtair_module.so");
    assert!(err.to_string().contains(&expected.display().to_string()), "{err}");
    unset("CARGO_TARGET_DIR");
    // Without CARGO_TARGET_DIR: the workspace's own target/release, found
    // (the test command builds it) or named in the error.
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release");
    match tair_module_path() {
        Ok(found) => assert_eq!(
            found,
            workspace.join("libtair_module.so").canonicalize().unwrap(),
            "the workspace's build"
        ),
        Err(e) => assert!(e.to_string().contains(&workspace.display().to_string()), "{e}"),
    }
    restore("CARGO_TARGET_DIR", saved_target);
    restore(TAIR_MODULE_ENV, saved_module);

    // nats-server: an override must exist, and be 2.11 or later (per-key
    // TTL); the error says how to get one.
    let saved_nats = std::env::var_os(NATS_SERVER_ENV);
    set(NATS_SERVER_ENV, "/nonexistent/nats-server");
    let err = nats_server_binary().unwrap_err();
    assert!(matches!(err, HarnessError::NotFound { .. }));
    assert!(err.to_string().contains("scripts/nats.sh"), "{err}");
    let err = NatsCluster::single().await.unwrap_err();
    assert!(err.to_string().contains("scripts/nats.sh"), "{err}");
    let old = bin.path().join("old-nats-server");
    std::fs::write(&old, "#!/bin/sh\necho 'nats-server: v2.9.25'\n").unwrap();
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o755)).unwrap();
    set(NATS_SERVER_ENV, &old);
    let err = nats_server_binary().unwrap_err();
    assert!(
        err.to_string().contains("2.11") && err.to_string().contains("2.9"),
        "{err}"
    );
    restore(NATS_SERVER_ENV, saved_nats);
}
