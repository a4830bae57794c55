//! The processes around a PostgreSQL server: running its binaries as the
//! owner, the `initdb` template, finding and sweeping its processes and
//! directories.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::error::{HarnessError, HarnessResult};
use super::pg_paths::give_to;
use super::postgres::PG_USER;
use super::scratch::ServerDir;

/// A command run as `owner` (when set) from `cwd`.
pub(crate) fn owned_command(program: &Path, owner: Option<(u32, u32)>, cwd: &Path) -> Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(program);
    cmd.current_dir(cwd).env("LC_ALL", "C");
    if let Some((uid, gid)) = owner {
        cmd.uid(uid).gid(gid);
    }
    cmd
}

/// Runs a short-lived command to completion, failing with its output.
pub(crate) async fn run_to_end(mut cmd: Command, what: &str) -> HarnessResult<String> {
    cmd.stdin(Stdio::null());
    let out = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| HarnessError::io(format!("running {what}"), e))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(HarnessError::Reply {
            command: what.to_owned(),
            message: format!(
                "{}: {}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            ),
        })
    }
}

pub(crate) async fn psql(bin: &Path, port: u16, sql: &str) -> HarnessResult<String> {
    let mut cmd = Command::new(bin.join("psql"));
    cmd.args([
        "-X",
        "-q",
        "-A",
        "-t",
        "-v",
        "ON_ERROR_STOP=1",
        "-h",
        "127.0.0.1",
        "-U",
        PG_USER,
        "-d",
        "postgres",
    ])
    .arg("-p")
    .arg(port.to_string())
    .arg("-c")
    .arg(sql)
    .env("PGCONNECT_TIMEOUT", "5");
    run_to_end(cmd, &format!("psql -c {sql:?}")).await
}

/// `initdb` once per machine (per binaries folder and owner): the result is
/// kept in the system's temporary folder and copied by every server, since
/// `initdb` costs seconds and a copy milliseconds. Made in a scratch folder
/// and renamed into place, so concurrent test processes never see half of it.
pub(crate) async fn template_data_dir(bin: &Path, owner: Option<(u32, u32)>) -> HarnessResult<PathBuf> {
    static INIT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one_at_a_time = INIT.lock().await;
    let tag: String = format!("{}-{}", bin.display(), owner.map_or(0, |o| o.0))
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let kept = std::env::temp_dir().join(format!("verrou-pg-template{tag}"));
    let data = kept.join("data");
    if data.join("PG_VERSION").is_file() {
        return Ok(data);
    }
    let scratch = ServerDir::new("pg-initdb")?;
    give_to(scratch.path(), owner)?;
    let mut cmd = owned_command(&bin.join("initdb"), owner, scratch.path());
    cmd.arg("-D").arg(scratch.path().join("data")).args([
        "-U",
        PG_USER,
        "--auth=trust",
        "-E",
        "UTF8",
        "--locale=C",
        "--no-sync",
    ]);
    run_to_end(cmd, "initdb").await?;
    let scratch = scratch.keep();
    if fs::rename(&scratch, &kept).is_err() {
        // Another process won the race: use its copy.
        let _ = fs::remove_dir_all(&scratch);
    }
    if data.join("PG_VERSION").is_file() {
        Ok(data)
    } else {
        Err(HarnessError::Setup(format!(
            "the initdb template {} is incomplete",
            kept.display()
        )))
    }
}

/// `cp -a`: keeps the owner and the 0700 mode PostgreSQL insists on.
pub(crate) async fn copy_tree(from: &Path, to: &Path) -> HarnessResult<()> {
    let mut cmd = Command::new("cp");
    cmd.arg("-a").arg(from).arg(to);
    run_to_end(cmd, "cp -a (the initdb template)").await.map(drop)
}

/// True while `pid` exists and is not a zombie (a killed backend whose new
/// parent has not reaped it yet holds no shared memory any more).
pub(crate) fn is_alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X')
    })
}

/// Pids whose parent is `pid` (from `/proc`).
pub(crate) fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|stat| {
                // The parent pid is the second field after the command name.
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(pid)
            })
        })
        .collect()
}
