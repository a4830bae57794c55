//! The servers' temporary directories, which never outlive their owner
//! process for long:
//!
//! - a server's directory is removed when the server is dropped;
//! - a server that is never dropped (kept in a `static` for a whole test
//!   binary, or alive when the process calls `std::process::exit`) is
//!   SIGKILLed and its directory removed at process exit (`atexit`);
//! - a process that dies without running any code (SIGKILL, abort) leaves
//!   its directories behind: the next process of the harness removes them
//!   when it makes its first directory.
//!
//! A directory is `$TMPDIR/verrou-<kind>-<pid>.<start>.<ns>-XXXXXX`: the
//! owner's pid, its start time (clock ticks after boot, from
//! `/proc/<pid>/stat`, so that a reused pid is not taken for the owner) and
//! its pid namespace (a process in another namespace sharing the folder
//! leaves it alone). Only names of exactly this form are ever removed, and
//! only once no process with that pid and start time runs.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::error::{HarnessError, HarnessResult};
use super::spawn;

/// Prefix of every directory of the harness.
const PREFIX: &str = "verrou-";
/// The file naming the test process that made a PostgreSQL directory, in
/// the directories of earlier versions of the harness (still swept).
const LEGACY_OWNER_FILE: &str = "verrou-owner.pid";
/// How long the exit clean-up waits for killed process groups to be gone.
const EXIT_WAIT: Duration = Duration::from_secs(2);

/// A process, as far as a directory name can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Owner {
    pid: u32,
    start: u64,
    ns: u64,
}

impl Owner {
    /// This process.
    fn me() -> Owner {
        let pid = std::process::id();
        Owner {
            pid,
            start: stat(pid).map_or(0, |s| s.start),
            ns: pid_namespace(),
        }
    }

    /// True when the owner no longer runs: no such pid, a zombie, or a
    /// different process under the same pid. Never true for a process of
    /// another pid namespace (its pids mean nothing here).
    fn is_gone(&self, here_ns: u64) -> bool {
        if self.ns != here_ns {
            return false;
        }
        match stat(self.pid) {
            None => true,
            Some(s) => s.state == 'Z' || s.state == 'X' || s.start != self.start,
        }
    }
}

/// What `/proc/<pid>/stat` says about a process.
struct Stat {
    state: char,
    ppid: u32,
    start: u64,
}

fn stat(pid: u32) -> Option<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: the
    // fields that follow start after its last ')'.
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// The inode of this process's pid namespace (0 when unknown).
fn pid_namespace() -> u64 {
    fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|l| {
            let l = l.to_string_lossy().into_owned();
            l.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
        })
        .unwrap_or(0)
}

/// The owner named by a directory name of the harness, `None` for any other
/// name.
fn owner_of(name: &str) -> Option<Owner> {
    let rest = name.strip_prefix(PREFIX)?;
    let (head, random) = rest.rsplit_once('-')?;
    if random.len() != 6 || !random.chars().all(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    let (kind, tag) = head.rsplit_once('-')?;
    if kind.is_empty() {
        return None;
    }
    let mut parts = tag.split('.').map(|p| p.parse::<u64>().ok());
    let (pid, start, ns) = (parts.next()??, parts.next()??, parts.next()??);
    if parts.next().is_some() {
        return None;
    }
    Some(Owner {
        pid: u32::try_from(pid).ok()?,
        start,
        ns,
    })
}

/// What the exit clean-up removes and kills.
struct Registry {
    /// The process that registered the entries (a forked child inherits the
    /// registry, never the servers or the duty to remove their directories).
    owner: u32,
    dirs: Vec<PathBuf>,
    /// Server processes spawned by this process, with their start times.
    children: Vec<(u32, u64)>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    owner: 0,
    dirs: Vec::new(),
    children: Vec::new(),
});

fn registry() -> MutexGuard<'static, Registry> {
    let mut r = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    let me = std::process::id();
    if r.owner != me {
        // First use, or the first use in a forked child: start afresh.
        r.owner = me;
        r.dirs.clear();
        r.children.clear();
    }
    r
}

