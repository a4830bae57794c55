//! The versioned store: scripts on a hash `{v value, n version, w write id}`.

use async_trait::async_trait;
use deadpool_redis::redis::{self, Value};
use lock_core::raw::ttl_millis;
use lock_core::{CasOutcome, CreateOutcome, DeleteOutcome, Expiry, LockToken, Result, Versioned, VersionedStore};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Access, BACKEND, unexpected_reply};
use crate::keys::Helper;
use crate::replies::{array, bytes_of, expiry_arg, int_at, not_versioned, status, u64_at};
use crate::{Call, RedisLuaBackend, check_key};

#[async_trait]
impl VersionedStore for RedisLuaBackend {
    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        check_key(key)?;
        let cmd = redis::cmd("HMGET").arg(key).arg("v").arg("n").to_owned();
        let value = self.inner.exec("get", key, Access::Read, Call::Command(cmd)).await?;
        let items = array(&value).ok_or_else(|| unexpected_reply("get", key, &value))?;
        match (items.first(), items.get(1)) {
            (Some(Value::Nil), Some(Value::Nil)) => Ok(None),
            (Some(v), Some(n)) => {
                let version = bytes_of(n)
                    .and_then(|b| std::str::from_utf8(&b).ok()?.parse::<u64>().ok())
                    .ok_or_else(|| not_versioned(key))?;
                let value = bytes_of(v).ok_or_else(|| not_versioned(key))?;
                Ok(Some(Versioned { value, version }))
            }
            _ => Err(unexpected_reply("get", key, &value)),
        }
    }

    async fn create(&self, key: &str, value: &[u8], expiry: Expiry) -> Result<CreateOutcome> {
        check_key(key)?;
        let mut ttl = itoa::Buffer::new();
        // A new key has no TTL to keep: persisting is keeping.
        let ttl = match expiry_arg(expiry, &mut ttl)? {
            "-1" => "",
            other => other,
        };
        let id = self.inner.write_ids.next();
        let call = Call::Script {
            script: &self.inner.scripts.create,
            keys: &[key],
            args: &[value, ttl.as_bytes(), id.as_bytes()],
        };
        let reply = self
            .inner
            .versioned_write("create", key, call, |v| status(v) == Some(1))
            .await?;
        let items = array(&reply).ok_or_else(|| unexpected_reply("create", key, &reply))?;
        match int_at(items, 0) {
            Some(1) => Ok(CreateOutcome::Created {
                version: u64_at(items, 1).ok_or_else(|| unexpected_reply("create", key, &reply))?,
            }),
            Some(0) => Ok(CreateOutcome::Exists),
            Some(-1) => Err(not_versioned(key)),
            _ => Err(unexpected_reply("create", key, &reply)),
        }
    }

    async fn compare_and_set(&self, key: &str, expected: u64, value: &[u8], expiry: Expiry) -> Result<CasOutcome> {
        check_key(key)?;
        let mut expiry_buf = itoa::Buffer::new();
        let expiry = expiry_arg(expiry, &mut expiry_buf)?;
        let mut expected_buf = itoa::Buffer::new();
        let expected = expected_buf.format(expected);
        let id = self.inner.write_ids.next();
        let call = Call::Script {
            script: &self.inner.scripts.compare_and_set,
            keys: &[key],
            args: &[expected.as_bytes(), value, expiry.as_bytes(), id.as_bytes()],
        };
        let reply = self
            .inner
            .versioned_write("compare_and_set", key, call, |v| status(v) == Some(1))
            .await?;
        let items = array(&reply).ok_or_else(|| unexpected_reply("compare_and_set", key, &reply))?;
        let bad = || unexpected_reply("compare_and_set", key, &reply);
        match int_at(items, 0) {
            Some(1) => Ok(CasOutcome::Written {
                version: u64_at(items, 1).ok_or_else(bad)?,
            }),
            Some(0) => Ok(CasOutcome::Conflict(Versioned {
                value: items.get(1).and_then(bytes_of).ok_or_else(bad)?,
                version: u64_at(items, 2).ok_or_else(bad)?,
            })),
            Some(2) => Ok(CasOutcome::Missing),
            Some(-1) => Err(not_versioned(key)),
            _ => Err(bad()),
        }
    }

    async fn delete(&self, key: &str, expected: u64) -> Result<DeleteOutcome> {
        check_key(key)?;
        let mut expected_buf = itoa::Buffer::new();
        let expected = expected_buf.format(expected);
        let i = &self.inner;
        let tombstone = i.tombstone(key, Helper::Deleted);
        let id = i.write_ids.next();
        let mut ms = itoa::Buffer::new();
        let ms = ms.format(ttl_millis(i.resend_window())).as_bytes();
        let call = match &tombstone {
            Some(tombstone) => Call::Script {
                script: &i.scripts.delete_resendable,
                keys: &[key, tombstone.as_str()],
                args: &[expected.as_bytes(), id.as_bytes(), ms],
            },
            None => Call::Script {
                script: &i.scripts.delete,
                keys: &[key],
                args: &[expected.as_bytes()],
            },
        };
        let reply = self
            .inner
            .versioned_write("delete", key, call, |v| status(v) == Some(1))
            .await?;
        let items = array(&reply).ok_or_else(|| unexpected_reply("delete", key, &reply))?;
        match int_at(items, 0) {
            Some(1) => Ok(DeleteOutcome::Deleted),
            Some(0) => Ok(DeleteOutcome::Conflict {
                current_version: u64_at(items, 1).ok_or_else(|| unexpected_reply("delete", key, &reply))?,
            }),
            Some(2) => Ok(DeleteOutcome::Missing),
            Some(-1) => Err(not_versioned(key)),
            _ => Err(unexpected_reply("delete", key, &reply)),
        }
    }

    fn name(&self) -> &str {
        BACKEND
    }
}

/// Unique ids of versioned writes, so a re-sent write recognises itself.
pub(crate) struct WriteIds {
    prefix: u64,
    next: AtomicU64,
}

impl WriteIds {
    pub(crate) fn new() -> Result<Self> {
        let bytes = *LockToken::generate()?.as_bytes();
        let mut prefix = [0u8; 8];
        prefix.copy_from_slice(&bytes[..8]);
        Ok(WriteIds {
            prefix: u64::from_le_bytes(prefix),
            next: AtomicU64::new(0),
        })
    }

    pub(crate) fn next(&self) -> String {
        format!("{:016x}{:x}", self.prefix, self.next.fetch_add(1, Ordering::Relaxed))
    }
}
