//! Locating the server binary, `redis-cli` and the Tair module.

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::error::{HarnessError, HarnessResult};

/// Environment variable naming the server binary (a path, or a name looked up
/// on `PATH`). Any Redis-compatible server works, Valkey included.
pub const REDIS_SERVER_ENV: &str = "VERROU_REDIS_SERVER";
/// Environment variable naming the sentinel binary (a path, or a name
/// looked up on `PATH`); it runs with `--sentinel`, so `redis-server` (or
/// `valkey-server`) works too.
pub const REDIS_SENTINEL_ENV: &str = "VERROU_REDIS_SENTINEL";
/// Environment variable naming the `redis-cli` binary used to create
/// clusters (a path, or a name looked up on `PATH`).
pub const REDIS_CLI_ENV: &str = "VERROU_REDIS_CLI";
/// Environment variable naming the Tair module (`libtair_module.so`).
pub const TAIR_MODULE_ENV: &str = "VERROU_TAIR_MODULE";

const INSTALL_HINT: &str = "install it with `apt-get install -y redis-server redis-tools`";

/// The server binary to run: `$VERROU_REDIS_SERVER` if set, else
/// `redis-server` on `PATH`.
///
/// # Errors
/// [`HarnessError::NotFound`], saying what to install, when there is no such
/// executable.
pub fn redis_server_binary() -> HarnessResult<PathBuf> {
    match env::var_os(REDIS_SERVER_ENV).filter(|v| !v.is_empty()) {
        Some(v) => resolve(&v).ok_or_else(|| HarnessError::NotFound {
            what: format!("server binary {:?} (from {REDIS_SERVER_ENV})", v),
            hint: format!(
                "{REDIS_SERVER_ENV} must name an executable file or a program on PATH \
                 (e.g. redis-server or valkey-server); or unset it and {INSTALL_HINT}"
            ),
        }),
        None => resolve(&OsString::from("redis-server")).ok_or_else(|| HarnessError::NotFound {
            what: "redis-server".into(),
            hint: format!(
                "no redis-server on PATH; {INSTALL_HINT}, or set {REDIS_SERVER_ENV} \
                 to a Redis-compatible server binary (e.g. valkey-server)"
            ),
        }),
    }
}

/// The sentinel binary to run (with `--sentinel`): `$VERROU_REDIS_SENTINEL`
/// if set, else `redis-sentinel` on `PATH` (Debian's `redis-sentinel`
/// package).
///
/// # Errors
/// [`HarnessError::NotFound`], saying what to install, when there is no such
/// executable.
pub fn redis_sentinel_binary() -> HarnessResult<PathBuf> {
    let hint = format!(
        "install it with `apt-get install -y redis-sentinel`, or set {REDIS_SENTINEL_ENV} to a \
         Redis-compatible server binary (e.g. redis-server or valkey-server: it runs with --sentinel)"
    );
    match env::var_os(REDIS_SENTINEL_ENV).filter(|v| !v.is_empty()) {
        Some(v) => resolve(&v).ok_or_else(|| HarnessError::NotFound {
            what: format!("sentinel binary {:?} (from {REDIS_SENTINEL_ENV})", v),
            hint: format!(
                "{REDIS_SENTINEL_ENV} must name an executable file or a program on PATH; or unset it and {hint}"
            ),
        }),
        None => resolve(&OsString::from("redis-sentinel")).ok_or_else(|| HarnessError::NotFound {
            what: "redis-sentinel".into(),
            hint: format!("no redis-sentinel on PATH; {hint}"),
        }),
    }
}

/// The `redis-cli` to create clusters with: `$VERROU_REDIS_CLI` if set, else
/// a `redis-cli` (or `valkey-cli`) next to the server binary, else one on
/// `PATH`.
///
/// # Errors
/// [`HarnessError::NotFound`], saying what to install, when there is none.
pub fn redis_cli_binary() -> HarnessResult<PathBuf> {
    if let Some(v) = env::var_os(REDIS_CLI_ENV).filter(|v| !v.is_empty()) {
        return resolve(&v).ok_or_else(|| HarnessError::NotFound {
            what: format!("redis-cli {:?} (from {REDIS_CLI_ENV})", v),
            hint: format!("{REDIS_CLI_ENV} must name an executable file or a program on PATH"),
        });
    }
    let names = ["redis-cli", "valkey-cli"];
    if let Ok(server) = redis_server_binary() {
        let server = server.canonicalize().unwrap_or(server);
        if let Some(dir) = server.parent() {
            // Prefer the client matching the server's flavour.
            let valkey = server
                .file_name()
                .is_some_and(|n| n.to_string_lossy().contains("valkey"));
            let ordered = if valkey { ["valkey-cli", "redis-cli"] } else { names };
            for name in ordered {
                let candidate = dir.join(name);
                if is_executable(&candidate) {
                    return Ok(candidate);
                }
            }
        }
    }
    for name in names {
        if let Some(p) = resolve(&OsString::from(name)) {
            return Ok(p);
        }
    }
    Err(HarnessError::NotFound {
        what: "redis-cli".into(),
        hint: format!(
            "needed to create clusters; install it with `apt-get install -y redis-tools`, \
             or set {REDIS_CLI_ENV}"
        ),
    })
}

