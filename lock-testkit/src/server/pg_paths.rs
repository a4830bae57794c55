//! Locating the PostgreSQL binaries and the unprivileged user that runs them.

use std::env;
use std::path::{Path, PathBuf};

use super::error::{HarnessError, HarnessResult};

/// Environment variable naming the folder of the PostgreSQL binaries
/// (`initdb`, `postgres`, `pg_basebackup`, `psql`).
pub const PG_BIN_ENV: &str = "VERROU_PG_BIN";
/// Environment variable naming the `pgbouncer` binary (a path).
pub const PGBOUNCER_ENV: &str = "VERROU_PGBOUNCER";
/// The unprivileged user that runs the servers when the tests run as root
/// (PostgreSQL and PgBouncer refuse to run as root).
pub const PG_OS_USER: &str = "postgres";

const INSTALL_HINT: &str = "install it with `apt-get install -y postgresql` (scripts/test.sh does)";

/// The folder holding `initdb` and `postgres`: `$VERROU_PG_BIN` if set, else
/// the newest `/usr/lib/postgresql/<N>/bin` (Debian's layout; not on `PATH`).
///
/// # Errors
/// [`HarnessError::NotFound`], saying what to install, when there is none.
pub fn pg_bin_dir() -> HarnessResult<PathBuf> {
    if let Some(dir) = env::var_os(PG_BIN_ENV).filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        return if has_server(&dir) {
            Ok(dir)
        } else {
            Err(HarnessError::NotFound {
                what: format!("initdb and postgres in {} (from {PG_BIN_ENV})", dir.display()),
                hint: format!(
                    "{PG_BIN_ENV} must name the folder of the PostgreSQL binaries; or unset it and {INSTALL_HINT}"
                ),
            })
        };
    }
    newest_debian_bin(Path::new("/usr/lib/postgresql")).ok_or_else(|| HarnessError::NotFound {
        what: "PostgreSQL (initdb, postgres under /usr/lib/postgresql/<N>/bin)".into(),
        hint: format!("{INSTALL_HINT}, or set {PG_BIN_ENV} to the folder of the binaries"),
    })
}

/// The newest `<root>/<N>/bin` holding `initdb` and `postgres`.
fn newest_debian_bin(root: &Path) -> Option<PathBuf> {
    let mut best: Option<(u32, PathBuf)> = None;
    for entry in std::fs::read_dir(root).ok()?.flatten() {
        let Some(version) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let bin = entry.path().join("bin");
        if has_server(&bin) && best.as_ref().is_none_or(|(v, _)| version > *v) {
            best = Some((version, bin));
        }
    }
    best.map(|(_, bin)| bin)
}

fn has_server(dir: &Path) -> bool {
    is_executable(&dir.join("initdb")) && is_executable(&dir.join("postgres"))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The `pgbouncer` binary: `$VERROU_PGBOUNCER`, else `pgbouncer` on `PATH`
/// or in `/usr/sbin`.
///
/// # Errors
/// [`HarnessError::NotFound`] with an install hint.
pub fn pgbouncer_binary() -> HarnessResult<PathBuf> {
    if let Some(p) = env::var_os(PGBOUNCER_ENV).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return if is_executable(&p) {
            Ok(p)
        } else {
            Err(HarnessError::NotFound {
                what: format!("pgbouncer {} (from {PGBOUNCER_ENV})", p.display()),
                hint: format!("{PGBOUNCER_ENV} must name the pgbouncer executable"),
            })
        };
    }
    let path = env::var_os("PATH").unwrap_or_default();
    env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join("pgbouncer"))
        .find(|p| is_executable(p))
        .ok_or_else(|| HarnessError::NotFound {
            what: "pgbouncer".into(),
            hint: "install it with `apt-get install -y pgbouncer` (scripts/test.sh does), or set VERROU_PGBOUNCER"
                .into(),
        })
}

/// Who runs the server processes: `None` to run as ourselves (not root), or
/// the uid and gid of [`PG_OS_USER`] when we are root.
///
/// # Errors
/// [`HarnessError::NotFound`] when we are root and the user does not exist.
pub(crate) fn run_as() -> HarnessResult<Option<(u32, u32)>> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    match nix::unistd::User::from_name(PG_OS_USER) {
        Ok(Some(user)) => Ok(Some((user.uid.as_raw(), user.gid.as_raw()))),
        _ => Err(HarnessError::NotFound {
            what: format!("the unprivileged user {PG_OS_USER:?} (PostgreSQL refuses to run as root)"),
            hint: format!(
                "Debian's postgresql package creates it; or `useradd --system --user-group {PG_OS_USER}` \
                 (scripts/test.sh does)"
            ),
        }),
    }
}

/// Gives `path` (a folder the harness made) to the user of [`run_as`].
pub(crate) fn give_to(path: &Path, owner: Option<(u32, u32)>) -> HarnessResult<()> {
    if let Some((uid, gid)) = owner {
        nix::unistd::chown(
            path,
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(gid)),
        )
        .map_err(|e| HarnessError::io(format!("chown {}", path.display()), e.into()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_version_wins_and_incomplete_folders_do_not_count() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().expect("tempdir");
        for (version, complete) in [("13", true), ("16", true), ("17", false), ("x", true)] {
            let bin = root.path().join(version).join("bin");
            std::fs::create_dir_all(&bin).expect("mkdir");
            let names: &[&str] = if complete { &["initdb", "postgres"] } else { &["initdb"] };
            for name in names {
                let f = bin.join(name);
                std::fs::write(&f, "").expect("write");
                std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).expect("chmod");
            }
        }
        assert_eq!(newest_debian_bin(root.path()), Some(root.path().join("16").join("bin")));
        assert_eq!(newest_debian_bin(&root.path().join("none")), None);
    }
}