/// Registers the exit clean-up, once per process.
fn at_exit_once() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        extern "C" fn clean_up() {
            clean_up_at_exit();
        }
        // SAFETY: registers a plain `extern "C" fn()` to run at exit; it
        // does not unwind (every error is ignored).
        unsafe {
            libc::atexit(clean_up);
        }
    });
}

/// Kills the servers still running and removes the directories still
/// there: those of values that were never dropped.
fn clean_up_at_exit() {
    let me = std::process::id();
    let (dirs, children) = {
        let mut r = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        if r.owner != me {
            return;
        }
        (std::mem::take(&mut r.dirs), std::mem::take(&mut r.children))
    };
    let mut killed = Vec::new();
    for (pid, start) in children {
        if is_my_child(pid, start, me) {
            let _ = spawn::signal_group(pid, libc::SIGKILL);
            let _ = spawn::signal_process(pid, libc::SIGKILL);
            killed.push(pid);
        }
    }
    for pid in &killed {
        if let Ok(p) = libc::pid_t::try_from(*pid) {
            // SAFETY: waits for our own child, killed just above.
            unsafe {
                libc::waitpid(p, std::ptr::null_mut(), 0);
            }
        }
    }
    // What the servers forked (PostgreSQL's backends) dies with the group.
    let deadline = Instant::now() + EXIT_WAIT;
    while killed.iter().any(|pid| spawn::signal_group(*pid, 0).is_ok()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    for dir in dirs {
        let _ = fs::remove_dir_all(dir);
    }
}

fn is_my_child(pid: u32, start: u64, me: u32) -> bool {
    stat(pid).is_some_and(|s| s.ppid == me && s.start == start && s.state != 'Z' && s.state != 'X')
}

/// Records a server process just spawned, so that the exit clean-up kills it
/// if it is still running then.
pub(crate) fn note_child(pid: u32) {
    let Some(start) = stat(pid).map(|s| s.start) else {
        return; // already gone
    };
    at_exit_once();
    let me = std::process::id();
    let mut r = registry();
    // Forget the processes that are gone, so that the list stays as long as
    // the servers running.
    r.children.retain(|&(p, s)| is_my_child(p, s, me));
    r.children.push((pid, start));
}

/// A server's temporary directory (see the module documentation): removed
/// on drop, or at process exit, or by the next process after a crash.
#[derive(Debug)]
pub(crate) struct ServerDir {
    dir: Option<TempDir>,
}

impl ServerDir {
    /// Makes `$TMPDIR/verrou-<kind>-<owner>-XXXXXX`; the first call of a
    /// process first removes the directories of processes that are gone.
    ///
    /// # Errors
    /// [`HarnessError::Io`] when the directory cannot be made.
    pub(crate) fn new(kind: &str) -> HarnessResult<ServerDir> {
        let me = Owner::me();
        static SWEPT: Once = Once::new();
        SWEPT.call_once(|| sweep(&std::env::temp_dir(), me));
        at_exit_once();
        let dir = tempfile::Builder::new()
            .prefix(&format!("{PREFIX}{kind}-{}.{}.{}-", me.pid, me.start, me.ns))
            .rand_bytes(6)
            .tempdir()
            .map_err(|e| HarnessError::io("creating a temporary directory", e))?;
        registry().dirs.push(dir.path().to_path_buf());
        Ok(ServerDir { dir: Some(dir) })
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        self.dir.as_ref().map_or(Path::new(""), TempDir::path)
    }

    /// Keeps the directory: neither drop nor exit removes it any more.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn keep(mut self) -> PathBuf {
        let path = self.path().to_path_buf();
        forget(&path);
        self.dir.take().map_or(path, TempDir::keep)
    }
}

impl Drop for ServerDir {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take() {
            forget(dir.path());
            // Dropping the TempDir removes the directory.
        }
    }
}

fn forget(path: &Path) {
    let mut r = registry();
    if let Some(i) = r.dirs.iter().position(|d| d == path) {
        r.dirs.swap_remove(i);
    }
}