/// The Tair module: `$VERROU_TAIR_MODULE` if set, else this workspace's
/// `target/release/libtair_module.so` (under `$CARGO_TARGET_DIR` when that is
/// set).
///
/// # Errors
/// [`HarnessError::NotFound`], saying how to build it, when the file is not
/// there.
pub fn tair_module_path() -> HarnessResult<PathBuf> {
    const BUILD_HINT: &str = "build it with `cargo build --release -p tair-module`";
    if let Some(v) = env::var_os(TAIR_MODULE_ENV).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(&v);
        return if p.is_file() {
            Ok(absolute(p))
        } else {
            Err(HarnessError::NotFound {
                what: format!("Tair module {} (from {TAIR_MODULE_ENV})", p.display()),
                hint: format!("{TAIR_MODULE_ENV} must name the built module file; or unset it and {BUILD_HINT}"),
            })
        };
    }
    let file = format!("{}tair_module{}", env::consts::DLL_PREFIX, env::consts::DLL_SUFFIX);
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = match env::var_os("CARGO_TARGET_DIR").filter(|v| !v.is_empty()) {
        Some(t) => {
            let t = PathBuf::from(t);
            if t.is_absolute() { t } else { workspace.join(t) }
        }
        None => workspace.join("target"),
    };
    let p = target.join("release").join(&file);
    if p.is_file() {
        Ok(absolute(p))
    } else {
        Err(HarnessError::NotFound {
            what: format!("Tair module {}", p.display()),
            hint: format!("{BUILD_HINT}, or set {TAIR_MODULE_ENV} to the module file"),
        })
    }
}

fn absolute(p: PathBuf) -> PathBuf {
    p.canonicalize().unwrap_or(p)
}

/// A name containing a `/` is a path; otherwise it is looked up on `PATH`.
pub(crate) fn resolve(name: &OsString) -> Option<PathBuf> {
    let as_path = Path::new(name);
    if as_path.components().count() > 1 || as_path.is_absolute() {
        return is_executable(as_path).then(|| absolute(as_path.to_path_buf()));
    }
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

pub(crate) fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// [`tair_module_path`], building the module first when it is missing and
/// not named by [`TAIR_MODULE_ENV`]: runs `cargo build --release -p
/// tair-module` in this workspace (what the hint of the missing-module error
/// says), so tools such as `verrou-bench` and `verrou-torture` work from a
/// clean clone. Not for tests: `cargo test` holds the build lock.
///
/// # Errors
/// [`HarnessError::NotFound`] when cargo cannot be run, the build fails, or
/// the module is still missing afterwards.
pub fn build_tair_module_if_missing() -> HarnessResult<PathBuf> {
    if let Ok(p) = tair_module_path() {
        return Ok(p);
    }
    if env::var_os(TAIR_MODULE_ENV).is_some_and(|v| !v.is_empty()) {
        return tair_module_path(); // named by the user: never rebuilt
    }
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("the Tair module is not built yet: running `cargo build --release -p tair-module`");
    let status = std::process::Command::new(cargo)
        .args(["build", "--release", "-p", "tair-module"])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .status();
    match status {
        Ok(s) if s.success() => tair_module_path(),
        Ok(s) => Err(HarnessError::NotFound {
            what: "Tair module".into(),
            hint: format!("`cargo build --release -p tair-module` failed ({s}); run it by hand to see why"),
        }),
        Err(e) => Err(HarnessError::NotFound {
            what: "Tair module".into(),
            hint: format!("could not run cargo to build it ({e}); run `cargo build --release -p tair-module`"),
        }),
    }
}
