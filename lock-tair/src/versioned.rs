//! [`VersionedStore`] on exString keys: `EXGET`, `EXSET NX`, `EXCAS`,
//! `EXCAD`, with the TTL option every write must carry (Tair drops a key's
//! TTL otherwise).

use async_trait::async_trait;
use fred::types::Value;
use lock_core::raw::validate_ttl;
use lock_core::{CasOutcome, CreateOutcome, DeleteOutcome, Error, Expiry, Result, Versioned, VersionedStore};

use crate::conn::{Access, COMMANDS, NAME, map_error, send, unexpected_reply};
use crate::replies::{self, TriState};
use crate::{TairBackend, keys, px};

/// The TTL argument of a versioned write, exactly as the caller asked.
pub(crate) fn push_expiry(args: &mut Vec<Value>, expiry: Expiry) -> Result<()> {
    match expiry {
        Expiry::Keep => args.push(Value::from_static_str("KEEPTTL")),
        Expiry::Persist => {} // no option: Tair removes the TTL, as asked
        Expiry::After(ttl) => {
            validate_ttl(ttl)?;
            args.push(Value::from_static_str("PX"));
            args.push(px(ttl).into());
        }
        // A policy this version does not know must not fall back to "no
        // option", which would silently remove the TTL.
        other => return Err(Error::invalid(format!("unsupported expiry {other:?}"))),
    }
    Ok(())
}

/// A version as a command argument: Tair parses versions as signed 64-bit.
pub(crate) fn version_arg(version: u64) -> Result<i64> {
    i64::try_from(version)
        .map_err(|_| Error::invalid(format!("version {version} is above Tair's maximum {}", i64::MAX)))
}

#[async_trait]
impl VersionedStore for TairBackend {
    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        self.check_key(key)?;
        let reply = send(self.inner.commands.next(), &COMMANDS.exget, vec![key.into()])
            .await
            .map_err(|e| map_error("EXGET", key, Access::Read, e))?;
        replies::exget(&reply).ok_or_else(|| unexpected_reply("EXGET", key, Access::Read, &reply))
    }

    async fn create(&self, key: &str, value: &[u8], expiry: Expiry) -> Result<CreateOutcome> {
        self.check_key(key)?;
        let mut args: Vec<Value> = vec![key.into(), value.into()];
        push_expiry(&mut args, expiry)?;
        let initial = keys::random_initial_version()?;
        args.extend([
            Value::from_static_str("NX"),
            Value::from_static_str("ABS"),
            version_arg(initial)?.into(),
            Value::from_static_str("WITHVERSION"),
        ]);
        let mut writer = self.writer();
        let reply = send(writer.client, &COMMANDS.exset, args)
            .await
            .map_err(|e| map_error("EXSET NX", key, Access::Write, e))?;
        match replies::exset_nx(&reply) {
            Some(Some(version)) => {
                self.confirm_write(&mut writer, "EXSET NX", key).await?;
                Ok(CreateOutcome::Created { version })
            }
            Some(None) => Ok(CreateOutcome::Exists),
            None => Err(unexpected_reply("EXSET NX", key, Access::Write, &reply)),
        }
    }

    async fn compare_and_set(&self, key: &str, expected: u64, value: &[u8], expiry: Expiry) -> Result<CasOutcome> {
        self.check_key(key)?;
        let mut args: Vec<Value> = vec![key.into(), value.into(), version_arg(expected)?.into()];
        push_expiry(&mut args, expiry)?;
        let mut writer = self.writer();
        let reply = send(writer.client, &COMMANDS.excas, args)
            .await
            .map_err(|e| map_error("EXCAS", key, Access::Write, e))?;
        let outcome = replies::excas(&reply).ok_or_else(|| unexpected_reply("EXCAS", key, Access::Write, &reply))?;
        if let CasOutcome::Written { .. } = outcome {
            self.confirm_write(&mut writer, "EXCAS", key).await?;
        }
        Ok(outcome)
    }

    async fn delete(&self, key: &str, expected: u64) -> Result<DeleteOutcome> {
        self.check_key(key)?;
        let args: Vec<Value> = vec![key.into(), version_arg(expected)?.into()];
        let mut writer = self.writer();
        let reply = send(writer.client, &COMMANDS.excad, args)
            .await
            .map_err(|e| map_error("EXCAD", key, Access::Write, e))?;
        match replies::tri_state(&reply) {
            Some(TriState::Done) => {
                self.confirm_write(&mut writer, "EXCAD", key).await?;
                Ok(DeleteOutcome::Deleted)
            }
            Some(TriState::Missing) => Ok(DeleteOutcome::Missing),
            // EXCAD does not say what the version is now: one EXGET more, on
            // this (rare) path only. If the key vanished meanwhile, it is missing.
            Some(TriState::Mismatch) => Ok(match self.get(key).await? {
                Some(now) => DeleteOutcome::Conflict {
                    current_version: now.version,
                },
                None => DeleteOutcome::Missing,
            }),
            None => Err(unexpected_reply("EXCAD", key, Access::Write, &reply)),
        }
    }

    fn name(&self) -> &str {
        NAME
    }
}