/// Removes the directories in `tmp` whose owner is gone (never `me`'s).
fn sweep(tmp: &Path, me: Owner) {
    let Ok(entries) = fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue; // not a directory (a symlink is never followed)
        }
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        let gone = match owner_of(name) {
            Some(owner) => owner != me && owner.is_gone(me.ns),
            None => legacy_owner_gone(&entry.path(), name),
        };
        if gone {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// A PostgreSQL directory of an earlier harness, whose owner file names a
/// process that no longer runs.
fn legacy_owner_gone(path: &Path, name: &str) -> bool {
    if !name.starts_with("verrou-pg-") {
        return false;
    }
    let owner = fs::read_to_string(path.join(LEGACY_OWNER_FILE)).ok();
    owner
        .and_then(|o| o.trim().parse::<u32>().ok())
        .is_some_and(|pid| stat(pid).is_none_or(|s| s.state == 'Z' || s.state == 'X'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_their_owner_and_nothing_else_parses() {
        let me = Owner::me();
        assert_ne!(me.start, 0);
        let name = format!("verrou-redis-{}.{}.{}-aB3dE9", me.pid, me.start, me.ns);
        assert_eq!(owner_of(&name), Some(me));
        let netns = "verrou-netns-redis-1.2.3-zzzzzz";
        assert_eq!(
            owner_of(netns),
            Some(Owner {
                pid: 1,
                start: 2,
                ns: 3
            })
        );
        for other in [
            "verrou-redis-aB3dE9",
            "verrou-pg-template_usr_lib_postgresql_15_bin_0",
            "verrou-1.2.3-aB3dE9",
            "verrou-redis-1.2-aB3dE9",
            "verrou-redis-1.2.3.4-aB3dE9",
            "verrou-redis-1.2.3-aB3d",
            "verrou-redis-x.2.3-aB3dE9",
            "other-redis-1.2.3-aB3dE9",
        ] {
            assert_eq!(owner_of(other), None, "{other}");
        }
    }

    #[test]
    fn only_dirs_of_gone_owners_of_this_namespace_are_swept() {
        let tmp = tempfile::tempdir().unwrap();
        let me = Owner::me();
        // pid 0 is never a process; pid 1 runs but did not start at tick 1.
        let dead = format!("verrou-redis-0.5.{}-aaaaaa", me.ns);
        let reused = format!("verrou-etcd-1.1.{}-bbbbbb", me.ns);
        let mine = format!("verrou-redis-{}.{}.{}-cccccc", me.pid, me.start, me.ns);
        let init = stat(1).map_or(0, |s| s.start);
        let live = format!("verrou-redis-1.{init}.{}-dddddd", me.ns);
        let elsewhere = format!("verrou-redis-0.5.{}-eeeeee", me.ns.wrapping_add(1));
        let other = "verrou-redis-ffffff".to_owned();
        let file = format!("verrou-redis-0.5.{}-gggggg", me.ns);
        for d in [&dead, &reused, &mine, &live, &elsewhere, &other] {
            fs::create_dir_all(tmp.path().join(d).join("data")).unwrap();
        }
        fs::write(tmp.path().join(&file), "").unwrap();
        sweep(tmp.path(), me);
        let left = |d: &str| tmp.path().join(d).exists();
        assert!(!left(&dead) && !left(&reused));
        assert!(left(&mine) && left(&live) && left(&elsewhere) && left(&other) && left(&file));
    }

    #[test]
    fn a_dir_is_removed_on_drop_and_kept_when_asked() {
        let dir = ServerDir::new("unit").unwrap();
        let path = dir.path().to_path_buf();
        assert!(owner_of(&path.file_name().unwrap().to_string_lossy()) == Some(Owner::me()));
        assert!(registry().dirs.contains(&path));
        drop(dir);
        assert!(!path.exists());
        assert!(!registry().dirs.contains(&path));
        let kept = ServerDir::new("unit").unwrap().keep();
        assert!(kept.is_dir());
        assert!(!registry().dirs.contains(&kept));
        fs::remove_dir_all(kept).unwrap();
    }
}
