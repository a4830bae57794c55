//! `get`, `set`, `cas`, `delete`: versioned values from the shell.

use std::io::Write;
use std::sync::Arc;

use serde_json::json;
use verrou::{
    Backend, CasOutcome, CreateOutcome, DeleteOutcome, Expiry, UpdateOptions, Versioned, VersionedStore,
    VersionedStoreExt,
};

use crate::args::{CasArgs, DeleteArgs, Expected, SetArgs};
use crate::exit::{CONFIG, Failure, NO, OK, SOFTWARE};

fn store(backend: &Backend) -> Result<&Arc<dyn VersionedStore>, Failure> {
    backend.store().ok_or_else(|| {
        Failure::new(
            CONFIG,
            format!(
                "{} has no versioned store (Redlock only locks): point --url at one redis:// or tair:// server",
                backend.description()
            ),
        )
    })
}

fn expiry(ttl: Option<std::time::Duration>) -> Expiry {
    ttl.map_or(Expiry::Keep, Expiry::After)
}

/// `value` as JSON fields: `value` when UTF-8, `value_hex` otherwise.
fn value_json(key: &str, v: &Versioned) -> serde_json::Value {
    match std::str::from_utf8(&v.value) {
        Ok(text) => json!({"key": key, "value": text, "version": v.version}),
        Err(_) => {
            let hex: String = v.value.iter().map(|b| format!("{b:02x}")).collect();
            json!({"key": key, "value_hex": hex, "version": v.version})
        }
    }
}

/// Human form: the value's bytes on one line, then `version N`.
fn print_value(v: &Versioned) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    out.write_all(&v.value)
        .and_then(|()| writeln!(out))
        .and_then(|()| writeln!(out, "version {}", v.version))
        .map_err(|e| Failure::new(SOFTWARE, format!("cannot write to stdout: {e}")))
}

fn print_json(value: &serde_json::Value) {
    println!("{value}");
}

/// `verrou get KEY`.
pub async fn get(backend: &Backend, key: &str, json: bool) -> Result<u8, Failure> {
    match store(backend)?.get(key).await? {
        Some(v) => {
            if json {
                print_json(&value_json(key, &v));
            } else {
                print_value(&v)?;
            }
            Ok(OK)
        }
        None => {
            if json {
                print_json(&json!({"key": key, "value": null}));
            } else {
                eprintln!("verrou: {key:?} is absent");
            }
            Ok(NO)
        }
    }
}

/// `verrou set KEY VALUE`: last writer wins, through compare-and-set retries.
pub async fn set(backend: &Backend, args: SetArgs, json: bool) -> Result<u8, Failure> {
    let value = args.value.into_bytes();
    let options = UpdateOptions::default().expiry(expiry(args.ttl));
    let store = store(backend)?;
    let current = store.get(&args.key).await?;
    let written = store
        .update_from_opts(&args.key, current, &options, |_| Some(value.clone()))
        .await?
        .ok_or_else(|| Failure::new(SOFTWARE, "the write was declined"))?;
    if json {
        print_json(&json!({"key": args.key, "version": written.version}));
    } else {
        println!("version {}", written.version);
    }
    Ok(OK)
}

/// `verrou cas KEY EXPECTED VALUE`.
pub async fn cas(backend: &Backend, args: CasArgs, json: bool) -> Result<u8, Failure> {
    let store = store(backend)?;
    let value = args.value.as_bytes();
    let expiry = expiry(args.ttl);
    let key = args.key.as_str();
    let written = match args.expected {
        Expected::Absent => match store.create(key, value, expiry).await? {
            CreateOutcome::Created { version } => Some(version),
            _ => None,
        },
        Expected::Version(expected) => match store.compare_and_set(key, expected, value, expiry).await? {
            CasOutcome::Written { version } => Some(version),
            CasOutcome::Conflict(current) => return conflict(key, Some(current), json),
            _ => return conflict(key, None, json),
        },
    };
    match written {
        Some(version) => {
            if json {
                print_json(&json!({"key": key, "written": true, "version": version}));
            } else {
                println!("version {version}");
            }
            Ok(OK)
        }
        // `none` expected, but the key exists: show what it holds.
        None => {
            let current = store.get(key).await?;
            conflict(key, current, json)
        }
    }
}

/// Report a refused write with what the key holds now; exit 1.
fn conflict(key: &str, current: Option<Versioned>, json: bool) -> Result<u8, Failure> {
    match (&current, json) {
        (Some(v), true) => {
            let mut object = value_json(key, v);
            object["written"] = json!(false);
            print_json(&object);
        }
        (None, true) => print_json(&json!({"key": key, "written": false, "value": null})),
        (Some(v), false) => {
            eprintln!("verrou: conflict: {key:?} is not at the expected version; it holds:");
            print_value(v)?;
        }
        (None, false) => eprintln!("verrou: conflict: {key:?} is absent"),
    }
    Ok(NO)
}

/// `verrou delete KEY [--version V]`.
pub async fn delete(backend: &Backend, args: DeleteArgs, json: bool) -> Result<u8, Failure> {
    let store = store(backend)?;
    let key = args.key.as_str();
    let report = |deleted: bool, detail: &str| {
        if json {
            print_json(&json!({"key": key, "deleted": deleted, "detail": detail}));
        } else if deleted {
            println!("deleted");
        } else {
            eprintln!("verrou: {key:?} not deleted: {detail}");
        }
    };
    // Without --version: delete whatever version is there (a few rounds in
    // case writers keep changing it).
    for _ in 0..10 {
        let expected = match args.version {
            Some(v) => v,
            None => match store.get(key).await? {
                Some(v) => v.version,
                None => {
                    report(false, "absent");
                    return Ok(NO);
                }
            },
        };
        match store.delete(key, expected).await? {
            DeleteOutcome::Deleted => {
                report(true, "deleted");
                return Ok(OK);
            }
            DeleteOutcome::Conflict { current_version } if args.version.is_some() => {
                report(false, &format!("conflict: it is at version {current_version}"));
                return Ok(NO);
            }
            DeleteOutcome::Conflict { .. } => continue,
            _ => {
                report(false, "absent");
                return Ok(NO);
            }
        }
    }
    report(false, "conflict: other writers kept changing it");
    Ok(NO)
}
